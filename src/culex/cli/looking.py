"""culex commands that look at queues, tasks, runners and counters."""

from __future__ import annotations

import argparse
import contextlib
import time

from .. import config
from .._redis.calls import shown
from ..errors import CulexError
from ..jobs.codecs import moment
from . import task_fields
from .durable_commands import print_durable
from .queue_control_commands import marks
from .seen_queues import seen_queues
from .tables import one_line, print_table


def queues_command(args: argparse.Namespace) -> int:
    from ..operations.inspection import queue_counts, queue_latency
    from ..operations.queue_control import limits_in_force

    settings = config.settings_for(args.redis_url)
    counts = queue_counts(settings)
    latency = queue_latency(settings, list(counts))
    in_force = limits_in_force(settings, list(counts)) if counts else {}
    steered = {q: marks(*state) for q, state in in_force.items()}
    states = ("waiting", "pending", "scheduled", "dead")
    print(f"{'queue':<30}" + "".join(f"{s:>10}" for s in states) + f"{'latency':>10}")
    for queue, row in counts.items():
        print(
            (
                f"{shown(queue):<30}"
                + "".join(f"{row[s]:>10}" for s in states)
                + f"{latency.get(queue, 0.0):>9.1f}s"
                + f"  {steered.get(queue, '')}"
            ).rstrip()
        )
    return 0


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def window(text: str) -> float:
    """A window like 15m, 1h, 1d or 90s, in seconds."""
    number, unit = text[:-1], text[-1:]
    if unit not in _UNITS or not number.isdigit() or int(number) == 0:
        raise argparse.ArgumentTypeError(f"a window is a whole number and s, m, h or d: {text!r}")
    return float(int(number) * _UNITS[unit])


def stats_command(args: argparse.Namespace) -> int:
    from ..operations.stats import Counts, job_summary, summary

    settings = config.settings_for(args.redis_url)
    seen_queues(args.queue or [], settings)
    rows: dict[tuple[str, ...], Counts]
    if args.jobs:
        rows = dict(job_summary(settings, queues=args.queue, window=args.window).items())
    else:
        found = summary(settings, queues=args.queue, window=args.window)
        rows = {(queue,): counts for queue, counts in found.items()}
    minutes = max(1.0, args.window / 60)
    columns = ("queue", *(("job",) if args.jobs else ()), "processed", "succeeded", "failed")
    columns += ("dead", "tasks/min", "mean", "p95")
    table = []
    for names, c in rows.items():
        cells = [*names, str(c.processed), str(c.succeeded), str(c.failed), str(c.dead)]
        cells += [f"{c.processed / minutes:.1f}", _seconds(c.mean_duration)]
        cells.append(_seconds(c.duration_quantile(0.95)))
        table.append(dict(zip(columns, cells, strict=True)))
    print(f"the last {_span(args.window)}")
    print_table(columns, table)
    return 0


def _seconds(value: float | None) -> str:
    """A run time as people read it: 850us, 12.5ms, 3.2s ('-' when none was timed)."""
    if value is None:
        return "-"
    if value < 0.001:
        return f"{value * 1e6:.0f}us"
    return f"{value * 1000:.1f}ms" if value < 1 else f"{value:.1f}s"


def _span(seconds: float) -> str:
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds % size == 0:
            return f"{seconds / size:.0f}{unit}"
    return f"{seconds:.0f}s"


def task_command(args: argparse.Namespace) -> int:
    """``culex task QUEUE ID``, ``culex task QUEUE<ID>`` as logs name a task, or ``culex
    task ID`` alone, looked for in every queue culex knows."""
    from ..jobs.task import Task, task_name

    settings = config.settings_for(args.redis_url)
    try:  # (a bad queue name or id: checked before any I/O)
        named = _which_task(args.queue, args.id, settings)
        if named is None:
            return 1
        queue, task_id = named
        record = Task(task_id, queue, settings.redis_url, prefix=settings.prefix).info()
    except (TypeError, ValueError) as exc:
        raise CulexError(str(exc)) from None
    if not record:
        print(f"{task_name(queue, task_id)}: no such task (never enqueued, or expired)")
        return 1
    # (a durable task's records and signals: shown readable after the fields)
    fields = [
        (k, v) for k, v in task_fields.ordered(record) if not _durable_field(k) and k != "logs"
    ]
    width = max((len(name) for name, _ in fields), default=0)
    for name, value in fields:
        said = task_fields.field_text(name, value, record, args.full)
        print(shown(f"{name:<{width}}  " + said.replace("\n", "\n" + " " * (width + 2))))
    print_durable(record)
    _print_logs(record.get("logs"))
    return 0


def _print_logs(stored: str | None) -> None:
    """The task's log lines (culex.jobs.task_logs), oldest first: attempt, time, line."""
    from ..jobs.task_logs import parse

    lines = parse(stored)
    if lines:
        print(f"logs ({len(lines)} kept, oldest first: attempt, time UTC, line)")
    for entry in lines:
        at = entry.at.isoformat(timespec="milliseconds").removesuffix("+00:00")
        print(shown(f"  {entry.attempt:>3}  {at}  " + entry.line.replace("\n", "\\n")))


def _durable_field(name: str) -> bool:
    return name.startswith(("step:", "signal:")) or name in ("awaiting", "awaiting_until")


def _which_task(
    first: str, task_id: str | None, settings: config.Settings
) -> tuple[str, str] | None:
    """The queue and id ``culex task`` names (None: said why not, on stdout)."""
    from ..jobs.task import check_id, queues_holding, split_task_name, task_name

    named = (first, task_id) if task_id is not None else split_task_name(first)
    if named is not None:
        seen_queues([named[0]], settings)
        return named
    holding = queues_holding(check_id(first), settings)
    if len(holding) == 1:
        return holding[0], first
    if not holding:
        print(f"{first}: no task of this id in any queue culex knows (never enqueued, or expired)")
    else:
        print(f"{first}: tasks of this id are in {len(holding)} queues; name one:")
        for queue in holding:
            print(shown(f"  culex task {task_name(queue, first)}"))
    return None


def runners_command(args: argparse.Namespace) -> int:
    from ..operations.inspection import rollback_check, runners, unserved

    settings = config.settings_for(args.redis_url)
    if args.rollback_check is not None:
        try:
            found_in_use = rollback_check(args.rollback_check, settings)
        except ValueError as exc:
            raise CulexError(str(exc)) from None
        for lacking in found_in_use:
            print(shown(lacking.line()))
        if not found_in_use:
            print(f"nothing in use that a runner of {args.rollback_check} cannot serve")
        return 1 if found_in_use else 0
    found = runners(settings)
    now_ms = time.time() * 1000
    print(f"{len(found)} runner(s)")
    for runner in found:
        busy = len(runner["tasks"])
        quiet = "  quiet" if runner["state"] == "quiet" else ""  # (takes no new task)
        print(shown(
            f"{runner['id']}  pid {runner['pid']}{quiet}  "
            f"queues {','.join(runner['queues'])}  busy {busy}/{runner['concurrency']}  "
            f"up {_since(now_ms, runner['started'], '.0f')}"
            f"  last beat {_since(now_ms, runner['beat'], '.1f')} ago  culex {runner['version']}"
        ))  # fmt: skip
        for task in runner["tasks"]:
            print(shown(
                f"    {task['queue']}<{task['id']}> {task['job']} "
                f"(attempt {task['attempt']}) for {_since(now_ms, task['started'], '.1f')}"
            ))  # fmt: skip
    for lacking in unserved(settings):  # (runners of an older culex, where a queue needs more)
        print(shown(f"warning: {lacking.line()}"))
    return 0


def _since(now_ms: float, ms: float | None, style: str) -> str:
    """How long ago a time a runner's record holds was: "12 s" ("-" when it holds none)."""
    if not ms:
        return "-"
    try:
        return f"{(now_ms - ms) / 1000:{style}} s"
    except OverflowError:  # (an int of 400 digits)
        return "-"


# What a task's time in each state's set means, as the column of ``culex tasks`` says it.
_AT = {"waiting": "ready since", "scheduled": "due", "pending": "lease ends", "dead": "died",
       "succeeded": "succeeded"}  # fmt: skip


def tasks_command(args: argparse.Namespace) -> int:
    from ..operations.inspection import tasks

    settings = config.settings_for(args.redis_url)
    try:
        seen_queues([args.queue], settings)
        page = tasks(
            args.queue, args.state, settings, newest_first=not args.oldest, cursor=args.after,
            limit=args.limit, job=args.job,
        )  # fmt: skip
    except (TypeError, ValueError) as exc:
        raise CulexError(str(exc)) from None
    rows = [
        {"id": row.id, "job": row.job, _AT[args.state]: _moment(row.at),
         "enqueued": _moment(row.enqueued_at), "priority": str(row.priority),
         "group": one_line(row.group, 30), "retries": str(row.retries),
         "params": one_line(row.params, 40), "last error": one_line(row.last_error, 60)}
        for row in page.rows
    ]  # fmt: skip
    # (priority and group get a column when a task of the page has one)
    shown = [
        column for column in ("id", "job", _AT[args.state], "enqueued", "priority", "group",
                              "retries", "params", "last error")
        if column not in ("priority", "group") or any(row[column] not in ("0", "") for row in rows)
    ]  # fmt: skip
    print_table(tuple(shown), rows)
    order = "oldest" if args.oldest else "newest"
    matching = f" of job {args.job}" if args.job else ""
    print(f"{len(page.rows)} task(s){matching} shown, {order} first; {args.state} holds "
          f"{page.total:,}")  # fmt: skip
    if page.next_cursor is not None:
        print(f"next page: --after {page.next_cursor}")
    return 0


def _moment(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    when = moment(seconds * 1000)
    with contextlib.suppress(OverflowError):  # (a local time past the year 9999)
        if when is not None:
            return when.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    return f"{seconds:.0f} s"  # (past what a datetime holds: as stored)
