"""Read-only looks at queues, runners and periodic jobs, for the CLI and for users' own
checks: what the docs spell ``culex.inspection.X``.

Each is a procedure, with a blocking function and its ``a*`` async twin. The runners'
records are read here; the rest lives in the module of its concept and is found here too:
the queues' counts, pages and latency (queues.py), pages of a state's tasks and one task by
id (browsing.py), a page of every queue's dead tasks (dead_everywhere.py), the periodic
jobs' records (periodic_records.py)."""

from __future__ import annotations

import json
import math
from typing import Any

from .. import config
from .._redis import commands
from .._redis.calls import number, shown
from ..server import compatibility, serving
from ..server.compatibility import Unserved as Unserved
from ..server.procedures import Procedure, run_async, run_sync
from .browsing import LISTED as LISTED
from .browsing import STATES as STATES
from .browsing import TaskPage as TaskPage  # (the names a dashboard reads from here too)
from .browsing import TaskRow as TaskRow
from .browsing import afind_task as afind_task
from .browsing import atasks as atasks
from .browsing import find_task as find_task
from .browsing import tasks as tasks
from .dead_everywhere import DeadPage as DeadPage
from .dead_everywhere import adead_everywhere as adead_everywhere
from .known_queues import queue_names
from .periodic_records import PeriodicRow as PeriodicRow
from .periodic_records import aperiodic_jobs as aperiodic_jobs
from .periodic_records import aperiodic_records as aperiodic_records
from .periodic_records import aperiodic_status as aperiodic_status
from .periodic_records import periodic_jobs as periodic_jobs
from .periodic_records import periodic_records as periodic_records
from .periodic_records import periodic_status as periodic_status
from .queues import QueuePage as QueuePage
from .queues import aqueue_counts as aqueue_counts
from .queues import aqueue_latency as aqueue_latency
from .queues import aqueue_page as aqueue_page
from .queues import aqueues_holding as aqueues_holding
from .queues import queue_counts as queue_counts
from .queues import queue_latency as queue_latency
from .queues import queue_page as queue_page
from .queues import queues_holding as queues_holding


def runners(settings: config.Settings | None = None) -> list[dict[str, Any]]:
    """The runners that beat within their lease, oldest first: ``id``, ``host``, ``pid``,
    ``queues`` (a list), ``concurrency``, ``version``, ``started`` and ``beat`` (ms since the
    epoch), and ``tasks``: what each runs now, as of its last beat (``queue``, ``id``,
    ``job``, ``attempt``, ``started``), and ``state``: "quiet" when it takes no new task
    (SIGTSTP), else "running" (also for a record that says nothing of it). Every one of
    these is there whatever the record holds (a foreign runner's may lack some): "" or 0
    for a text or a number it lacks, or holds as something else; ``started`` of a task:
    None."""
    settings = settings or config.settings()
    return run_sync(_runners(settings), settings.redis_url)


async def arunners(settings: config.Settings | None = None) -> list[dict[str, Any]]:
    """The async twin of :func:`runners`."""
    settings = settings or config.settings()
    return await run_async(_runners(settings), settings.redis_url)


def unserved(
    settings: config.Settings | None = None, queues: list[str] | None = None
) -> list[Unserved]:
    """The features in use on a queue (of ``queues``; None: every queue a runner runs) that
    a live runner of that queue cannot serve, being of an older culex: each with the
    queue, the feature (its first release, what an older runner does), what showed it in
    use, and those runners' records. ``culex runners`` and the dashboard print each
    one's ``line()``. Nothing is read but the registry when every runner serves all."""
    settings = settings or config.settings()
    return run_sync(compatibility.unserved(settings.prefix, queues), settings.redis_url)


async def aunserved(
    settings: config.Settings | None = None, queues: list[str] | None = None
) -> list[Unserved]:
    """The async twin of :func:`unserved`."""
    settings = settings or config.settings()
    return await run_async(compatibility.unserved(settings.prefix, queues), settings.redis_url)


async def ano_runner(settings: config.Settings, queues: list[str]) -> list[str]:
    """For each of ``queues`` that no live runner serves, the line that says so and since
    when (culex.server.serving: what a wait's warning says); the dashboard's queue and run
    pages show them."""
    return await run_async(serving.unserved(settings.prefix, queues), settings.redis_url)


def rollback_check(
    version: str, settings: config.Settings | None = None, queues: list[str] | None = None
) -> list[Unserved]:
    """What a rollback to release ``version`` (e.g. "0.4.0") would mishandle: each feature
    newer than it in use on a queue (of ``queues``, None: every known queue), to drain
    first (docs/production.md, "Upgrades and rollbacks"). A ValueError for a bad
    ``version``."""
    settings = settings or config.settings()
    compatibility.release(version)  # (checked before any I/O)
    return run_sync(_rollback_check(settings.prefix, version, queues), settings.redis_url)


def _rollback_check(
    prefix: str, version: str, queues: list[str] | None
) -> Procedure[list[Unserved]]:
    names = yield from queue_names(prefix, queues)
    return (yield from compatibility.newer_in_use(prefix, version, names))


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
        "state": "quiet" if record.get("state") == "quiet" else "running",
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
