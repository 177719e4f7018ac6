"""culex dead and culex cancel: dead tasks shown, retried or purged; tasks called off."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from .. import config
from ..errors import CulexError, ServerError

if TYPE_CHECKING:
    from ..operations.dead import DeadTask


from .seen_queues import seen_queues
from .tables import local_time, one_line, print_table

_DEAD_USAGE = (
    "usage: culex dead QUEUE [--limit N] [--offset N], or culex dead retry QUEUE (ID ... | "
    "--all [--job TYPE]), or culex dead purge QUEUE [--job TYPE] [--yes]"
)


def dead_command(args: argparse.Namespace) -> int:
    from ..operations import dead

    settings = config.settings_for(args.redis_url)
    action = args.words[0] if args.words[0] in ("retry", "purge") and len(args.words) > 1 else ""
    queue, *ids = args.words[1:] if action else args.words
    if (
        (ids and action != "retry")
        or (action == "retry" and bool(ids) == args.all)
        or (args.job is not None and not (action == "purge" or args.all))
        or (args.job is not None and args.limit is not None)
        or (args.offset and action)
    ):
        raise CulexError(_DEAD_USAGE)
    if args.limit is not None and args.limit < 1:  # (before the queue is looked for)
        raise CulexError(f"--limit must be > 0, got {args.limit}")
    try:
        seen_queues([queue], settings)
        if action == "purge":
            return _purge(queue, args.job, args.yes, settings)
        if action == "retry" and args.all and args.limit is None:
            return _retry_all(queue, args.job, settings)
        if action == "retry":
            outcome = dead.retry(queue, ids or None, args.limit, settings=settings)
        else:
            if args.offset < 0:
                raise CulexError(f"--offset must be 0 or more, not {args.offset}")
            limit = 50 if args.limit is None else args.limit
            tasks = dead.dead_tasks(queue, limit, offset=args.offset, settings=settings)
    except (TypeError, ValueError) as exc:
        raise CulexError(str(exc)) from None
    if action == "retry":
        print(f"put {len(outcome.retried)} dead task(s) of {queue} back in waiting")
        return _said_skipped(queue, outcome.skipped, settings)
    _show_dead(tasks, queue, args.offset, settings)
    return 0


def _said_skipped(queue: str, skipped: list[str], settings: config.Settings) -> int:
    """Why each id that retry skipped stayed where it was, and what to do: a dead workflow
    node goes back with its run (``culex workflow retry RUN``), which also puts back the
    nodes that ended because of it. Exit 1 when any was skipped. (One read, in one round
    trip, of the skipped ids' ``run`` and ``state``, after the retry: for the words only.)"""
    from .._redis import commands
    from .._redis.keys import queue_keys
    from ..server.procedures import one_call, run_sync, together

    if not skipped:
        return 0
    keys = queue_keys(settings.prefix, queue)
    read = [one_call(commands.read_fields(keys, one, ("run", "state"))) for one in skipped]
    others = []
    replies = run_sync(together(read), settings.redis_url)
    for task_id, (run, state) in zip(skipped, replies, strict=True):
        if run and state == "dead":
            print(
                f"skipped {task_id}: a node of workflow run {run}, which retries its dead "
                f"nodes together: culex workflow retry {run}"
            )
        else:
            others.append(task_id)
    if others:
        print(f"skipped (not dead, or its record expired): {' '.join(others)}")
    return 1


def _retry_all(queue: str, job: str | None, settings: config.Settings) -> int:
    """Every dead task of ``queue`` (of ``job``) back in waiting, with a progress bar."""
    from ..operations.bulk import apply
    from .progress_bar import ProgressBar

    done = apply("retry", queue, settings, job=job, progress=ProgressBar("retrying"))
    print(f"put {done} dead task(s) of {queue} back in waiting")
    return 0


def _purge(queue: str, job: str | None, yes: bool, settings: config.Settings) -> int:
    """Delete every dead task of ``queue`` (of ``job``), once confirmed, with a progress bar."""
    from .._redis.keys import check_queue_name
    from ..operations.bulk import apply
    from ..operations.inspection import queue_counts
    from .progress_bar import ProgressBar

    held = queue_counts(settings, [check_queue_name(queue)])[queue]["dead"]
    which = f"the dead tasks of job {job}" if job else "every dead task"
    if not yes:
        if not sys.stdin.isatty():
            raise CulexError(f"culex dead purge deletes {which} of {queue} for good: add --yes")
        print(f"delete {which} of {queue} ({held:,} in dead) for good? [y/N] ", end="",
              file=sys.stderr, flush=True)  # fmt: skip
        if input().strip().lower() not in ("y", "yes"):
            print("nothing deleted")
            return 1
    done = apply("delete", queue, settings, state="dead", job=job, progress=ProgressBar("deleting"))
    print(f"deleted {done} dead task(s) of {queue}")
    return 0


def _show_dead(tasks: list[DeadTask], queue: str, offset: int, settings: config.Settings) -> None:
    """The page as a table, then how many dead tasks the queue holds, and how to see more."""
    from ..operations.inspection import queue_counts

    total = queue_counts(settings, [queue])[queue]["dead"]
    if not tasks:
        print(
            f"no dead tasks in {queue}"
            + (f" from {offset:,} on (it holds {total:,})" if offset else "")
        )
        return
    columns = ("id", "type", "died at", "attempts", "reason")
    cells = [(t.id, t.type, _died(t), str(t.attempt), one_line(t.error)) for t in tasks]
    print_table(columns, [dict(zip(columns, row, strict=True)) for row in cells])
    end = offset + len(tasks)
    said = f"{offset + 1:,} to {end:,}" if offset else f"{len(tasks):,}"
    print(f"{said} of {total:,} dead task(s) of {queue}, newest first", end="")
    print(f"; more: culex dead {queue} --offset {end} [--limit N]" if end < total else "")


def _died(task: DeadTask) -> str:
    """When a dead task died; as stored (ms) when no datetime holds it."""
    return f"{task.died_ms:.0f} ms" if task.died_at is None else local_time(task.died_at)


def cancel_command(args: argparse.Namespace) -> int:
    """One line per id: cancelled, cancelling (running: its runner was asked to stop it),
    or the state that refused it. Exit 1 unless all were called off. Every id goes in the
    same round trip."""
    from .._redis.interventions import CANCELLED, CANCELLING
    from ..jobs.task import Task
    from ..server.procedures import run_sync, together

    settings = config.settings_for(args.redis_url)
    try:  # every id is checked before the first one is cancelled
        procedures = {
            task_id: Task(
                task_id, args.queue, settings.redis_url, prefix=settings.prefix
            ).cancel_procedure(args.reason)
            for task_id in dict.fromkeys(args.ids)
        }
        seen_queues([args.queue], settings)
    except (TypeError, ValueError) as exc:
        raise CulexError(str(exc)) from None
    batch = together(list(procedures.values()), refused="return")  # one round trip
    outcomes = run_sync(batch, settings.redis_url)
    refused = 0
    for task_id, outcome in zip(procedures, outcomes, strict=True):
        if outcome == CANCELLED:
            print(f"{task_id}: cancelled")
            continue
        if outcome == CANCELLING:
            print(f"{task_id}: cancelling, it is running: its runner stops it")
            continue
        refused += 1
        if isinstance(outcome, ServerError):  # e.g. its periodic record's key is of another type
            print(f"{task_id}: not cancelled, {outcome}")
        else:
            print(f"{task_id}: not cancelled, {f'it is {outcome}' if outcome else 'not found'}")
    return 1 if refused else 0
