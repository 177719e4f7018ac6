"""The ``culex`` command: run a runner, manage the embedded server, look at queues,
periodic jobs, dead tasks (and retry them) and workflow runs (and cancel or retry them),
cancel tasks, signal durable tasks, pause, resume and limit queues, serve the dashboard, demo."""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Sequence

from .. import config, logs
from ..errors import CulexError
from . import (
    dead_tasks,
    durable_commands,
    looking,
    periodic_jobs,
    queue_control_commands,
    running,
    task_events,
    workflow_commands,
)
from .which_server import existing_server, may_start_server


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``culex`` and ``python -m culex``; returns the exit code.

    The one place where a command's refusal becomes one line, ``culex: <message>`` on
    stderr, and exit code 2 (as argparse's own usage errors): a CulexError, the TypeError
    or ValueError with which culex's API refuses a bad value (a queue name with a space, a
    rate that is no rate...), an OSError (a port in use, a folder not there).
    ``--log-level DEBUG`` logs its traceback too. A reader that goes away
    (``culex dead payments | head -1``) ends the command quietly, exit code 1.

    A command that reads or steers says first which server (one line on stderr, ``Server:
    ...``, not with ``--log-level WARNING``), and refuses when none runs (which_server.py)."""
    parser = _parser()
    args = parser.parse_args(argv)
    logs.configure(args.log_level, sys.stderr, _log_label(args))
    try:
        if not may_start_server(args):
            existing_server(args, say=args.log_level in ("DEBUG", "INFO"))
        code = int(args.command(args))
        sys.stdout.flush()  # (here: a pipe closed early raises now, not at exit)
        return code
    except BrokenPipeError:
        # Python's documented way: what is left to write goes nowhere, and exit.
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return 1
    except KeyboardInterrupt:  # (Ctrl-C in a command that does not handle it itself)
        print("culex: interrupted", file=sys.stderr)
        return 130
    except (CulexError, TypeError, ValueError, OSError) as exc:
        logging.getLogger("culex").debug("culex %s refused", args.command.__name__, exc_info=True)
        print(f"culex: {exc}", file=sys.stderr)
        return 2


LOG_LEVELS = ["DEBUG", "INFO", "WARNING", "ERROR"]


# (succeeded: the queue's recent successes, a history, not one of the four sets)
_STATES = ["waiting", "scheduled", "pending", "dead", "succeeded"]


# Flags of settings that the guide has shown by another name too.
_ALIASES = {"run_from": ["--queues"], "strict_queues": ["--strict"]}


_METAVARS = {"seconds": "SECONDS", "count": "N", "text": "TEXT"}


def _parser() -> argparse.ArgumentParser:
    # (Long, but flat: one block per command, read top to bottom as the CLI's whole shape;
    # culex run's many setting flags are made by _setting_flags, not written here.)
    parser = argparse.ArgumentParser(prog="culex", description=(__doc__ or "").replace("``", ""))
    parser.add_argument("--log-level", default="INFO", choices=LOG_LEVELS)
    # The global options are also taken after the command (culex run app.jobs --log-level
    # WARNING); there, they are left out of the result unless given, so they do not hide
    # the ones given before the command.
    global_options = argparse.ArgumentParser(add_help=False)
    global_options.add_argument("--log-level", default=argparse.SUPPRESS, choices=LOG_LEVELS)
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    # Every command but run (whose settings flags hold it), server and demo takes --redis-url.
    server_option = argparse.ArgumentParser(add_help=False)
    server_option.add_argument("--redis-url", help="redis://... (default: the embedded server)")
    _url_file_flag(server_option)

    def command(
        name: str, help: str, usage: str | None = None, *, server: bool = True
    ) -> argparse.ArgumentParser:
        parents = [global_options, server_option] if server else [global_options]
        return commands.add_parser(name, parents=parents, help=help, usage=usage)

    run = command("run", help="run the jobs that MODULE registers", server=False)
    run.add_argument("module", help="a module name (app.jobs) or a file (app/jobs.py)")
    run.add_argument(
        "--processes",
        type=_processes,
        default=1,
        metavar="N",
        help="run N runner processes under a supervisor that restarts one that dies and "
        "passes SIGTERM/SIGINT on to all (default 1: this process is the runner)",
    )
    run.add_argument(
        "--max-tasks-per-process",
        type=_processes,
        metavar="M",
        help="replace a runner process once it has run M tasks (under a supervisor, as "
        "--processes starts; one at a time, gracefully)",
    )
    run.add_argument(
        "--max-memory-per-process",
        type=_processes,
        metavar="MB",
        help="replace a runner process once its resident memory (RSS) has passed MB "
        "megabytes after a task (under a supervisor; one at a time, gracefully)",
    )
    # Given by the supervisor to each runner it starts: a pipe that ends when it does, and
    # one the runner tells it things on (culex.runner.supervised).
    run.add_argument("--supervisor-pipe", type=int, help=argparse.SUPPRESS)
    run.add_argument("--supervisor-report", type=int, help=argparse.SUPPRESS)
    run.add_argument("--start-quiet", action="store_true", help=argparse.SUPPRESS)
    _setting_flags(run)
    _url_file_flag(run)
    run.set_defaults(command=running.run_command, starts_server=True)

    server = command("server", help="the embedded Valkey server", server=False)
    server.add_argument("action", choices=["start", "stop", "status"])
    server.add_argument("--data-dir", help="default: $CULEX_DATA_DIR or ./.culex")
    server.set_defaults(command=running.server_command)

    queues = command("queues", help="every known queue and its task counts")
    queues.set_defaults(command=looking.queues_command)
    stats = command(
        "stats", help="what ended per queue (and job) lately: outcomes, rate, run times"
    )
    stats.add_argument(
        "--queue", action="append", metavar="Q", help="this queue only (repeat for more)"
    )
    stats.add_argument(
        "--window",
        type=looking.window,
        default=3600.0,
        help="how far back: 15m, 1h (default), 1d...",
    )
    stats.add_argument("--jobs", action="store_true", help="a line per job of each queue")
    stats.set_defaults(command=looking.stats_command)
    task = command(
        "task",
        help="one task's whole record, readable",
        usage="culex task QUEUE ID, or culex task QUEUE<ID> (as logs name it), or culex task ID",
    )
    task.add_argument("queue", metavar="QUEUE | QUEUE<ID> | ID")
    task.add_argument("id", nargs="?", metavar="ID")
    task.add_argument(
        "--full",
        action="store_true",
        help="each traceback whole: culex's own frames before the job's are folded without",
    )
    task.set_defaults(command=looking.task_command)
    feed = command(
        "events",
        help="what happened to the tasks of some queues (with the setting events on): the "
        "recent events, and with --follow the new ones as they come",
    )
    feed.add_argument("queue", nargs="*", metavar="QUEUE", help="default: every known queue")
    feed.add_argument("--follow", action="store_true", help="wait for new events (Ctrl-C ends)")
    feed.add_argument(
        "--since",
        type=task_events.since,
        metavar="ID|AGO",
        help="from after this event id, or this long ago: 90s, 10m (default), 2h, 1d",
    )
    feed.set_defaults(command=task_events.events_command)
    runners = command("runners", help="the runners at work now, and what each runs")
    runners.add_argument(
        "--rollback-check", metavar="VERSION", default=None,
        help="say instead what is in use on the queues that a runner of release VERSION "
        "(e.g. 0.4.0) cannot serve, to drain before rolling back to it (exit 1 if any)",
    )  # fmt: skip
    runners.set_defaults(command=looking.runners_command)

    periodic = command(
        "periodic",
        help=(
            "periodic jobs: next run, last run, last outcome; trigger runs one now; pause and "
            "resume stop and restart its runs"
        ),
        usage=periodic_jobs.USAGE,
    )
    periodic.add_argument("words", nargs="*", metavar="[trigger|pause|resume NAME] [MODULE]")
    periodic.add_argument(
        "--queue", help="trigger, pause, resume: the job's queue (default: where it runs)"
    )
    periodic.set_defaults(command=periodic_jobs.periodic_command)

    tasks = command("tasks", help="a page of a queue's tasks in one state, and the next cursor")
    tasks.add_argument("queue", metavar="QUEUE")
    tasks.add_argument("--state", default="waiting", choices=_STATES, help="default: waiting")
    tasks.add_argument(
        "--oldest",
        action="store_true",
        help="oldest first (default: newest); waiting: in run order (priority, then age)",
    )
    tasks.add_argument("--job", metavar="TYPE", help="only tasks of this job type")
    tasks.add_argument("--limit", type=int, default=50, metavar="N", help="rows, 1 to 500")
    tasks.add_argument("--after", metavar="CURSOR", help="go on from a page's next cursor")
    tasks.set_defaults(command=looking.tasks_command)

    dead = command(
        "dead",
        help="a queue's dead tasks; retry puts them back in waiting, purge deletes them",
        usage="culex dead QUEUE [--limit N] [--offset N], or culex dead retry QUEUE (ID ... | "
        "--all [--job TYPE]), or culex dead purge QUEUE [--job TYPE] [--yes]",
    )
    dead.add_argument("words", nargs="+", metavar="[retry|purge] QUEUE [ID ...]")
    dead.add_argument("--all", action="store_true", help="retry: every dead task of QUEUE")
    dead.add_argument(
        "--limit",
        type=int,
        help="how many to show (default 50); retry --all: how many to retry, oldest first",
    )
    dead.add_argument(
        "--offset", type=int, default=0, metavar="N", help="show from the Nth on (default 0)"
    )
    dead.add_argument("--job", metavar="TYPE", help="retry --all, purge: only this job type")
    dead.add_argument("--yes", action="store_true", help="purge: do not ask first")
    dead.set_defaults(command=dead_tasks.dead_command)

    cancel = command(
        "cancel",
        help="call off tasks: they go to dead, as if failed (a running one once its runner "
        "has stopped it)",
    )
    cancel.add_argument("queue", metavar="QUEUE")
    cancel.add_argument("ids", nargs="+", metavar="ID")
    cancel.add_argument("--reason", default="", help='stored as last_error "cancelled: TEXT"')
    cancel.set_defaults(command=dead_tasks.cancel_command)

    signal = command(
        "signal",
        help="send a signal to a durable task, for its receive(NAME): delivered, kept, "
        "skipped, ended or unknown, and what the task awaits",
    )
    signal.add_argument("queue", metavar="QUEUE")
    signal.add_argument("id", metavar="ID")
    signal.add_argument("name", metavar="NAME")
    signal.add_argument(
        "value", nargs="?", default="null", metavar="JSON", help="its value (default: null)"
    )
    signal.add_argument(
        "--keep",
        action="store_true",
        help="keep it for a later receive when the task does not await NAME now (without "
        "it, nothing is kept then, and the command exits 1)",
    )
    signal.set_defaults(command=durable_commands.signal_command)

    workflow = command(
        "workflow",
        help="a workflow run: its state and a table of its nodes; cancel or retry it",
        usage=workflow_commands.WORKFLOW_USAGE,
    )
    workflow.add_argument("words", nargs="+", metavar="[cancel|retry] RUN_ID")
    workflow.add_argument(
        "--limit", type=int, metavar="N", help="nodes shown, from --offset on (default 2000)"
    )
    workflow.add_argument(
        "--offset", type=int, default=0, metavar="N", help="show from the Nth node on (default 0)"
    )
    workflow.add_argument("--state", metavar="STATE", help="show only the nodes in this state")
    workflow.set_defaults(command=workflow_commands.workflow_command)

    pause = command("pause", help="pause a queue: it keeps taking tasks and runs none")
    pause.add_argument("queue", metavar="QUEUE")
    _force_flag(pause)
    pause.set_defaults(command=queue_control_commands.pause_command)
    resume = command("resume", help="resume a paused queue")
    resume.add_argument("queue", metavar="QUEUE")
    _force_flag(resume)
    resume.set_defaults(command=queue_control_commands.resume_command)
    limit = command(
        "limit",
        help="change a queue's rate and concurrency limits at run time (none: no limit)",
        usage="culex limit QUEUE [--rate N/s|m|h|none] [--concurrency N|none] [--group-rate "
        "N/s|m|h|none] [--group-concurrency N|none] [--reset]",
    )
    limit.add_argument("queue", metavar="QUEUE")
    _force_flag(limit)
    limit.add_argument("--rate", help='e.g. 50/s, 10/m, 1000/h; "none" lifts it')
    limit.add_argument("--concurrency", help='at most N running at once; "none" lifts it')
    limit.add_argument("--group-rate", help="the same as --rate, for each group of the queue")
    limit.add_argument("--group-concurrency", help="at most N of each group running at once")
    limit.add_argument(
        "--reset", action="store_true", help="drop the limits set here: the jobs' own hold again"
    )
    limit.set_defaults(command=queue_control_commands.limit_command)

    dashboard = command("dashboard", help="serve the web dashboard (needs culex[dashboard])")
    dashboard.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1")
    dashboard.add_argument("--port", type=int, default=8000, help="default 8000")
    dashboard.add_argument("--read-only", action="store_true", help="no actions; POSTs get 403")
    dashboard.add_argument(
        "--basic-auth",
        metavar="USER:PASSWORD",
        help="ask every request for these credentials (seen in ps: prefer --basic-auth-file "
        f"or ${running.BASIC_AUTH_ENV})",
    )
    dashboard.add_argument(
        "--basic-auth-file",
        dest="basic_auth",
        type=_file_text,
        metavar="PATH",
        help="--basic-auth's USER:PASSWORD, read from this file",
    )
    dashboard.set_defaults(command=running.dashboard_command)

    metrics = command("metrics", help="serve Prometheus metrics at /metrics")
    metrics.add_argument("--port", type=int, required=True, help="0: a free port")
    metrics.add_argument("--host", default="127.0.0.1", help="default 127.0.0.1 (0.0.0.0: all)")
    metrics.set_defaults(command=running.metrics_command)

    demo = command("demo", help="enqueue example jobs and run them, then exit", server=False)
    demo.set_defaults(command=running.demo_command)
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


def _force_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--force",
        action="store_true",
        help="a queue culex has never seen (no task enqueued, no runner): change it all the same",
    )


def _url_file_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--redis-url-file",
        dest="redis_url",
        type=_file_text,
        metavar="PATH",
        help="--redis-url read from this file (a password in a flag is seen in ps; "
        "$CULEX_REDIS_URL is not)",
    )


def _file_text(path: str) -> str:
    """A ...-file flag: the file's text, without the line end after it."""
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read().rstrip("\r\n")
    except (OSError, UnicodeDecodeError) as exc:
        raise argparse.ArgumentTypeError(f"cannot read {path}: {exc}") from None
    if not text:
        raise argparse.ArgumentTypeError(f"{path} is empty")
    return text


def _processes(text: str) -> int:
    """--processes (and the --max-...-per-process limits): a whole number, 1 or more."""
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
    recycled = ("max_tasks_per_process", "max_memory_per_process")
    if getattr(args, "processes", 1) > 1 or any(getattr(args, n, None) for n in recycled):
        return f"supervisor {os.getpid()}"
    return ""
