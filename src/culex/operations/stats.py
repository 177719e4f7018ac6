"""Counters per queue and job: how many tasks succeeded, failed and died, and how long
their attempts ran, read from the minute and hour buckets that the scripts which end tasks
write (docs/metrics.md, "Counters in Redis").

Each read is a procedure, with a blocking function and its ``a*`` async twin; every bucket of a
range is read in one round trip. What a bucket holds, :class:`Counts` (which add up and
estimate run-time quantiles), is in counters.py.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any, Literal, TypeVar

from .. import config
from .._redis import commands
from .._redis.calls import Call, number
from .._redis.keys import check_queue_name, queue_keys
from ..errors import short
from ..server.procedures import Procedure, raised, run_async, run_sync
from .counters import DURATION_BUCKETS, Bucket, Counts, parse_counters
from .known_queues import names_and_now, queue_names

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

Step = Literal["minute", "hour"]
_SIZE: dict[str, int] = {"minute": 60, "hour": 3600}
# The longest range one read may cover: two days of minutes (they are kept 2 days), a week
# of hours (kept 8 days).
MAX_RANGE: dict[str, float] = {"minute": 2 * 86400.0, "hour": 7 * 86400.0}
MAX_WINDOW = 7 * 86400.0


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

K = TypeVar("K")


def _series(
    settings: config.Settings,
    queues: list[str] | None,
    since: float,
    until: float | None,
    step: str,
) -> Procedure[list[Bucket]]:
    if until is None or queues is None:
        queues, now = yield from names_and_now(settings.prefix, queues)
        if until is None:
            until = now / 1000
            _check_range(since, until, step)
    size = _SIZE[step]
    starts = range(int(since // size) * size, int(until // size) * size + 1, size)
    reads = [(q, step, start) for q in queues for start in starts]
    # (with hours: the minute of each queue that its hour does not hold yet, in that hour)
    sums = yield from _summed(
        settings.prefix, reads, queues if step == "hour" else [], set(starts), _at_start
    )
    return [Bucket(start, q, job, sums[start, q, job]) for start, q, job in sorted(sums)]


def _at_start(queue: str, start: int, job: str) -> tuple[float, str, str]:
    return float(start), queue, job


def _of_job(queue: str, start: int, job: str) -> tuple[str, str]:
    return queue, job


def _summed(
    prefix: str,
    reads: list[tuple[str, str, int]],
    unfolded: list[str],
    hours: set[int],
    key: Callable[[str, int, str], K],
) -> Procedure[dict[K, Counts]]:
    """The counts of the buckets ``reads`` (queue, step, start), summed by ``key(queue,
    start, job)``, in one round trip; with them, the minute of each queue of ``unfolded``
    that its hour bucket does not hold yet, counted in its hour when that hour is one of
    ``hours`` (read whole: a minute read as a minute holds its counts already)."""
    calls: list[Call[Any]] = [
        commands.read_counters(queue_keys(prefix, q), step, start) for q, step, start in reads
    ]
    calls += [commands.unfolded_minute(queue_keys(prefix, q)) for q in unfolded]
    found = raised((yield calls)) if calls else []
    sums: dict[K, Counts] = {}
    for (q, _, start), fields in zip(reads, found[: len(reads)], strict=True):
        _add(sums, key, q, start, parse_counters(fields))
    minutes = dict(zip(unfolded, found[len(reads) :], strict=True))
    yield from _add_unfolded(prefix, minutes, hours, sums, key)
    return sums


def _add(
    sums: dict[K, Counts],
    key: Callable[[str, int, str], K],
    queue: str,
    start: int,
    by_job: dict[str, Counts],
) -> None:
    for job, counts in by_job.items():
        at = key(queue, start, job)
        sums[at] = sums.get(at, Counts()) + counts


def _add_unfolded(
    prefix: str,
    minutes: dict[str, int | None],
    hours: set[int] | None,
    sums: dict[K, Counts],
    key: Callable[[str, int, str], K],
) -> Procedure[None]:
    """Add to ``sums`` (by ``key(queue, start of its hour, job)``) the counts of each
    queue's minute that its hour bucket and the totals do not hold yet (include/stats.lua
    folds a minute into them once a later one is counted), for the queues whose such
    minute lies in one of ``hours`` (None: any hour)."""
    wanted = [
        (q, m)
        for q, m in minutes.items()
        if m is not None and (hours is None or m - m % 3600 in hours)
    ]
    calls = [commands.read_counters(queue_keys(prefix, q), "minute", m) for q, m in wanted]
    found = raised((yield calls)) if calls else []
    for (q, minute), fields in zip(wanted, found, strict=True):
        _add(sums, key, q, minute - minute % 3600, parse_counters(fields))


def _totals(
    settings: config.Settings, queues: list[str] | None
) -> Procedure[dict[tuple[str, str], Counts]]:
    queues = yield from queue_names(settings.prefix, queues)
    calls = [commands.read_counter_totals(queue_keys(settings.prefix, q)) for q in queues]
    found = raised((yield calls)) if calls else []
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
    sums: dict[tuple[str, str], Counts] = {}
    for q, fields in read.items():
        _add(sums, _of_job, q, 0, parse_counters(fields))
    minutes = {q: _minute(fields) for q, fields in read.items()}
    yield from _add_unfolded(prefix, minutes, None, sums, _of_job)
    return dict(sorted(sums.items()))


def _minute(totals: dict[str, str]) -> int | None:
    """The minute a queue's totals name as not yet added to them (see _add_unfolded)."""
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
    names, now = yield from names_and_now(settings.prefix, queues)
    hours, minutes = window_buckets(now / 1000, window)
    reads = [
        (q, step, start)
        for q in names
        for step, starts in (("hour", hours), ("minute", minutes))
        for start in starts
    ]
    sums = yield from _summed(settings.prefix, reads, names, set(hours), _of_job)
    return names, dict(sorted(sums.items()))


def _by_queue(found: tuple[list[str], dict[tuple[str, str], Counts]]) -> dict[str, Counts]:
    names, sums = found
    out = {q: Counts() for q in names}
    for (q, _), counts in sums.items():
        out[q] = out[q] + counts
    return out
