"""The ``culex`` command: run a runner, manage the embedded server, look at queues,
periodic jobs and dead tasks (and retry them), cancel tasks, serve the dashboard, demo."""

from __future__ import annotations

import argparse
import contextlib
import gc
import importlib
import importlib.util
import json
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from . import config, logs
from .errors import CulexError, ServerError

if TYPE_CHECKING:
    from .dead import DeadTask
    from .periodic import PeriodicJob


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``culex`` and ``python -m culex``; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    logs.configure(args.log_level, sys.stderr, _log_label(args))
    try:
        return int(args.command(args))
    except CulexError as exc:
        print(f"culex: {exc}", file=sys.stderr)
        return 2


LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]
_STATES = ["waiting", "scheduled", "pending", "dead"]
# Flags of settings that the guide has shown by another name too.
_ALIASES = {"run_from": ["--queues"]}
_METAVARS = {"seconds": "SECONDS", "count": "N", "text": "TEXT"}


def _parser() -> argparse.ArgumentParser:
    # (Long, but flat: one block per command, read top to bottom as the CLI's whole shape;
    # culex run's many setting flags are made by _setting_flags, not written here.)
    parser = argparse.ArgumentParser(prog="culex", description=__doc__)
    parser.add_argument("--log-level", default="INFO", choices=LOG_LEVELS)
    # The global options are also taken after the command (culex run app.jobs --log-level
    # WARNING); there, they are left out of the result unless given, so they do not hide
    # the ones given before the command.
    global_options = argparse.ArgumentParser(add_help=False)
    global_options.add_argument("--log-level", default=argparse.SUPPRESS, choices=LOG_LEVELS)
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    def command(name: str, help: str, usage: str | None = None) -> argparse.ArgumentParser:
        return commands.add_parser(name, parents=[global_options], help=help, usage=usage)

    run = command("run", help="run the jobs that MODULE registers")
    run.add_argument("module", help="a module name (app.jobs) or a file (app/jobs.py)")
    run.add_argument(
        "--processes",
        type=_processes,
        default=1,
        metavar="N",
        help="run N runner processes under a supervisor that restarts one that dies and "
        "passes SIGTERM/SIGINT on to all (default 1: this process is the runner)",
    )
    # Given by the supervisor to each runner it starts: a pipe that ends when it does.
    run.add_argument("--supervisor-pipe", type=int, help=argparse.SUPPRESS)
    _setting_flags(run)
    run.set_defaults(command=_run)

    server = command("server", help="the embedded Valkey server")
    server.add_argument("action", choices=["start", "stop", "status"])
    server.add_argument("--data-dir", help="default: $CULEX_DATA_DIR or ./.culex")
    server.set_defaults(command=_server)

    queues = command("queues", help="every known queue and its task counts")
    queues.add_argument("--redis-url", help="redis://... (default: the embedded server)")
    queues.set_defaults(command=_queues)
    stats = command(
        "stats", help="what ended per queue (and job) lately: outcomes, rate, run times"
    )
    stats.add_argument(
        "--queue", action="append", metavar="Q", help="this queue only (repeat for more)"
    )
    stats.add_argument(
        "--window", type=_window, default=3600.0, help="how far back: 15m, 1h (default), 1d..."
    )
    stats.add_argument("--jobs", action="store_true", help="a line per job of each queue")
    stats.add_argument("--redis-url", help="redis://... (default: the embedded server)")
    stats.set_defaults(command=_stats)
    task = command("task", help="one task's whole record, readable")
    task.add_argument("queue")
    task.add_argument("id")
    task.add_argument("--redis-url", help="redis://... (default: the embedded server)")
    task.set_defaults(command=_task)
    runners = command("runners", help="the runners at work now, and what each runs")
    runners.add_argument("--redis-url", help="redis://... (default: the embedded server)")
    runners.set_defaults(command=_runners)

    periodic = command(
        "periodic",
        help="periodic jobs: next run, last run, last outcome; trigger runs one now",
        usage="culex periodic [MODULE], or culex periodic trigger NAME [MODULE] [--queue Q]",
    )
    periodic.add_argument("words", nargs="*", metavar="[trigger NAME] [MODULE]")
    periodic.add_argument("--queue", help="trigger: the job's queue (default: where it runs)")
    periodic.add_argument("--redis-url", help="redis://... (default: the embedded server)")
    periodic.set_defaults(command=_periodic)

    tasks = command("tasks", help="a page of a queue's tasks in one state, and the next cursor")
    tasks.add_argument("queue", metavar="QUEUE")
    tasks.add_argument("--state", default="waiting", choices=_STATES, help="default: waiting")
    tasks.add_argument("--oldest", action="store_true", help="oldest first (default: newest)")
    tasks.add_argument("--job", metavar="TYPE", help="only tasks of this job type")
    tasks.add_argument("--limit", type=int, default=50, metavar="N", help="rows, 1 to 500")
    tasks.add_argument("--after", metavar="CURSOR", help="go on from a page's next cursor")
    tasks.add_argument("--redis-url", help="redis://... (default: the embedded server)")
    tasks.set_defaults(command=_tasks)

    dead = command(
        "dead",
        help="a queue's dead tasks; retry puts them back in waiting, purge deletes them",
        usage="culex dead QUEUE [--limit N], or culex dead retry QUEUE (ID ... | --all "
        "[--job TYPE]), or culex dead purge QUEUE [--job TYPE] [--yes]",
    )
    dead.add_argument("words", nargs="+", metavar="[retry|purge] QUEUE [ID ...]")
    dead.add_argument("--all", action="store_true", help="retry: every dead task of QUEUE")
    dead.add_argument(
        "--limit",
        type=int,
        help="how many to show (default 50); retry --all: how many to retry, oldest first",
    )
    dead.add_argument("--job", metavar="TYPE", help="retry --all, purge: only this job type")
    dead.add_argument("--yes", action="store_true", help="purge: do not ask first")
    dead.add_argument("--redis-url", help="redis://... (default: the embedded server)")
    dead.set_defaults(command=_dead)

    cancel = command(
        "cancel", help="call off tasks that have not started: they go to dead, as if failed"
    )
    cancel.add_argument("queue", metavar="QUEUE")
    cancel.add_argument("ids", nargs="+", metavar="ID")
    cancel.add_argument("--reason", default="", help='stored as last_error "cancelled: TEXT"')
    cancel.add_argument("--redis-url", help="redis://... (default: the embedded server)")
    cancel.set_defaults(command=_cancel)

    dashboard = command("dashboard", help="serve the web dashboard (needs culex[dashboard])")
    dashboard.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1")
    dashboard.add_argument("--port", type=int, default=8000, help="default 8000")
    dashboard.add_argument("--redis-url", help="redis://... (default: the embedded server)")
    dashboard.add_argument("--read-only", action="store_true", help="no actions; POSTs get 403")
    dashboard.add_argument(
        "--basic-auth", metavar="USER:PASSWORD", help="ask every request for these credentials"
    )
    dashboard.set_defaults(command=_dashboard)

    metrics = command("metrics", help="serve Prometheus metrics at /metrics")
    metrics.add_argument("--port", type=int, required=True, help="0: a free port")
    metrics.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (0.0.0.0: all)")
    metrics.add_argument("--redis-url", help="redis://... (default: the embedded server)")
    metrics.set_defaults(command=_metrics)

    demo = command("demo", help="enqueue example jobs and run them, then exit")
    demo.set_defaults(command=_demo)
    return parser


def _setting_flags(run: argparse.ArgumentParser) -> None:
    """A flag for every setting in config's table: ``--grace-period 5`` (seconds),
    ``--concurrency 20``, ``--durable-enqueue`` / ``--no-durable-enqueue``, ..."""
    group = run.add_argument_group(
        "settings", "each also CULEX_<NAME>; precedence: flag > environment > code > default"
    )
    for name, kind in config.kinds().items():
        flags = [f"--{name.replace('_', '-')}", *_ALIASES.get(name, [])]
        env = f"as CULEX_{name.upper()}"
        if kind == "flag":
            group.add_argument(*flags, dest=name, action=argparse.BooleanOptionalAction, help=env)
        else:
            group.add_argument(*flags, dest=name, metavar=_METAVARS[kind], help=env)


def _processes(text: str) -> int:
    """--processes: a whole number, 1 or more."""
    try:
        count = int(text)
    except ValueError:
        count = 0
    if count < 1:
        raise argparse.ArgumentTypeError(f"must be a whole number, 1 or more (not {text!r})")
    return count


def _log_label(args: argparse.Namespace) -> str:
    """What tells one process's log lines from another's when a supervisor runs several."""
    if getattr(args, "supervisor_pipe", None) is not None:
        return f"runner {os.getpid()}"
    if getattr(args, "processes", 1) > 1:
        return f"supervisor {os.getpid()}"
    return ""


def load_module(name: str) -> None:
    """Import the user's module (by dotted name, or by file path) so its jobs register."""
    path = Path(name)
    if name.endswith(".py") and path.is_file():
        spec = importlib.util.spec_from_file_location(path.stem, path)
        if spec is None or spec.loader is None:
            raise CulexError(f"cannot load {name}")
        sys.path.insert(0, str(path.parent.resolve()))
        module = importlib.util.module_from_spec(spec)
        sys.modules[path.stem] = module
        spec.loader.exec_module(module)
        return
    sys.path.insert(0, str(Path.cwd()))
    try:
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise CulexError(
                f"no module named {name!r} (run culex from your project's folder)"
            ) from None
        raise


def _run(args: argparse.Namespace) -> int:
    from .runner import Runner

    given = {name: getattr(args, name) for name in config.kinds()}
    # For the whole process: an enqueue inside a perform sees them too.
    flags = {name: value for name, value in given.items() if value is not None}
    config.set_flags(flags)
    if args.supervisor_pipe is not None:
        from .supervisor import follow

        follow(args.supervisor_pipe)
    load_module(args.module)
    runner = Runner()  # (a supervisor too: a check that fails, fails here, once)
    if args.processes > 1:
        from .supervisor import supervise

        return supervise(args.module, flags, args.log_level, args.processes)
    # What is loaded by now (modules, classes, functions) lives as long as the process:
    # freeze it, so that the full collections of a busy runner skip it and stall far less
    # (docs/fast.md; bench/collector.py measures it).
    gc.collect()
    gc.freeze()
    runner.run()
    return 0


def _server(args: argparse.Namespace) -> int:
    from .embedded import EmbeddedServer, default_data_dir

    server = EmbeddedServer(args.data_dir or default_data_dir())
    if args.action == "start":
        print(f"culex server running at {server.ensure_running()}")
    elif args.action == "stop":
        print("culex server stopped" if server.stop() else "culex server was not running")
    else:
        for key, value in server.status().items():
            print(f"{key}: {value}")
    return 0


def _queues(args: argparse.Namespace) -> int:
    from .inspection import queue_counts, queue_latency

    settings = config.settings(**({"redis_url": args.redis_url} if args.redis_url else {}))
    counts = queue_counts(settings)
    latency = queue_latency(settings, list(counts))
    states = ("waiting", "pending", "scheduled", "dead")
    print(f"{'queue':<30}" + "".join(f"{s:>10}" for s in states) + f"{'latency':>10}")
    for queue, row in counts.items():
        print(
            f"{queue:<30}"
            + "".join(f"{row[s]:>10}" for s in states)
            + f"{latency.get(queue, 0.0):>9.1f}s"
        )
    return 0


_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def _window(text: str) -> float:
    """A window like 15m, 1h, 1d or 90s, in seconds."""
    number, unit = text[:-1], text[-1:]
    if unit not in _UNITS or not number.isdigit() or int(number) == 0:
        raise argparse.ArgumentTypeError(f"a window is a whole number and s, m, h or d: {text!r}")
    return float(int(number) * _UNITS[unit])


def _stats(args: argparse.Namespace) -> int:
    from .stats import Counts, job_summary, summary

    settings = config.settings(**({"redis_url": args.redis_url} if args.redis_url else {}))
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
    _print_table(columns, table)
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
_TIMES = ("enqueue_time", "due_at", "started_at", "failed_at", "finished_at", "retried_at", "slot")
_JSON = ("params", "result")


def _task(args: argparse.Namespace) -> int:
    from .task import Task

    settings = config.settings(**({"redis_url": args.redis_url} if args.redis_url else {}))
    record = Task(args.id, args.queue, settings.redis_url, prefix=settings.prefix).info()
    if not record:
        print(f"{args.queue}<{args.id}>: no such task (never enqueued, or expired)")
        return 1
    width = max(len(name) for name in record)
    for name, value in record.items():
        shown = value
        if name in _TIMES and value.isdigit():
            moment = datetime.fromtimestamp(int(value) / 1000, tz=UTC)
            shown = f"{moment.isoformat(timespec='milliseconds')} ({value})"
        elif name in _JSON:
            with contextlib.suppress(ValueError):  # (else shown as stored)
                shown = json.dumps(json.loads(value), indent=2, ensure_ascii=False)
            shown = shown.replace("\n", "\n" + " " * (width + 2))
        print(f"{name:<{width}}  {shown}")
    return 0


def _runners(args: argparse.Namespace) -> int:
    from .inspection import runners

    settings = config.settings(**({"redis_url": args.redis_url} if args.redis_url else {}))
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


def _periodic(args: argparse.Namespace) -> int:
    """Without MODULE, the jobs come from Redis alone (the records runners' schedulers
    write); with it, from the module's classes, also those no runner has scheduled yet."""
    settings = config.settings(**({"redis_url": args.redis_url} if args.redis_url else {}))
    words = list(args.words)
    triggering = bool(words) and words[0] == "trigger"
    if triggering:
        words.pop(0)
    if (triggering and len(words) not in (1, 2)) or (not triggering and len(words) > 1):
        raise CulexError(
            "usage: culex periodic [MODULE], or culex periodic trigger NAME [MODULE] [--queue Q]"
        )
    name = words.pop(0) if triggering else None
    module = words[0] if words else None
    if triggering and name is not None:
        return _trigger_periodic(name, module, args.queue, settings)
    if module is not None:
        return _periodic_of_module(module, settings)
    _show_periodic(settings)
    return 0


def _periodic_of_module(module: str, settings: config.Settings) -> int:
    from .inspection import periodic_status

    columns = ("job", "queue", "schedule", "next run", "last run", "last outcome")
    _print_table(columns, periodic_status(_module_periodic_jobs(module), settings))
    return 0


def _module_periodic_jobs(module: str) -> list[type[PeriodicJob]]:
    from .job_registry import registry
    from .periodic import PeriodicJob

    load_module(module)
    return [job for job in registry if issubclass(job, PeriodicJob)]


def _trigger_periodic(
    name: str, module: str | None, queue: str | None, settings: config.Settings
) -> int:
    from .periodic import trigger

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
        task = trigger(target, queue, settings)
    except (TypeError, ValueError) as exc:
        raise CulexError(str(exc)) from None
    print(f"enqueued {name} as task {task.queue}<{task.id}>")
    return 0


def _queue_of(name: str, settings: config.Settings) -> str:
    """The one queue whose scheduler runs the job ``name`` (else a clear error)."""
    from .inspection import periodic_jobs

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
    from .inspection import periodic_jobs

    columns = ("job", "queue", "schedule", "next run", "last run", "last outcome", "last task")
    rows = [
        {
            "job": row.job,
            "queue": row.queue,
            "schedule": row.schedule,
            "next run": _periodic_time(row.next_run, row.timezone),
            "last run": _periodic_time(row.last_run, row.timezone),
            "last outcome": row.last_outcome or "-",
            "last task": row.last_task or "-",
        }
        for row in periodic_jobs(settings)
    ]
    if not rows:
        print("no periodic jobs: no runner schedules any (or give the MODULE that defines them)")
        return
    _print_table(columns, rows)


def _periodic_time(seconds: float | None, timezone: str) -> str:
    """An epoch time in the job's time zone, as culex periodic MODULE shows it."""
    from .periodic import EPOCH, zone_of

    if seconds is None:
        return "never"
    when = EPOCH + timedelta(seconds=seconds)
    return when.astimezone(zone_of(timezone)).strftime("%Y-%m-%d %H:%M:%S %Z")


def _print_table(columns: Sequence[str], rows: list[dict[str, str]]) -> None:
    """Columns padded to their widest cell, a header line first."""
    widths = [max([len(c), *(len(row[c]) for row in rows)]) for c in columns]
    for line in [dict(zip(columns, columns, strict=True)), *rows]:
        print("  ".join(line[c].ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())


_DEAD_USAGE = (
    "usage: culex dead QUEUE, or culex dead retry QUEUE (ID ... | --all [--job TYPE]), "
    "or culex dead purge QUEUE [--job TYPE] [--yes]"
)


def _dead(args: argparse.Namespace) -> int:
    from . import dead

    settings = config.settings(**({"redis_url": args.redis_url} if args.redis_url else {}))
    action = args.words[0] if args.words[0] in ("retry", "purge") and len(args.words) > 1 else ""
    queue, *ids = args.words[1:] if action else args.words
    if (
        (ids and action != "retry")
        or (action == "retry" and bool(ids) == args.all)
        or (args.job is not None and not (action == "purge" or args.all))
        or (args.job is not None and args.limit is not None)
    ):
        raise CulexError(_DEAD_USAGE)
    try:
        if action == "purge":
            return _purge(queue, args.job, args.yes, settings)
        if action == "retry" and args.all and args.limit is None:
            return _retry_all(queue, args.job, settings)
        if action == "retry":
            outcome = dead.retry(queue, ids or None, args.limit, settings=settings)
        else:
            tasks = dead.dead_tasks(
                queue, 50 if args.limit is None else args.limit, settings=settings
            )
    except (TypeError, ValueError) as exc:
        raise CulexError(str(exc)) from None
    if action == "retry":
        print(f"put {len(outcome.retried)} dead task(s) of {queue} back in waiting")
        if outcome.skipped:
            print(f"skipped (not dead, or its record expired): {' '.join(outcome.skipped)}")
        return 0
    _show_dead(tasks, queue)
    return 0


def _retry_all(queue: str, job: str | None, settings: config.Settings) -> int:
    """Every dead task of ``queue`` (of ``job``) back in waiting, with a progress bar."""
    from .bulk import apply
    from .progress import ProgressBar

    done = apply("retry", queue, settings, job=job, progress=ProgressBar("retrying"))
    print(f"put {done} dead task(s) of {queue} back in waiting")
    return 0


def _purge(queue: str, job: str | None, yes: bool, settings: config.Settings) -> int:
    """Delete every dead task of ``queue`` (of ``job``), once confirmed, with a progress bar."""
    from ._redis.keys import check_queue_name
    from .bulk import apply
    from .inspection import queue_counts
    from .progress import ProgressBar

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


# What a task's time in each state's set means, as the column of ``culex tasks`` says it.
_AT = {"waiting": "ready since", "scheduled": "due", "pending": "lease ends", "dead": "died"}


def _tasks(args: argparse.Namespace) -> int:
    from .inspection import tasks

    settings = config.settings(**({"redis_url": args.redis_url} if args.redis_url else {}))
    try:
        page = tasks(
            args.queue, args.state, settings, newest_first=not args.oldest, cursor=args.after,
            limit=args.limit, job=args.job,
        )  # fmt: skip
    except (TypeError, ValueError) as exc:
        raise CulexError(str(exc)) from None
    columns = ("id", "job", _AT[args.state], "enqueued", "retries", "params", "last error")
    cells = [
        (row.id, row.job, _moment(row.at), _moment(row.enqueued_at), str(row.retry_count),
         _line(row.params, 40), _line(row.last_error, 60))
        for row in page.rows
    ]  # fmt: skip
    _print_table(columns, [dict(zip(columns, row, strict=True)) for row in cells])
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
    return datetime.fromtimestamp(seconds, tz=UTC).astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _show_dead(tasks: list[DeadTask], queue: str) -> None:
    if not tasks:
        print(f"no dead tasks in {queue}")
        return
    columns = ("id", "type", "died at", "attempts", "reason")
    cells = [(t.id, t.type, _local(t.died_at), str(t.attempt), _line(t.error)) for t in tasks]
    _print_table(columns, [dict(zip(columns, row, strict=True)) for row in cells])


def _local(moment: datetime) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def _line(reason: str, width: int = 80) -> str:
    """A reason shortened to one line."""
    lines = reason.strip().splitlines() or [""]
    line = lines[0] + (" ..." if len(lines) > 1 else "")
    return line if len(line) <= width else line[: width - 3] + "..."


def _cancel(args: argparse.Namespace) -> int:
    """One line per id: cancelled, or the state that refused it. Exit 1 unless all were.
    Every id goes in the same round trip."""
    from ._redis.operations import CANCELLED
    from .flow import run_sync, together
    from .task import Task

    settings = config.settings(**({"redis_url": args.redis_url} if args.redis_url else {}))
    try:  # every id is checked before the first one is cancelled
        flows = {
            task_id: Task(
                task_id, args.queue, settings.redis_url, prefix=settings.prefix
            ).cancel_flow(args.reason)
            for task_id in dict.fromkeys(args.ids)
        }
    except (TypeError, ValueError) as exc:
        raise CulexError(str(exc)) from None
    batch = together(list(flows.values()), refused="return")  # one round trip
    outcomes = run_sync(batch, settings.redis_url)
    refused = 0
    for task_id, outcome in zip(flows, outcomes, strict=True):
        if outcome == CANCELLED:
            print(f"{task_id}: cancelled")
            continue
        refused += 1
        if isinstance(outcome, ServerError):  # e.g. its periodic record's key is of another type
            print(f"{task_id}: not cancelled, {outcome}")
        else:
            print(f"{task_id}: not cancelled, {f'it is {outcome}' if outcome else 'not found'}")
    return 1 if refused else 0


def _dashboard(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from .dashboard import app
    except ImportError as exc:
        raise CulexError(
            f"the dashboard needs its extra: pip install 'culex[dashboard]' ({exc})"
        ) from None
    credentials = None
    if args.basic_auth is not None:
        user, colon, password = args.basic_auth.partition(":")
        if not colon or not user or not password:
            raise CulexError("--basic-auth takes USER:PASSWORD, both non-empty")
        credentials = (user, password)
    if not 0 < args.port < 65536:
        raise CulexError(f"--port must be 1 to 65535, not {args.port}")
    settings = config.settings(**({"redis_url": args.redis_url} if args.redis_url else {}))
    dashboard = app(settings, read_only=args.read_only, basic_auth=credentials)
    uvicorn.run(dashboard, host=args.host, port=args.port, log_level=args.log_level.lower())
    return 0


def _metrics(args: argparse.Namespace) -> int:
    try:
        from .metrics import serve
    except ImportError as exc:
        print(f"culex metrics needs prometheus-client ({exc}): pip install 'culex[metrics]'")
        return 2
    settings = config.settings(**({"redis_url": args.redis_url} if args.redis_url else {}))
    serve(settings, args.host, args.port)
    return 0


def _demo(args: argparse.Namespace) -> int:
    from .demo import main as demo

    return demo()
