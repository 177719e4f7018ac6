"""Counters per queue and job: how many tasks succeeded, failed and died, and how long
their attempts ran, read from the minute and hour buckets that the scripts which end tasks
write (docs/metrics.md, "Counters in Redis").

Each read is a procedure, with a blocking function and its ``a*`` async twin; every bucket of a
range is read in one round trip.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal

from .. import config
from .._redis import commands
from .._redis.calls import Call, number, shown
from .._redis.keys import check_queue_name, queue_keys, queues_key
from ..errors import short
from ..server.procedures import Procedure, run_async, run_sync

__all__ = [
    "DURATION_BUCKETS",
    "Bucket",
    "Counts",
    "ajob_summary",
    "aseries",
    "asummary",
    "atotals",
    "job_summary",
    "series",
    "summary",
    "totals",
]

DURATION_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)
"""Upper bounds (seconds) of the run-time buckets; one more bucket holds the longer runs."""

Step = Literal["minute", "hour"]
_SIZE: dict[str, int] = {"minute": 60, "hour": 3600}
# The longest range one read may cover: two days of minutes (they are kept 2 days), a week
# of hours (kept 8 days).
MAX_RANGE: dict[str, float] = {"minute": 2 * 86400.0, "hour": 7 * 86400.0}
MAX_WINDOW = 7 * 86400.0
_OUTCOMES = ("succeeded", "failed", "dead")
_EMPTY_DURATIONS = (0,) * (len(DURATION_BUCKETS) + 1)


@dataclass(frozen=True)
class Counts:
    """What ended in a bucket (or a sum of buckets): outcomes, and run times of the
    attempts a runner reported (``durations``: counts per bucket of
    :data:`DURATION_BUCKETS`, not cumulative, the last one above its last bound)."""

    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    duration_sum: float = 0.0  # seconds
    durations: tuple[int, ...] = field(default=_EMPTY_DURATIONS)

    @property
    def processed(self) -> int:
        """Attempts that ended: succeeded + failed + dead."""
        return self.succeeded + self.failed + self.dead

    def __add__(self, other: Counts) -> Counts:
        if not isinstance(other, Counts):
            return NotImplemented
        return Counts(
            self.succeeded + other.succeeded,
            self.failed + other.failed,
            self.dead + other.dead,
            self.duration_sum + other.duration_sum,
            tuple(a + b for a, b in zip(self.durations, other.durations, strict=True)),
        )

    @property
    def mean_duration(self) -> float | None:
        """The mean run time in seconds of the timed attempts (None: none was timed)."""
        timed = sum(self.durations)
        return self.duration_sum / timed if timed else None

    def duration_quantile(self, q: float) -> float | None:
        """An estimate of the ``q`` quantile (0..1) of run time in seconds, interpolated
        inside its bucket as Prometheus' histogram_quantile does (None: none was timed)."""
        if not 0 <= q <= 1:
            raise ValueError(f"a quantile is between 0 and 1, got {short(q)}")
        timed = sum(self.durations)
        if not timed:
            return None
        rank = q * timed
        seen = 0
        for i, n in enumerate(self.durations):
            if n and seen + n >= rank:
                if i == len(DURATION_BUCKETS):  # above the last bound: no upper end
                    return DURATION_BUCKETS[-1]
                low = DURATION_BUCKETS[i - 1] if i else 0.0
                return low + (DURATION_BUCKETS[i] - low) * (rank - seen) / n
            seen += n
        return DURATION_BUCKETS[-1]  # (not reached: rank <= timed)


@dataclass(frozen=True)
class Bucket:
    """The counts of one job on one queue in one minute or hour."""

    start: float  # epoch seconds of the bucket's start
    queue: str
    job: str
    counts: Counts


def parse_counters(fields: dict[str, str]) -> dict[str, Counts]:
    """The counts per job of one counters hash (``<job>|<field>``: docs/wire-format.md);
    fields it does not know are left out. A job name that is not UTF-8 is read with U+FFFD
    for its bytes (two such names that read alike add up)."""
    found: dict[str, list[int]] = {}
    for name, value in fields.items():
        job, sep, part = name.rpartition("|")
        index = _FIELDS.get(part)
        if sep and index is not None:
            tally = found.setdefault(shown(job), [0] * _WIDTH)
            n = number(value)
            tally[index] += n
            if len(part) > 1 and part != "ms":  # an outcome with a run-time bucket
                tally[_OUTCOME_OF[part[0]]] += n
    return {job: _counts(tally) for job, tally in found.items()}


# Where each field of a counters hash adds up (see parse_counters): the outcomes s, f, d
# (0..2), ms (3), then the run-time buckets, whatever the outcome (4..).
_OUTCOME_OF = {"s": 0, "f": 1, "d": 2}
_FIELDS: dict[str, int] = {
    **_OUTCOME_OF,
    "ms": 3,
    **{f"{o}{i}": 4 + i for o in _OUTCOME_OF for i in range(len(DURATION_BUCKETS) + 1)},
}
_WIDTH = 4 + len(DURATION_BUCKETS) + 1


def _counts(tally: list[int]) -> Counts:
    return Counts(tally[0], tally[1], tally[2], tally[3] / 1000, tuple(tally[4:]))


# -- the public reads -------------------------------------------------------------------------


def series(
    settings: config.Settings | None = None,
    *,
    queues: list[str] | None = None,
    since: datetime | float,
    until: datetime | float | None = None,
    step: Step = "minute",
) -> list[Bucket]:
    """The non-empty buckets of ``step`` ("minute" or "hour") that hold a moment from
    ``since`` to ``until`` (default: the server's now), oldest first, one per queue and job.
    A range covers at most two days of minutes, or a week of hours."""
    settings, procedure = _series_procedure(settings, queues, since, until, step)
    return run_sync(procedure, settings.redis_url)


async def aseries(
    settings: config.Settings | None = None,
    *,
    queues: list[str] | None = None,
    since: datetime | float,
    until: datetime | float | None = None,
    step: Step = "minute",
) -> list[Bucket]:
    """The async twin of :func:`series`."""
    settings, procedure = _series_procedure(settings, queues, since, until, step)
    return await run_async(procedure, settings.redis_url)


def totals(
    settings: config.Settings | None = None, *, queues: list[str] | None = None
) -> dict[tuple[str, str], Counts]:
    """The counts of each (queue, job) since counting began: monotonic, never expiring."""
    settings, names = _checked(settings, queues)
    return run_sync(_totals(settings, names), settings.redis_url)


async def atotals(
    settings: config.Settings | None = None, *, queues: list[str] | None = None
) -> dict[tuple[str, str], Counts]:
    """The async twin of :func:`totals`."""
    settings, names = _checked(settings, queues)
    return await run_async(_totals(settings, names), settings.redis_url)


def summary(
    settings: config.Settings | None = None,
    *,
    queues: list[str] | None = None,
    window: timedelta | float = 3600,
) -> dict[str, Counts]:
    """The counts of each queue over the last ``window`` (at most a week; whole minutes,
    the current one included), by the server's clock. Every queue asked (default: every
    known queue) has an entry."""
    settings, names, seconds = _window_args(settings, queues, window)
    return _by_queue(run_sync(_window(settings, names, seconds), settings.redis_url))


async def asummary(
    settings: config.Settings | None = None,
    *,
    queues: list[str] | None = None,
    window: timedelta | float = 3600,
) -> dict[str, Counts]:
    """The async twin of :func:`summary`."""
    settings, names, seconds = _window_args(settings, queues, window)
    found = await run_async(_window(settings, names, seconds), settings.redis_url)
    return _by_queue(found)


def job_summary(
    settings: config.Settings | None = None,
    *,
    queues: list[str] | None = None,
    window: timedelta | float = 3600,
) -> dict[tuple[str, str], Counts]:
    """As :func:`summary`, per (queue, job) that counted something in the window."""
    settings, names, seconds = _window_args(settings, queues, window)
    return run_sync(_window(settings, names, seconds), settings.redis_url)[1]


async def ajob_summary(
    settings: config.Settings | None = None,
    *,
    queues: list[str] | None = None,
    window: timedelta | float = 3600,
) -> dict[tuple[str, str], Counts]:
    """The async twin of :func:`job_summary`."""
    settings, names, seconds = _window_args(settings, queues, window)
    return (await run_async(_window(settings, names, seconds), settings.redis_url))[1]


# -- arguments --------------------------------------------------------------------------------


def _checked(
    settings: config.Settings | None, queues: list[str] | None
) -> tuple[config.Settings, list[str] | None]:
    if settings is not None and not isinstance(settings, config.Settings):
        raise TypeError(f"settings must be a culex Settings or None, got {type(settings).__name__}")
    if queues is not None:
        if isinstance(queues, str) or not isinstance(queues, list | tuple):
            raise TypeError(f"queues must be a list of queue names, got {short(queues)}")
        queues = [check_queue_name(q) for q in queues]
    return settings or config.settings(), queues


def _moment(value: object, name: str) -> float:
    """Epoch seconds of a datetime (a naive one is local time) or of a number."""
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
        return float(value)
    raise TypeError(f"{name} must be a datetime or epoch seconds, got {short(value)}")


def _window_args(
    settings: config.Settings | None, queues: list[str] | None, window: object
) -> tuple[config.Settings, list[str] | None, float]:
    settings, names = _checked(settings, queues)
    if isinstance(window, timedelta):
        seconds = window.total_seconds()
    elif isinstance(window, int | float) and not isinstance(window, bool):
        seconds = float(window)
    else:
        raise TypeError(f"window must be a timedelta or seconds, got {short(window)}")
    if not 0 < seconds <= MAX_WINDOW:
        raise ValueError(f"window must be more than 0 and at most 7 days, got {short(seconds)} s")
    return settings, names, seconds


def _series_procedure(
    settings: config.Settings | None,
    queues: list[str] | None,
    since: object,
    until: object,
    step: object,
) -> tuple[config.Settings, Procedure[list[Bucket]]]:
    settings, names = _checked(settings, queues)
    if step not in _SIZE:
        raise ValueError(f'step must be "minute" or "hour", got {short(step)}')
    start = _moment(since, "since")
    end = None if until is None else _moment(until, "until")
    if end is not None:
        _check_range(start, end, str(step))
    return settings, _series(settings, names, start, end, str(step))


def _check_range(start: float, end: float, step: str) -> None:
    if end < start:
        raise ValueError(f"until ({end}) is before since ({start})")
    if end - start > MAX_RANGE[step]:
        longest = "two days of minutes" if step == "minute" else "a week of hours"
        raise ValueError(
            f"a range of {(end - start) / 3600:.1f} hours is too long: one read covers at most "
            f'{longest} (read step="hour", or in parts)'
        )


# -- procedures ------------------------------------------------------------------------------------


def _read(calls: list[Call[Any]]) -> Procedure[list[Any]]:
    """Send ``calls`` in one round trip (none when there are none); a refused one raises."""
    replies = (yield calls) if calls else []
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _names_and_now(
    settings: config.Settings, queues: list[str] | None
) -> Procedure[tuple[list[str], float]]:
    """The queues (given, or every known one) and the server's clock, in one round trip."""
    calls: list[Call[Any]] = [commands.server_time()]
    if queues is None:
        calls.append(commands.known_queues(queues_key(settings.prefix)))
    replies = yield calls
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return (queues if queues is not None else replies[1]), replies[0] / 1000


def _series(
    settings: config.Settings,
    queues: list[str] | None,
    since: float,
    until: float | None,
    step: str,
) -> Procedure[list[Bucket]]:
    if until is None or queues is None:
        queues, now = yield from _names_and_now(settings, queues)
        if until is None:
            until = now
            _check_range(since, until, step)
    size = _SIZE[step]
    starts = range(int(since // size) * size, int(until // size) * size + 1, size)
    pairs = [(q, start) for q in queues for start in starts]
    prefix = settings.prefix
    calls: list[Call[Any]] = [
        commands.read_counters(queue_keys(prefix, q), step, start) for q, start in pairs
    ]
    if step == "hour":  # (and the minute of each queue that its hour does not hold yet)
        calls += [commands.unfolded_minute(queue_keys(prefix, q)) for q in queues]
    found = yield from _read(calls)
    sums: dict[tuple[float, str, str], Counts] = {}
    for (q, start), fields in zip(pairs, found[: len(pairs)], strict=True):
        for job, counts in parse_counters(fields).items():
            sums[float(start), q, job] = counts
    if step == "hour":
        minutes = dict(zip(queues, found[len(pairs) :], strict=True))
        late = yield from _unfolded(prefix, minutes, set(starts))
        for (q, minute), by_job in late.items():
            for job, counts in by_job.items():
                key = (float(minute - minute % 3600), q, job)
                sums[key] = sums.get(key, Counts()) + counts
    return [Bucket(start, q, job, sums[start, q, job]) for start, q, job in sorted(sums)]


def _unfolded(
    prefix: str, minutes: dict[str, int | None], hours: set[int] | None
) -> Procedure[dict[tuple[str, int], dict[str, Counts]]]:
    """The counts of each queue's minute that its hour bucket and the totals do not hold
    yet (include/stats.lua folds a minute into them once a later one is counted), for the
    queues whose such minute lies in one of ``hours`` (None: any hour)."""
    wanted = [
        (q, m)
        for q, m in minutes.items()
        if m is not None and (hours is None or m - m % 3600 in hours)
    ]
    found = yield from _read(
        [commands.read_counters(queue_keys(prefix, q), "minute", m) for q, m in wanted]
    )
    return {pair: parse_counters(fields) for pair, fields in zip(wanted, found, strict=True)}


def _totals(
    settings: config.Settings, queues: list[str] | None
) -> Procedure[dict[tuple[str, str], Counts]]:
    if queues is None:
        queues = yield commands.known_queues(queues_key(settings.prefix))
    found = yield from _read(
        [commands.read_counter_totals(queue_keys(settings.prefix, q)) for q in queues]
    )
    return (
        yield from totals_with_last_minute(settings.prefix, dict(zip(queues, found, strict=True)))
    )


def totals_with_last_minute(
    prefix: str, read: dict[str, dict[str, str]]
) -> Procedure[dict[tuple[str, str], Counts]]:
    """Each (queue, job)'s counts since counting began, from each queue's totals hash as
    read (``read``: queue -> its fields), plus the last minute counted, which the totals do
    not hold yet (read here): what :func:`totals` returns, for a reader that read the
    totals hashes together with other things."""
    sums = {
        (q, job): counts
        for q, fields in read.items()
        for job, counts in parse_counters(fields).items()
    }
    minutes = {q: _minute(fields) for q, fields in read.items()}
    late = yield from _unfolded(prefix, minutes, None)
    for (q, _), by_job in late.items():
        for job, counts in by_job.items():
            sums[q, job] = sums.get((q, job), Counts()) + counts
    return dict(sorted(sums.items()))


def _minute(totals: dict[str, str]) -> int | None:
    """The minute a queue's totals name as not yet added to them (see _unfolded)."""
    value = number(totals.get("minute"), -1)
    return value if value >= 0 else None


def window_buckets(now: float, window: float) -> tuple[list[int], list[int]]:
    """The hour and minute buckets (their starts) that make up the last ``window`` seconds
    before ``now``: whole minutes, the current one included; whole hours are read from their
    hour bucket, the minutes at the edges from theirs. Minutes are kept 2 days, so a window
    whose first minute is older than 47 hours starts at that minute's hour."""
    current = int(now // 60) * 60
    first = current - (math.ceil(window / 60) - 1) * 60
    if current - first > 47 * 3600:
        first -= first % 3600
    end = current + 60  # (exclusive)
    full_from = -(-first // 3600) * 3600
    full_to = end - end % 3600
    if full_from >= full_to:
        return [], list(range(first, end, 60))
    hours = list(range(full_from, full_to, 3600))
    minutes = [*range(first, full_from, 60), *range(full_to, end, 60)]
    return hours, minutes


def _window(
    settings: config.Settings, queues: list[str] | None, window: float
) -> Procedure[tuple[list[str], dict[tuple[str, str], Counts]]]:
    """Every queue asked, and the counts of each (queue, job) over the last ``window``."""
    names, now = yield from _names_and_now(settings, queues)
    hours, minutes = window_buckets(now, window)
    prefix = settings.prefix
    pairs = [
        (q, step, start)
        for q in names
        for step, starts in (("hour", hours), ("minute", minutes))
        for start in starts
    ]
    calls: list[Call[Any]] = [
        commands.read_counters(queue_keys(prefix, q), step, start) for q, step, start in pairs
    ]
    calls += [commands.unfolded_minute(queue_keys(prefix, q)) for q in names]
    found = yield from _read(calls)
    sums: dict[tuple[str, str], Counts] = {}
    for (q, _, _), fields in zip(pairs, found[: len(pairs)], strict=True):
        for job, counts in parse_counters(fields).items():
            sums[q, job] = sums.get((q, job), Counts()) + counts
    # A minute that its hour bucket does not hold yet counts when that hour is read whole
    # (a minute read as a minute holds its counts already).
    unfolded = dict(zip(names, found[len(pairs) :], strict=True))
    late = yield from _unfolded(prefix, unfolded, set(hours))
    for (q, _), by_job in late.items():
        for job, counts in by_job.items():
            sums[q, job] = sums.get((q, job), Counts()) + counts
    return names, dict(sorted(sums.items()))


def _by_queue(found: tuple[list[str], dict[tuple[str, str], Counts]]) -> dict[str, Counts]:
    names, sums = found
    out = {q: Counts() for q in names}
    for (q, _), counts in sums.items():
        out[q] = out[q] + counts
    return out
