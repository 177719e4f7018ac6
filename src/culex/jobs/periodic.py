"""Periodic jobs: run on their own every interval, every n months, or on a cron expression.

Slots are computed without I/O, from the server's clock (schedules.py). Whether a slot is enqueued
is decided in Redis by ``schedule.lua``: a slot's task id is ``<JobName>:<slot ms>`` and
the job's record remembers the latest slot decided, so any number of runners may run the
scheduler and each slot still runs once. The rules are in docs/periodic.md.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from datetime import timedelta
from typing import Any, ClassVar

from .. import config
from .._redis import commands, enqueuing
from .._redis.enqueuing import Scheduled
from .._redis.keys import check_queue_name, queue_keys, queues_key
from ..errors import ConfigurationError, CulexError, short
from ..middleware.hooks import enqueue_parts
from ..server.procedures import Procedure, run_async, run_sync
from .job import Job
from .registry import JobRegistry, registry
from .schedules import Interval, Monthly, MonthSpan, Schedule, checked_zone, cron_schedule, instant
from .task import Task, new_id

logger = logging.getLogger("culex")


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

    @classmethod
    def headers_for(cls, task_id: str, settings: config.Settings) -> str:
        """The headers of task ``task_id`` of this job, as the middleware writes them at
        enqueue (JSON, "" for none: no middleware). Its params are none: nothing to seal."""
        if not settings.middleware:
            return ""
        return enqueue_parts(settings, cls(), task_id, "{}")[1]


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
    if cls.expires is not None:
        raise TypeError(
            f"{name}: a periodic job's tasks do not expire (schedule.lua stores no expiry); "
            "a missed slot is passed over by the next one"
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
    tz = checked_zone(name, cls.timezone)
    if cls.cron is not None:
        return cron_schedule(name, cls.cron, tz)
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


class PeriodicJobPaused(CulexError):
    """The periodic job is paused (:func:`pause`): a trigger enqueues nothing until resumed."""


def _trigger(
    job: str | type[PeriodicJob], queue: str | None, settings: config.Settings
) -> Procedure[Task]:
    job_type, queue, job_class = _target(job, queue)
    keys = queue_keys(settings.prefix, queue)
    task_id = f"{job_type}:trigger:{new_id()}"
    call = enqueuing.schedule(
        keys,
        job_type,
        task_id,
        slot_ms=None,
        next_slot_ms=None,
        overlap=True,
        run_new=job_class is not None,  # by name: only a job that has a record
        max_retries=0,
        record=() if job_class is None else described(job_class),
        events=settings.events,
        headers="" if job_class is None else job_class.headers_for(task_id, settings),
    )
    if job_class is not None:
        yield commands.register_queue(queues_key(settings.prefix), queue)
    done: Scheduled = yield call
    if done.outcome == "paused":
        raise PeriodicJobPaused(
            f"periodic job {short(job_type)} on queue {short(queue)} is paused: it enqueues "
            "nothing, a trigger neither, until resumed (culex periodic resume)"
        )
    if done.outcome == "unknown":
        raise UnknownPeriodicJob(
            f"no periodic job {short(job_type)} on queue {short(queue)}: no runner schedules it "
            "(see culex periodic for the jobs there are)"
        )
    return Task(done.task_id, queue, settings.redis_url, job_class, settings.prefix)


def _target(
    job: str | type[PeriodicJob], queue: str | None, verb: str = "trigger"
) -> tuple[str, str, type[PeriodicJob] | None]:
    """(job type, queue, class or None) of the arguments of a trigger (or a ``verb``: pause,
    resume), checked before any I/O."""
    if queue is not None and not isinstance(queue, str):
        raise TypeError(f"a queue name must be a str, got {short(queue)} (settings go by keyword)")
    if isinstance(job, type) and issubclass(job, PeriodicJob):
        if queue is not None and queue != job.queue:
            raise ValueError(f"{job.__name__} runs on queue {short(job.queue)}, not {short(queue)}")
        return job.type_, job.queue, job
    if not isinstance(job, str):
        raise TypeError(f"{verb} takes a PeriodicJob class or a job name, got {short(job)}")
    if not job or not job.isprintable() or any(c.isspace() for c in job):
        raise ValueError(f"a job name is printable text without spaces, got {short(job)}")
    if queue is None:
        raise TypeError(f"{verb}({short(job)}) needs the job's queue: {verb}(name, queue)")
    return job, check_queue_name(queue), None


# -- pause and resume: at run time, across runners ----------------------------------------


def pause(
    job: str | type[PeriodicJob],
    queue: str | None = None,
    settings: config.Settings | None = None,
) -> None:
    """Pause a periodic job (``culex periodic pause``): it enqueues nothing, neither its
    slots nor a trigger, until :func:`resume`, on every runner. The flag is in the job's
    record, so it outlasts runner restarts and deploys.

    ``job`` is its class (a job no scheduler has seen yet gets a record), or its name with its
    ``queue`` (the job must have a record; else :class:`UnknownPeriodicJob`)."""
    settings = settings or config.settings()
    run_sync(_paused(job, queue, settings, True), settings.redis_url)


async def apause(
    job: str | type[PeriodicJob],
    queue: str | None = None,
    settings: config.Settings | None = None,
) -> None:
    """The async twin of :func:`pause`."""
    settings = settings or config.settings()
    await run_async(_paused(job, queue, settings, True), settings.redis_url)


def resume(
    job: str | type[PeriodicJob],
    queue: str | None = None,
    settings: config.Settings | None = None,
) -> None:
    """Resume a paused periodic job (``culex periodic resume``): its next slot runs; the
    slots that fell while it was paused are passed over, not caught up. A job that is not
    paused is left as it is. ``job`` and ``queue`` as for :func:`pause`."""
    settings = settings or config.settings()
    run_sync(_paused(job, queue, settings, False), settings.redis_url)


async def aresume(
    job: str | type[PeriodicJob],
    queue: str | None = None,
    settings: config.Settings | None = None,
) -> None:
    """The async twin of :func:`resume`."""
    settings = settings or config.settings()
    await run_async(_paused(job, queue, settings, False), settings.redis_url)


def _paused(
    job: str | type[PeriodicJob], queue: str | None, settings: config.Settings, pausing: bool
) -> Procedure[None]:
    job_type, queue, job_class = _target(job, queue, "pause" if pausing else "resume")
    keys = queue_keys(settings.prefix, queue)
    record = None if job_class is None else described(job_class)
    outcome: str = yield enqueuing.periodic_pause(keys, job_type, pausing, record=record)
    if outcome == "unknown":
        raise UnknownPeriodicJob(
            f"no periodic job {short(job_type)} on queue {short(queue)}: no runner schedules it "
            "(see culex periodic for the jobs there are)"
        )
