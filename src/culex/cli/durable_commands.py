"""The durable side of the culex commands: ``culex signal`` sends a signal to a task, and
``culex task`` shows a durable task's records, what it waits for and its kept signals
(read by culex.operations.durable_view, as the dashboard's task page reads them)."""

from __future__ import annotations

import argparse
import json
from typing import TYPE_CHECKING

from .. import config
from .._redis.calls import shown
from ..errors import CulexError
from ..jobs.codecs import moment
from ..operations import durable_view
from .seen_queues import seen_queues
from .tables import print_table

if TYPE_CHECKING:
    from ..jobs.signals import SignalReply


def signal_command(args: argparse.Namespace) -> int:
    """``culex signal QUEUE ID NAME [JSON] [--keep]``: the reply of ``Task.signal`` and
    what it means, with what the task awaits. Without --keep, the signal is kept only for
    a task that awaits that name; exit 1 when nothing was kept (the task awaits another
    name or none, has ended or is not there)."""
    from ..jobs.task import Task, task_name

    try:
        value = json.loads(args.value)
    except (ValueError, RecursionError) as exc:
        raise CulexError(f"the value {args.value[:80]!r} is not JSON: {exc}") from None
    settings = config.settings_for(args.redis_url)
    try:
        seen_queues([args.queue], settings)
        task = Task(args.id, args.queue, settings.redis_url, prefix=settings.prefix)
        reply = task.signal(args.name, value, keep=args.keep)
    except (TypeError, ValueError) as exc:
        raise CulexError(str(exc)) from None
    meaning, code = _meaning(reply, args.name)
    said = f"{reply}: signal {args.name!r} to {task_name(args.queue, args.id)}"
    print(shown(f"{said}: {meaning}" if meaning else said))
    return code


def _meaning(reply: SignalReply, name: str) -> tuple[str, int]:
    """What a reply of Task.signal means, and the command's exit code for it."""
    if reply.awaiting is None:
        awaits = f"the task awaits no signal now (it is {reply.state})"
    else:
        awaits = f"the task awaits signal {reply.awaiting!r} (it is {reply.state})"
    if reply == "delivered":
        return "the task waited for it, and is ready to run again", 0
    if reply == "kept" and reply.awaiting == name:
        return f"kept for the task's receive of it: {awaits}", 0
    if reply == "kept":
        return f"kept for a later receive of it: {awaits}", 0
    if reply == "skipped":
        return f"nothing kept: {awaits}; --keep keeps it for a later receive", 1
    if reply == "ended":
        return "the task has ended (succeeded or dead): nothing sent", 1
    if reply == "unknown":
        return "no such task (never enqueued, or expired): nothing sent", 1
    return "", 1


def print_durable(fields: dict[str, str]) -> None:
    """The durable part of ``culex task``: a table of the records (place, name, kind, when,
    bytes of the value, and a sleep's end or a receive's outcome), what the task waits for,
    and the signals kept for it. Nothing for a task with none of these."""
    if not durable_view.is_durable(fields):
        return
    found = durable_view.records(fields)
    print()
    print(f"steps ({len(found)})")
    if found:
        rows = [
            {
                "place": str(record.place),
                "name": record.name,
                "kind": record.kind,
                "when": _when(record.at),
                "bytes": "-" if record.size is None else f"{record.size:,}",
                "": _outcome(record),
            }
            for record in found
        ]
        print_table(("place", "name", "kind", "when", "bytes", ""), rows)
    waiting = durable_view.waiting_for(fields)
    print(f"waiting for    {said_waiting(waiting)}")
    kept = durable_view.kept_signals(fields)
    listed = ", ".join(f"{signal.name!r} ({signal.size:,} bytes)" for signal in kept)
    print(shown(f"signals kept   {listed or 'none'}"))


def said_waiting(waiting: durable_view.Waiting | None) -> str:
    """``a sleep until T``, ``signal 'approved' until T``, ``signal 'approved' for ever``,
    or ``nothing``."""
    if waiting is None:
        return "nothing"
    what = "a sleep" if waiting.signal is None else f"signal {waiting.signal!r}"
    return f"{what} {'for ever' if waiting.until is None else 'until ' + _when(waiting.until)}"


def _outcome(record: durable_view.StepRecord) -> str:
    if record.kind == "sleep":
        return f"until {_when(record.until)}"
    if record.kind == "receive":
        return "timed out" if record.timed_out else "signal received"
    return ""


def _when(ms: int | None) -> str:
    """A record's time in UTC with its milliseconds, as ``culex task`` shows the others."""
    when = None if ms is None else moment(ms)
    if when is None:
        return "-" if ms is None else str(ms)
    return when.isoformat(timespec="milliseconds")
