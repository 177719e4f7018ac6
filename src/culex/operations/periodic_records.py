"""The periodic jobs' records, read back: by their job classes (the records and one status
row each, as ``culex periodic`` shows them), or every periodic job a scheduler recorded,
from Redis alone (the dashboard's Periodic page).

Each read is a procedure, with a blocking function and its ``a*`` async twin; all are found
in :mod:`culex.inspection` too."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .. import config
from .._redis import commands
from .._redis.calls import number
from .._redis.keys import periodic_jobs_key, queue_keys
from .._redis.reads import PeriodicRead, read_periodic
from ..server.procedures import Procedure, raised, run_async, run_sync

if TYPE_CHECKING:
    from ..jobs.periodic import PeriodicJob


def periodic_records(
    jobs: Iterable[type[PeriodicJob]], settings: config.Settings | None = None
) -> dict[str, dict[str, str]]:
    """Each periodic job's record by job name ({} for a job no scheduler has seen yet).

    Fields (ms since the epoch): ``next_slot``, ``last_slot``, ``last_task``,
    ``last_enqueued_at``, ``last_finished_at``, ``last_outcome`` (succeeded or dead),
    ``decided_slot``, ``skipped_slot``, ``skip_reason``, and ``paused`` ("1") with
    ``paused_at`` while the job is paused (docs/periodic.md).
    """
    settings = settings or config.settings()
    return run_sync(_records(list(jobs), settings), settings.redis_url)


async def aperiodic_records(
    jobs: Iterable[type[PeriodicJob]], settings: config.Settings | None = None
) -> dict[str, dict[str, str]]:
    """The async twin of :func:`periodic_records`."""
    settings = settings or config.settings()
    return await run_async(_records(list(jobs), settings), settings.redis_url)


def periodic_status(
    jobs: Iterable[type[PeriodicJob]], settings: config.Settings | None = None
) -> list[dict[str, str]]:
    """One row per periodic job, as ``culex periodic`` shows it: job, queue, schedule,
    next run ("paused" while it is), last run and last outcome (the state of the last task
    while it is unfinished)."""
    settings = settings or config.settings()
    return run_sync(_statuses(list(jobs), settings), settings.redis_url)


async def aperiodic_status(
    jobs: Iterable[type[PeriodicJob]], settings: config.Settings | None = None
) -> list[dict[str, str]]:
    """The async twin of :func:`periodic_status`."""
    settings = settings or config.settings()
    return await run_async(_statuses(list(jobs), settings), settings.redis_url)


def _records(
    jobs: list[type[PeriodicJob]], settings: config.Settings
) -> Procedure[dict[str, dict[str, str]]]:
    calls = [
        commands.read_periodic(queue_keys(settings.prefix, job.queue), job.type_) for job in jobs
    ]
    records = raised((yield calls)) if calls else []
    return {job.type_: record for job, record in zip(jobs, records, strict=True)}


def _statuses(
    jobs: list[type[PeriodicJob]], settings: config.Settings
) -> Procedure[list[dict[str, str]]]:
    records = yield from _records(jobs, settings)
    # A job that never ran has no last task: its read finds nothing ({}), like an expired one.
    lasts = [
        commands.read_task(
            queue_keys(settings.prefix, job.queue), records[job.type_].get("last_task", "")
        )
        for job in jobs
    ]
    now, *tasks = raised((yield [commands.server_time(), *lasts]))
    return [
        _status(job, records[job.type_], task, now) for job, task in zip(jobs, tasks, strict=True)
    ]


def _status(
    job: type[PeriodicJob], record: dict[str, str], last_task: dict[str, str], now: int
) -> dict[str, str]:
    following = number(record.get("next_slot")) or job.schedule_.around(now)[1] or 0
    enqueued = number(record.get("last_enqueued_at"))
    unfinished = last_task.get("state") in ("waiting", "scheduled", "pending")
    return {
        "job": job.type_,
        "queue": job.queue,
        "schedule": str(job.schedule_),
        "next run": "paused" if record.get("paused") == "1" else _slot(job, following),
        "last run": _slot(job, enqueued),
        "last outcome": last_task["state"] if unfinished else record.get("last_outcome", "-"),
    }


def _slot(job: type[PeriodicJob], ms: int) -> str:
    """A time of a periodic job's record in its time zone ("never" for none; as stored
    when no datetime holds it)."""
    from ..jobs.periodic import format_slot

    if not ms:
        return "never"
    try:
        return format_slot(job, ms)
    except (OverflowError, ValueError):
        return f"{ms} ms"


@dataclass(frozen=True)
class PeriodicRow:
    """A periodic job as its record shows it (:func:`periodic_jobs`). Times are epoch
    seconds; ``timezone`` is the job's own ("" for UTC), the one its slots are shown in."""

    job: str
    queue: str
    schedule: str
    next_run: float | None  # its next slot
    last_run: float | None  # when the last slot's (or trigger's) task was enqueued
    last_outcome: str  # succeeded, dead, the last task's state while unfinished; "": never ran
    last_task: str  # its id, or ""
    timezone: str = ""
    paused: bool = False  # culex.periodic.pause: it enqueues nothing until resumed


def periodic_jobs(settings: config.Settings | None = None) -> list[PeriodicRow]:
    """Every periodic job a runner's scheduler has recorded, by job then queue, read from
    Redis alone (no job module needed): two round trips whatever their number. A job no
    runner schedules any more drops out a week after its next slot passed."""
    settings = settings or config.settings()
    return run_sync(_periodic_rows(settings), settings.redis_url)


async def aperiodic_jobs(settings: config.Settings | None = None) -> list[PeriodicRow]:
    """The async twin of :func:`periodic_jobs`."""
    settings = settings or config.settings()
    return await run_async(_periodic_rows(settings), settings.redis_url)


def _periodic_rows(settings: config.Settings) -> Procedure[list[PeriodicRow]]:
    from ..jobs.periodic import registry_names

    entries, now = raised(
        (
            yield [
                commands.periodic_entries(periodic_jobs_key(settings.prefix)),
                commands.server_time(),
            ]
        )
    )
    names = [registry_names(entry) for entry, until in entries if until >= now]
    if not names:
        return []
    reads = yield [read_periodic(queue_keys(settings.prefix, q), job) for q, job in names]
    rows = [
        _periodic_row(queue, job, read)
        for (queue, job), read in zip(names, reads, strict=True)
        if isinstance(read, PeriodicRead) and read.record  # gone: no longer deployed
    ]
    return sorted(rows, key=lambda row: (row.job, row.queue))


def _periodic_row(queue: str, job: str, read: PeriodicRead) -> PeriodicRow:
    record, state = read.record, read.last_state

    def seconds(name: str) -> float | None:
        value = number(record.get(name))
        return value / 1000 if value else None

    unfinished = state in ("waiting", "scheduled", "pending")
    return PeriodicRow(
        job=job,
        queue=queue,
        schedule=record.get("schedule", ""),
        next_run=seconds("next_slot"),
        last_run=seconds("last_enqueued_at"),
        last_outcome=state if unfinished else record.get("last_outcome", ""),
        last_task=record.get("last_task", ""),
        timezone=record.get("timezone", ""),
        paused=record.get("paused") == "1",
    )
