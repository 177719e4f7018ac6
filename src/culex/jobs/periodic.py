"""Periodic jobs: run on their own every interval, every n months, or on a cron expression.

Slots are computed here without I/O, from the server's clock. Whether a slot is enqueued
is decided in Redis by ``schedule.lua``: a slot's task id is ``<JobName>:<slot ms>`` and
the job's record remembers the latest slot decided, so any number of runners may run the
scheduler and each slot still runs once. The rules are in docs/periodic.md.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Any, ClassVar, Protocol

from .. import config
from .._redis import commands, enqueuing
from .._redis.enqueuing import Scheduled
from .._redis.keys import check_queue_name, queue_keys, queues_key
from ..errors import ConfigurationError, CulexError, short
from ..server.procedures import Procedure, run_async, run_sync
from .job import Job
from .registry import JobRegistry, registry
from .task import Task, new_id

if TYPE_CHECKING:
    from cronsim import CronSim

# zoneinfo and cronsim are imported where they are used: a runner without cron jobs or time
# zones does not carry them (bench/README.md, RSS).

logger = logging.getLogger("culex")

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


# -- schedules: when the slots are ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MonthSpan:
    """A span of calendar months (Mosquito's ``Time::MonthSpan``): ``run_every = months(3)``."""

    months: int

    def __post_init__(self) -> None:
        if isinstance(self.months, bool) or not isinstance(self.months, int) or self.months < 1:
            raise TypeError(
                f"a month span is a whole number of months >= 1, got {short(self.months)}"
            )


def months(n: int) -> MonthSpan:
    """``run_every = culex.months(n)``: midnight of the first of every n-th month."""
    return MonthSpan(n)


class Schedule(Protocol):
    """Where a periodic job's slots fall. Slots are ms since the epoch."""

    @property
    def tz(self) -> tzinfo:
        """The time zone the slots are computed (and shown) in."""
        ...

    def around(self, now_ms: int) -> tuple[int | None, int | None]:
        """The latest slot at or before ``now_ms``, and the first one after it."""
        ...


@dataclass(frozen=True, slots=True)
class Interval:
    """Every ``ms``, counted from the epoch, so that every runner computes the same slots."""

    ms: int
    tz: tzinfo = UTC

    def around(self, now_ms: int) -> tuple[int | None, int | None]:
        current = now_ms - now_ms % self.ms
        return current, current + self.ms

    def __str__(self) -> str:
        return f"every {timedelta(milliseconds=self.ms)}"


@dataclass(frozen=True, slots=True)
class Monthly:
    """Midnight of the first of every ``n``-th month in ``tz``, counted from January 1970."""

    n: int
    tz: tzinfo

    def around(self, now_ms: int) -> tuple[int | None, int | None]:
        local = instant(now_ms).astimezone(self.tz)
        index = (local.year - 1970) * 12 + local.month - 1
        index -= index % self.n
        current = self._slot(index)
        if current > now_ms:  # a month that begins in a DST gap, seen from inside the gap
            index -= self.n
            current = self._slot(index)
        return current, self._slot(index + self.n)

    def _slot(self, index: int) -> int:
        year, month = divmod(index, 12)
        return ms(wall_clock(datetime(1970 + year, month + 1, 1), self.tz))

    def __str__(self) -> str:
        every = "every month" if self.n == 1 else f"every {self.n} months"
        return f"{every} ({self.tz})"


@dataclass(frozen=True, slots=True)
class Cron:
    """A five-field cron expression in ``tz``, evaluated by cronsim.

    cronsim follows Debian cron: an expression with fixed minutes and hours names wall-clock
    times (a time in a spring-forward gap runs at the first minute after the gap, a time in
    a fall-back overlap runs once, at its first occurrence); one with ``*`` in the minute or
    hour field follows real time through a change.
    """

    expr: str
    tz: tzinfo

    def around(self, now_ms: int) -> tuple[int | None, int | None]:
        from cronsim import CronSim

        now = instant(now_ms)
        # cronsim's reverse iteration starts one tick before where it is put: one second
        # after now, so that a slot at exactly now counts as current.
        start = (now.replace(microsecond=0) + timedelta(seconds=1)).astimezone(self.tz)
        current = _first(CronSim(self.expr, start, reverse=True))
        # Then walk forward in real time: for wall-clock expressions cronsim's answers may lie
        # behind now (inside a fall-back overlap) or repeat (several times in one gap).
        walk = CronSim(
            self.expr, instant(now_ms if current is None else current).astimezone(self.tz)
        )
        for _ in range(1000):
            slot = _first(walk)
            if slot is None or slot > now_ms:
                return current, slot
            if current is None or slot > current:
                current = slot
        return current, None

    def __str__(self) -> str:
        return f"cron {self.expr} ({self.tz})"


def _first(slots: CronSim) -> int | None:
    try:
        return ms(next(slots))
    except StopIteration:  # cronsim gives up after 50 years without a match
        return None


def wall_clock(local: datetime, tz: tzinfo) -> datetime:
    """The instant of a wall-clock time in ``tz``, by culex's DST rule: a time that occurs
    twice (fall-back overlap) is its first occurrence; a time that does not exist
    (spring-forward gap) is the first instant after the gap."""
    local = local.replace(microsecond=0)
    first = local.replace(tzinfo=tz, fold=0)
    if first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == local:
        return first  # it exists; fold=0 is its first occurrence when it occurs twice
    # In a gap, fold=0 reads the time with the offset from before the change (an instant
    # after the gap) and fold=1 with the offset after it (an instant before the gap); the
    # change lies between them, found to the second.
    low = int(local.replace(tzinfo=tz, fold=1).timestamp())
    high = int(first.timestamp())
    after = datetime.fromtimestamp(high, tz).utcoffset()
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, tz).utcoffset() == after:
            high = middle
        else:
            low = middle
    return datetime.fromtimestamp(high, tz)


def instant(slot_ms: int) -> datetime:
    """A time in ms since the epoch as an aware UTC datetime (exact: no float)."""
    return EPOCH + timedelta(milliseconds=slot_ms)


def ms(when: datetime) -> int:
    """An aware datetime as ms since the epoch (exact: no float)."""
    return (when - EPOCH) // timedelta(milliseconds=1)


# -- the job class ----------------------------------------------------------------------


class PeriodicJob(Job):
    """A job that runs on its own: ``run_every`` (a timedelta, seconds or ``months(n)``) or
    ``cron`` (five fields, in ``timezone``). Takes no params and is never retried."""

    run_every: ClassVar[timedelta | float | MonthSpan | None] = None
    cron: ClassVar[str | None] = None
    timezone: ClassVar[str | None] = None  # an IANA name for cron and months; default UTC
    run_on_start: ClassVar[bool] = False  # a job no runner has seen runs at start, not later
    overlap: ClassVar[bool] = False  # enqueue a slot even while the previous run is unfinished
    max_retries: ClassVar[int] = 0  # a failure goes to dead; the next slot is the next try

    schedule_: ClassVar[Schedule]

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(abstract=abstract, **kwargs)
        try:
            _check(cls)
            if not abstract:
                cls.schedule_ = _schedule_of(cls)
        except TypeError:
            registry.remove(cls)  # a class that cannot run must not be found by runners
            raise

    @classmethod
    def slot_id(cls, slot_ms: int) -> str:
        """The task id of one slot: the same on every runner, so a slot is enqueued once."""
        return f"{cls.type_}:{slot_ms}"


def _check(cls: type[PeriodicJob]) -> None:
    name = cls.__name__
    if cls.params_:
        raise TypeError(
            f"{name}: periodic jobs take no params, but it declares {', '.join(cls.params_)} "
            "(a class setting needs ClassVar[...] or no annotation)"
        )
    if cls.max_retries != 0:
        raise TypeError(
            f"{name}: periodic jobs are never retried (max_retries stays 0): a failure goes "
            "to dead and the next slot runs as scheduled"
        )
    if cls.priority != 0:
        raise TypeError(
            f"{name}: a periodic job's tasks run at priority 0 (schedule.lua stores none), "
            f"got priority = {cls.priority}"
        )
    for flag in ("run_on_start", "overlap"):
        if not isinstance(getattr(cls, flag), bool):
            raise TypeError(f"{name}.{flag} must be True or False, got {short(getattr(cls, flag))}")


def _schedule_of(cls: type[PeriodicJob]) -> Schedule:
    """The job's schedule, checked when its class is defined."""
    name = cls.__name__
    if (cls.run_every is None) == (cls.cron is None):
        raise TypeError(
            f"{name} needs exactly one of run_every (a timedelta, seconds or culex.months(n)) "
            'and cron (e.g. "*/5 * * * *")'
        )
    tz = _zone(name, cls.timezone)
    if cls.cron is not None:
        return _cron(name, cls.cron, tz)
    if isinstance(cls.run_every, MonthSpan):
        return Monthly(cls.run_every.months, tz)
    if cls.timezone is not None:
        raise TypeError(
            f"{name}: timezone is for cron and months; run_every = timedelta counts from the "
            'epoch (UTC). For a time of day, use cron (e.g. cron = "0 3 * * *")'
        )
    try:
        seconds = config.seconds(cls.run_every, f"{name}.run_every", minimum=1)
    except ConfigurationError as exc:
        raise TypeError(f"{exc} (periodic jobs run at most once a second)") from None
    return Interval(round(seconds * 1000))


def _zone(name: str, timezone: object) -> tzinfo:
    if timezone is None:
        return UTC
    if not isinstance(timezone, str):
        raise TypeError(
            f'{name}.timezone must be a name like "Europe/Berlin", got {short(timezone)}'
        )
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise TypeError(f"{name}.timezone: unknown time zone {short(timezone)}") from None


def _cron(name: str, expr: object, tz: tzinfo) -> Cron:
    if not isinstance(expr, str) or len(expr.split()) != 5:
        raise TypeError(
            f"{name}.cron must have five fields (minute hour day month weekday), got {short(expr)}"
        )
    from cronsim import CronSim, CronSimError

    try:
        slots = CronSim(expr, datetime.now(tz))
    except CronSimError as exc:
        raise TypeError(f"{name}.cron {short(expr)}: {exc}") from None
    if _first(slots) is None:
        raise TypeError(f"{name}.cron {short(expr)} never matches")
    return Cron(expr, tz)


def periodic_jobs(jobs: JobRegistry, queues: Iterable[str]) -> list[type[PeriodicJob]]:
    """The registered periodic jobs whose queue is one of ``queues``."""
    wanted = set(queues)
    return [job for job in jobs if issubclass(job, PeriodicJob) and job.queue in wanted]


def format_slot(job: type[PeriodicJob], slot_ms: int) -> str:
    """A slot as the job's local time, for logs and ``culex periodic``."""
    return instant(slot_ms).astimezone(job.schedule_.tz).strftime("%Y-%m-%d %H:%M:%S %Z")


# -- records: what a reader without the classes finds --------------------------------------

RECORD_KEEP_MS = 7 * 24 * 3_600_000
"""How long a job's record (and its registry entry) outlives its next slot when no scheduler
renews it: the job is no longer deployed, or every runner is down (schedule.lua's KEEP_MS)."""


def described(job: type[PeriodicJob]) -> tuple[tuple[str, str], ...]:
    """The fields of a job's record that let a reader show it without its class."""
    return (
        ("job", job.type_),
        ("queue", job.queue),
        ("schedule", str(job.schedule_)),
        ("timezone", job.timezone or ""),
    )


def record_expiry(next_slot_ms: int | None, now_ms: int) -> int:
    """When a record written at ``now_ms`` ends unless renewed (as schedule.lua computes)."""
    return max(now_ms if next_slot_ms is None else next_slot_ms, now_ms) + RECORD_KEEP_MS


def zone_of(name: str) -> tzinfo:
    """The time zone a record names ("" or one this machine does not know: UTC)."""
    if not name:
        return UTC
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC


def registry_entry(queue: str, job_type: str) -> str:
    """A job's member in the registry of periodic jobs (neither name holds a space)."""
    return f"{queue} {job_type}"


def registry_names(entry: str) -> tuple[str, str]:
    """(queue, job type) of a registry member."""
    queue, _, job_type = entry.partition(" ")
    return queue, job_type


# -- trigger: one run now ---------------------------------------------------------------


def trigger(
    job: str | type[PeriodicJob],
    queue: str | None = None,
    settings: config.Settings | None = None,
) -> Task:
    """Enqueue one run of a periodic job now, outside its schedule (``culex periodic
    trigger``): the task's hash says ``trigger = manual``, and the job's slots are left alone.

    ``job`` is its class, or its name with its ``queue`` (no class needed: the job must have
    a record, written by a runner's scheduler; else :class:`UnknownPeriodicJob`)."""
    settings = settings or config.settings()
    return run_sync(_trigger(job, queue, settings), settings.redis_url)


async def atrigger(
    job: str | type[PeriodicJob],
    queue: str | None = None,
    settings: config.Settings | None = None,
) -> Task:
    """The async twin of :func:`trigger`."""
    settings = settings or config.settings()
    return await run_async(_trigger(job, queue, settings), settings.redis_url)


class UnknownPeriodicJob(CulexError, LookupError):
    """No record of this periodic job on this queue: no runner schedules it (or its record
    expired, a week after its last slot)."""


def _trigger(
    job: str | type[PeriodicJob], queue: str | None, settings: config.Settings
) -> Procedure[Task]:
    job_type, queue, job_class = _target(job, queue)
    keys = queue_keys(settings.prefix, queue)
    call = enqueuing.schedule(
        keys,
        job_type,
        f"{job_type}:trigger:{new_id()}",
        slot_ms=None,
        next_slot_ms=None,
        overlap=True,
        run_new=job_class is not None,  # by name: only a job that has a record
        max_retries=0,
        record=() if job_class is None else described(job_class),
    )
    if job_class is not None:
        yield commands.register_queue(queues_key(settings.prefix), queue)
    done: Scheduled = yield call
    if done.outcome == "unknown":
        raise UnknownPeriodicJob(
            f"no periodic job {short(job_type)} on queue {short(queue)}: no runner schedules it "
            "(see culex periodic for the jobs there are)"
        )
    return Task(done.task_id, queue, settings.redis_url, job_class, settings.prefix)


def _target(
    job: str | type[PeriodicJob], queue: str | None
) -> tuple[str, str, type[PeriodicJob] | None]:
    """(job type, queue, class or None) of a trigger's arguments, checked before any I/O."""
    if queue is not None and not isinstance(queue, str):
        raise TypeError(f"a queue name must be a str, got {short(queue)} (settings go by keyword)")
    if isinstance(job, type) and issubclass(job, PeriodicJob):
        if queue is not None and queue != job.queue:
            raise ValueError(f"{job.__name__} runs on queue {short(job.queue)}, not {short(queue)}")
        return job.type_, job.queue, job
    if not isinstance(job, str):
        raise TypeError(f"trigger takes a PeriodicJob class or a job name, got {short(job)}")
    if not job or not job.isprintable() or any(c.isspace() for c in job):
        raise ValueError(f"a job name is printable text without spaces, got {short(job)}")
    if queue is None:
        raise TypeError(f"trigger({short(job)}) needs the job's queue: trigger(name, queue)")
    return job, check_queue_name(queue), None
