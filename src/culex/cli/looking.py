"""culex commands that look at queues, tasks, runners and counters."""

from __future__ import annotations

import argparse
import contextlib
import json
import time

from .. import config
from ..codecs import moment
from ..errors import CulexError
from .steering import marks
from .tables import one_line, print_table


def queues_command(args: argparse.Namespace) -> int:
    from ..inspection import queue_counts, queue_latency
    from ..queue_control import controls

    settings = config.settings_for(args.redis_url)
    counts = queue_counts(settings)
    latency = queue_latency(settings, list(counts))
    steered = {q: marks(state) for q, state in controls(settings, list(counts)).items()}
    states = ("waiting", "pending", "scheduled", "dead")
    print(f"{'queue':<30}" + "".join(f"{s:>10}" for s in states) + f"{'latency':>10}")
    for queue, row in counts.items():
        print(
            (
                f"{queue:<30}"
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
    from ..stats import Counts, job_summary, summary

    settings = config.settings_for(args.redis_url)
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


# The fields of a task hash that hold a time (ms since the epoch), and those that hold JSON.
_TIMES = ("enqueue_time", "due_at", "started_at", "failed_at", "finished_at", "retried_at", "slot",
          "retry_later_at", "progress_at", "stalled_at")  # fmt: skip


_JSON = ("params", "result")


def task_command(args: argparse.Namespace) -> int:
    from ..task import Task

    settings = config.settings_for(args.redis_url)
    record = Task(args.id, args.queue, settings.redis_url, prefix=settings.prefix).info()
    if not record:
        print(f"{args.queue}<{args.id}>: no such task (never enqueued, or expired)")
        return 1
    width = max(len(name) for name in record)
    for name, value in record.items():
        shown = value
        if name in _TIMES and value.isdigit() and (when := moment(int(value))) is not None:
            shown = f"{when.isoformat(timespec='milliseconds')} ({value})"
        elif name == "progress":
            with contextlib.suppress(ValueError):  # (else shown as stored)
                shown = f"{float(value):.0%} ({value})"
        elif name in _JSON:
            with contextlib.suppress(ValueError):  # (else shown as stored)
                shown = json.dumps(json.loads(value), indent=2, ensure_ascii=False)
            shown = shown.replace("\n", "\n" + " " * (width + 2))
        print(f"{name:<{width}}  {shown}")
    return 0


def runners_command(args: argparse.Namespace) -> int:
    from ..inspection import runners

    settings = config.settings_for(args.redis_url)
    found = runners(settings)
    now_ms = time.time() * 1000
    print(f"{len(found)} runner(s)")
    for runner in found:
        busy = len(runner["tasks"])
        print(
            f"{runner['id']}  pid {runner['pid']}  queues {','.join(runner['queues'])}  "
            f"busy {busy}/{runner['concurrency']}  up {(now_ms - runner['started']) / 1000:.0f} s"
            f"  last beat {(now_ms - runner['beat']) / 1000:.1f} s ago  culex {runner['version']}"
        )
        for task in runner["tasks"]:
            running_s = (now_ms - task.get("started", now_ms)) / 1000
            print(
                f"    {task.get('queue')}<{task.get('id')}> {task.get('job')} "
                f"(attempt {task.get('attempt')}) for {running_s:.1f} s"
            )
    return 0


# What a task's time in each state's set means, as the column of ``culex tasks`` says it.
_AT = {"waiting": "ready since", "scheduled": "due", "pending": "lease ends", "dead": "died"}


def tasks_command(args: argparse.Namespace) -> int:
    from ..inspection import tasks

    settings = config.settings_for(args.redis_url)
    try:
        page = tasks(
            args.queue, args.state, settings, newest_first=not args.oldest, cursor=args.after,
            limit=args.limit, job=args.job,
        )  # fmt: skip
    except (TypeError, ValueError) as exc:
        raise CulexError(str(exc)) from None
    rows = [
        {"id": row.id, "job": row.job, _AT[args.state]: _moment(row.at),
         "enqueued": _moment(row.enqueued_at), "priority": str(row.priority),
         "group": one_line(row.group, 30), "retries": str(row.retry_count),
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
