"""Read-only looks at queues and periodic jobs, for the CLI and for users' own checks.

Each is a procedure, with a blocking function and its ``a*`` async twin. Pages of a state's
tasks and one task by id (:func:`tasks`, :func:`find_task`) live in :mod:`culex.browsing`
and are found here too."""

from __future__ import annotations

import bisect
import json
import math
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import config
from .._redis import commands
from .._redis.calls import Call, number, shown
from .._redis.keys import queue_keys, queues_key
from ..server.procedures import Procedure, raised, run_async, run_sync
from .browsing import STATES as STATES
from .browsing import DeadPage as DeadPage
from .browsing import TaskPage as TaskPage  # (the names a dashboard reads from here too)
from .browsing import TaskRow as TaskRow
from .browsing import adead_everywhere as adead_everywhere
from .browsing import afind_task as afind_task
from .browsing import atasks as atasks
from .browsing import check_state, state_sets
from .browsing import find_task as find_task
from .browsing import tasks as tasks

if TYPE_CHECKING:
    from ..jobs.periodic import PeriodicJob


def queue_counts(
    settings: config.Settings | None = None, queues: list[str] | None = None
) -> dict[str, dict[str, int]]:
    """How many tasks each queue holds in each state (default: every known queue)."""
    settings = settings or config.settings()
    return run_sync(_counts(settings, queues), settings.redis_url)


async def aqueue_counts(
    settings: config.Settings | None = None, queues: list[str] | None = None
) -> dict[str, dict[str, int]]:
    """The async twin of :func:`queue_counts`."""
    settings = settings or config.settings()
    return await run_async(_counts(settings, queues), settings.redis_url)


@dataclass(frozen=True)
class QueuePage:
    """A page of the known queues, by name (:func:`queue_page`)."""

    names: list[str]
    total: int  # how many queues are known
    first: int  # the place of the page's first queue among them all (0: the first)
    next_after: str | None  # the ``after`` of the next page; None: this is the last
    previous_after: str | None  # the ``after`` of the page before ("": the start; None: none)


def queue_page(
    settings: config.Settings | None = None, *, after: str | None = None, limit: int = 50
) -> QueuePage:
    """``limit`` (1..1000) known queues by name, from the first after ``after`` (None: the
    start). The registry is a set, in no order: it is read whole (SMEMBERS) and sorted here,
    one round trip; at 100,000 queues that is ~70 ms (bench/dashboard.py), and every read
    of the queues themselves stays bounded by ``limit``."""
    settings = settings or config.settings()
    return run_sync(_queue_page(settings, after, limit), settings.redis_url)


async def aqueue_page(
    settings: config.Settings | None = None, *, after: str | None = None, limit: int = 50
) -> QueuePage:
    """The async twin of :func:`queue_page`."""
    settings = settings or config.settings()
    return await run_async(_queue_page(settings, after, limit), settings.redis_url)


MAX_QUEUE_PAGE = 1000


def _queue_page(settings: config.Settings, after: str | None, limit: int) -> Procedure[QueuePage]:
    if after is not None and not isinstance(after, str):
        raise TypeError(f"after must be a queue name or None, got {type(after).__name__}")
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int, got {type(limit).__name__}")
    if not 1 <= limit <= MAX_QUEUE_PAGE:
        raise ValueError(f"limit must be 1 to {MAX_QUEUE_PAGE}, got {limit}")
    names: list[str] = raised((yield [commands.known_queues(queues_key(settings.prefix))]))[0]
    start = 0 if after is None else bisect.bisect_right(names, after)
    shown = names[start : start + limit]
    more = start + limit < len(names)
    before = None if start == 0 else "" if start <= limit else names[start - limit - 1]
    return QueuePage(shown, len(names), start, shown[-1] if more and shown else None, before)


# Queues whose sets are sized in one round trip by queues_holding (and metrics): a batch.
BATCH = 1000


def queues_holding(
    state: str, settings: config.Settings | None = None, *, limit: int = 500
) -> dict[str, int]:
    """The first ``limit`` queues by name that hold a task in ``state``, with how many: the
    sizes of every known queue's sets of that state, read BATCH queues a round trip (one
    ZCARD each, not the five of :func:`queue_counts`), until ``limit`` are found."""
    settings = settings or config.settings()
    return run_sync(_holding(settings, state, limit), settings.redis_url)


async def aqueues_holding(
    state: str, settings: config.Settings | None = None, *, limit: int = 500
) -> dict[str, int]:
    """The async twin of :func:`queues_holding`."""
    settings = settings or config.settings()
    return await run_async(_holding(settings, state, limit), settings.redis_url)


def _holding(settings: config.Settings, state: str, limit: int) -> Procedure[dict[str, int]]:
    check_state(state)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a whole number from 1, got {limit!r}")
    names: list[str] = raised((yield [commands.known_queues(queues_key(settings.prefix))]))[0]
    found: dict[str, int] = {}
    for first in range(0, len(names), BATCH):
        batch = names[first : first + BATCH]
        sets = [state_sets(queue_keys(settings.prefix, q), state) for q in batch]
        sizes = iter(raised((yield [commands.set_size(key) for keys in sets for key in keys])))
        for q, keys in zip(batch, sets, strict=True):
            held = sum(next(sizes) for _ in keys)
            if held:
                found[q] = held
                if len(found) == limit:
                    return found
    return found


def periodic_records(
    jobs: Iterable[type[PeriodicJob]], settings: config.Settings | None = None
) -> dict[str, dict[str, str]]:
    """Each periodic job's record by job name ({} for a job no scheduler has seen yet).

    Fields (ms since the epoch): ``next_slot``, ``last_slot``, ``last_task``,
    ``last_enqueued_at``, ``last_finished_at``, ``last_outcome`` (succeeded or dead),
    ``decided_slot``, ``skipped_slot`` and ``skip_reason`` (docs/periodic.md).
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
    next run, last run and last outcome (the state of the last task while it is unfinished)."""
    settings = settings or config.settings()
    return run_sync(_statuses(list(jobs), settings), settings.redis_url)


async def aperiodic_status(
    jobs: Iterable[type[PeriodicJob]], settings: config.Settings | None = None
) -> list[dict[str, str]]:
    """The async twin of :func:`periodic_status`."""
    settings = settings or config.settings()
    return await run_async(_statuses(list(jobs), settings), settings.redis_url)


def queue_latency(
    settings: config.Settings | None = None, queues: list[str] | None = None
) -> dict[str, float]:
    """How long the task that runs next in each queue has waited since it was ready, in
    seconds (0 when none waits), by the server's clock: how far behind its runners are.
    With one priority that is the oldest ready task; with several, it is the oldest of the
    highest priority waiting (a low-priority task may have waited longer)."""
    settings = settings or config.settings()
    return run_sync(_latency(settings, queues), settings.redis_url)


async def aqueue_latency(
    settings: config.Settings | None = None, queues: list[str] | None = None
) -> dict[str, float]:
    """The async twin of :func:`queue_latency`."""
    settings = settings or config.settings()
    return await run_async(_latency(settings, queues), settings.redis_url)


def _latency(settings: config.Settings, queues: list[str] | None) -> Procedure[dict[str, float]]:
    names = (
        queues if queues is not None else (yield commands.known_queues(queues_key(settings.prefix)))
    )
    if not names:
        return {}
    calls: list[Call[Any]] = [commands.server_time()]
    for q in names:
        calls += commands.oldest_waiting(queue_keys(settings.prefix, q))
    now, *heads = yield calls
    latency = {}
    for i, q in enumerate(names):
        ready = commands.earliest(heads[i * 2 : i * 2 + 2])
        latency[q] = 0.0 if ready is None else max(0.0, (now - ready) / 1000)
    return latency


def runners(settings: config.Settings | None = None) -> list[dict[str, Any]]:
    """The runners that beat within their lease, oldest first: ``id``, ``host``, ``pid``,
    ``queues`` (a list), ``concurrency``, ``version``, ``started`` and ``beat`` (ms since the
    epoch), and ``tasks``: what each runs now, as of its last beat (``queue``, ``id``,
    ``job``, ``attempt``, ``started``). Every one of these is there whatever the record holds
    (a foreign runner's may lack some): "" or 0 for a text or a number it lacks, or holds
    as something else; ``started`` of a task: None."""
    settings = settings or config.settings()
    return run_sync(_runners(settings), settings.redis_url)


async def arunners(settings: config.Settings | None = None) -> list[dict[str, Any]]:
    """The async twin of :func:`runners`."""
    settings = settings or config.settings()
    return await run_async(_runners(settings), settings.redis_url)


def _runners(settings: config.Settings) -> Procedure[list[dict[str, Any]]]:
    ids = yield commands.runner_ids(settings.prefix)
    if not ids:
        return []
    records: list[dict[str, str]] = yield [commands.read_runner(settings.prefix, i) for i in ids]
    found = [
        _runner(shown(runner_id), record)
        for runner_id, record in zip(ids, records, strict=True)
        if isinstance(record, dict) and record
    ]
    return sorted(found, key=lambda runner: runner["started"])


def _runner(runner_id: str, record: dict[str, str]) -> dict[str, Any]:
    """A runner's record as stored (strings), read back as values; what it lacks, or holds
    as something else, is "" or 0 (its id: the one it is registered by)."""
    try:
        tasks = json.loads(record.get("tasks", "[]"))
    except (ValueError, RecursionError):
        tasks = []
    return {
        **record,
        "id": record.get("id") or runner_id,
        "host": record.get("host", ""),
        "version": record.get("version", ""),
        "queues": [q for q in record.get("queues", "").split(",") if q],
        "pid": number(record.get("pid")),
        "concurrency": number(record.get("concurrency")),
        "started": number(record.get("started")),
        "beat": number(record.get("beat")),
        "tasks": [_running(task) for task in tasks] if isinstance(tasks, list) else [],
    }


def _running(task: object) -> dict[str, Any]:
    """A task of a runner's record (queue, id, job, attempt, started), whatever it holds."""
    found = task if isinstance(task, dict) else {}

    def said(name: str) -> str:
        value = found.get(name)
        return shown(value) if isinstance(value, str) else ""

    return {
        "queue": said("queue"),
        "id": said("id"),
        "job": said("job"),
        "attempt": number(str(found.get("attempt", ""))),
        "started": _ms(found.get("started")),
    }


def _ms(value: object) -> float | None:
    """A time in ms a runner's record holds for a task, None when it holds no such number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        return float(value) if math.isfinite(value) else None
    except OverflowError:  # (an int of 400 digits)
        return None


def _counts(
    settings: config.Settings, queues: list[str] | None
) -> Procedure[dict[str, dict[str, int]]]:
    names = (
        queues if queues is not None else (yield commands.known_queues(queues_key(settings.prefix)))
    )
    calls = [call for q in names for call in commands.count(queue_keys(settings.prefix, q))]
    results = (yield calls) if calls else []
    size = commands.COUNT_CALLS
    return {q: commands.sizes(results[i * size : (i + 1) * size]) for i, q in enumerate(names)}


def _records(
    jobs: list[type[PeriodicJob]], settings: config.Settings
) -> Procedure[dict[str, dict[str, str]]]:
    calls = [
        commands.read_periodic(queue_keys(settings.prefix, job.queue), job.type_) for job in jobs
    ]
    records = yield from _all(calls)
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
    now, *tasks = yield from _all([commands.server_time(), *lasts])
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
        "next run": _slot(job, following),
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


def _all(calls: list[Call[Any]]) -> Procedure[list[Any]]:
    """Send ``calls`` in one round trip (none when there are none); a refused one raises."""
    return raised((yield calls)) if calls else []


# -- every periodic job, found by its record: no job classes needed ------------------------
# (This section came last, and imports what it needs here.)

from dataclasses import dataclass  # noqa: E402

from .._redis.keys import periodic_jobs_key  # noqa: E402
from .._redis.reads import PeriodicRead, read_periodic  # noqa: E402


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

    entries, now = yield from _all(
        [commands.periodic_entries(periodic_jobs_key(settings.prefix)), commands.server_time()]
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
    )
