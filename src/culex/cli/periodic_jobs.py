"""culex periodic: the periodic jobs, their runs, a run triggered now, and a job paused
or resumed."""

from __future__ import annotations

import argparse
from datetime import timedelta
from typing import TYPE_CHECKING

from .. import config
from ..errors import CulexError

if TYPE_CHECKING:
    from ..jobs.periodic import PeriodicJob


from .running import load_module
from .tables import print_table

VERBS = ("trigger", "pause", "resume")
USAGE = "culex periodic [MODULE], or culex periodic trigger|pause|resume NAME [MODULE] [--queue Q]"


def periodic_command(args: argparse.Namespace) -> int:
    """Without MODULE, the jobs come from Redis alone (the records runners' schedulers
    write); with it, from the module's classes, also those no runner has scheduled yet."""
    settings = config.settings_for(args.redis_url)
    words = list(args.words)
    verb = words.pop(0) if words and words[0] in VERBS else None
    if (verb and len(words) not in (1, 2)) or (not verb and len(words) > 1):
        raise CulexError(f"usage: {USAGE}")
    name = words.pop(0) if verb else None
    module = words[0] if words else None
    if verb and name is not None:
        return _act(verb, name, module, args.queue, settings)
    if module is not None:
        return _periodic_of_module(module, settings)
    _show_periodic(settings)
    return 0


def _periodic_of_module(module: str, settings: config.Settings) -> int:
    from ..operations.inspection import periodic_status

    columns = ("job", "queue", "schedule", "next run", "last run", "last outcome")
    print_table(columns, periodic_status(_module_periodic_jobs(module), settings))
    return 0


def _module_periodic_jobs(module: str) -> list[type[PeriodicJob]]:
    from ..jobs.periodic import PeriodicJob
    from ..jobs.registry import registry

    load_module(module)
    return [job for job in registry if issubclass(job, PeriodicJob)]


def _act(
    verb: str, name: str, module: str | None, queue: str | None, settings: config.Settings
) -> int:
    """``culex periodic trigger|pause|resume NAME``: the job by its class in MODULE, or by
    its name on its queue (``--queue``, else the one queue whose scheduler runs it)."""
    from ..jobs import periodic
    from ..jobs.task import task_name

    target: str | type[PeriodicJob] = name
    if module is not None:
        jobs = _module_periodic_jobs(module)
        found = next((job for job in jobs if job.type_ == name), None)
        if found is None:
            known = ", ".join(job.type_ for job in jobs) or "none"
            raise CulexError(f"no periodic job named {name!r} in {module} (known: {known})")
        target = found
    elif queue is None:
        queue = _queue_of(name, settings)
    try:
        if verb == "trigger":
            task = periodic.trigger(target, queue, settings)
            print(f"enqueued {name} as task {task_name(task.queue, task.id)}")
        elif verb == "pause":
            periodic.pause(target, queue, settings)
            print(f"paused {name}: it enqueues nothing until culex periodic resume {name}")
        else:
            periodic.resume(target, queue, settings)
            print(f"resumed {name}: it runs at its next slot")
    except (TypeError, ValueError) as exc:
        raise CulexError(str(exc)) from None
    return 0


def _queue_of(name: str, settings: config.Settings) -> str:
    """The one queue whose scheduler runs the job ``name`` (else a clear error)."""
    from ..operations.inspection import periodic_jobs

    queues = [row.queue for row in periodic_jobs(settings) if row.job == name]
    if len(queues) != 1:
        where = (
            f"on queues {', '.join(queues)}: choose one with --queue"
            if queues
            else ("that a runner schedules (see culex periodic)")
        )
        raise CulexError(f"no single periodic job named {name!r} {where}")
    return queues[0]


def _show_periodic(settings: config.Settings) -> None:
    from ..operations.inspection import periodic_jobs

    columns = ("job", "queue", "schedule", "next run", "last run", "last outcome", "last task")
    rows = [
        {
            "job": row.job,
            "queue": row.queue,
            "schedule": row.schedule,
            "next run": "paused" if row.paused else _periodic_time(row.next_run, row.timezone),
            "last run": _periodic_time(row.last_run, row.timezone),
            "last outcome": row.last_outcome or "-",
            "last task": row.last_task or "-",
        }
        for row in periodic_jobs(settings)
    ]
    if not rows:
        print("no periodic jobs: no runner schedules any (or give the MODULE that defines them)")
        return
    print_table(columns, rows)


def _periodic_time(seconds: float | None, timezone: str) -> str:
    """An epoch time in the job's time zone, as culex periodic MODULE shows it."""
    from ..jobs.schedules import EPOCH, zone_of

    if seconds is None:
        return "never"
    try:
        when = EPOCH + timedelta(seconds=seconds)
        return when.astimezone(zone_of(timezone)).strftime("%Y-%m-%d %H:%M:%S %Z")
    except (OverflowError, ValueError):  # (no datetime holds it: as stored)
        return f"{seconds * 1000:.0f} ms"
