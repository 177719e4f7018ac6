"""The ``culex`` command: run a runner, manage the embedded server, look at queues and
periodic jobs, demo."""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import sys
from collections.abc import Sequence
from pathlib import Path

from . import config, logs
from .errors import CulexError


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``culex`` and ``python -m culex``; returns the exit code."""
    parser = _parser()
    args = parser.parse_args(argv)
    logs.configure(args.log_level, sys.stderr)
    try:
        return int(args.command(args))
    except CulexError as exc:
        print(f"culex: {exc}", file=sys.stderr)
        return 2


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="culex", description=__doc__)
    parser.add_argument(
        "--log-level", default="INFO", choices=["DEBUG", "INFO", "WARNING", "ERROR"]
    )
    commands = parser.add_subparsers(required=True, metavar="COMMAND")

    run = commands.add_parser("run", help="run the jobs that MODULE registers")
    run.add_argument("module", help="a module name (app.jobs) or a file (app/jobs.py)")
    run.add_argument("--queues", help="comma-separated queues to run (default: every job's)")
    run.add_argument("--concurrency", type=int, help="tasks run at once (default 10)")
    run.add_argument("--redis-url", help="redis://... (default: the embedded server)")
    run.set_defaults(command=_run)

    server = commands.add_parser("server", help="the embedded Valkey server")
    server.add_argument("action", choices=["start", "stop", "status"])
    server.add_argument("--data-dir", help="default: $CULEX_DATA_DIR or ./.culex")
    server.set_defaults(command=_server)

    queues = commands.add_parser("queues", help="every known queue and its task counts")
    queues.add_argument("--redis-url", help="redis://... (default: the embedded server)")
    queues.set_defaults(command=_queues)

    periodic = commands.add_parser(
        "periodic",
        help="the periodic jobs MODULE registers: next run, last run, last outcome",
        usage="culex periodic [trigger NAME] MODULE",
    )
    periodic.add_argument("words", nargs="+", metavar="[trigger NAME] MODULE")
    periodic.add_argument("--redis-url", help="redis://... (default: the embedded server)")
    periodic.set_defaults(command=_periodic)

    demo = commands.add_parser("demo", help="enqueue example jobs and run them, then exit")
    demo.set_defaults(command=_demo)
    return parser


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

    load_module(args.module)
    runner = Runner(
        run_from=args.queues.split(",") if args.queues else None,
        concurrency=args.concurrency,
        redis_url=args.redis_url,
    )
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
    from .inspection import queue_counts

    settings = config.settings(**({"redis_url": args.redis_url} if args.redis_url else {}))
    counts = queue_counts(settings)
    states = ("waiting", "pending", "scheduled", "dead")
    print(f"{'queue':<30}" + "".join(f"{s:>10}" for s in states))
    for queue, row in counts.items():
        print(f"{queue:<30}" + "".join(f"{row[s]:>10}" for s in states))
    return 0


def _periodic(args: argparse.Namespace) -> int:
    from .inspection import periodic_status
    from .job import registry
    from .periodic import PeriodicJob, trigger

    *action, module = args.words
    if action and (len(action) != 2 or action[0] != "trigger"):
        raise CulexError("usage: culex periodic MODULE, or culex periodic trigger NAME MODULE")
    load_module(module)
    settings = config.settings(**({"redis_url": args.redis_url} if args.redis_url else {}))
    jobs = [job for job in registry if issubclass(job, PeriodicJob)]
    if action:
        job = next((job for job in jobs if job.__name__ == action[1]), None)
        if job is None:
            known = ", ".join(job.__name__ for job in jobs) or "none"
            raise CulexError(f"no periodic job named {action[1]!r} in {module} (known: {known})")
        task = trigger(job, settings)
        print(f"enqueued {job.__name__} as task {task.queue}<{task.id}>")
        return 0
    rows = periodic_status(jobs, settings)
    columns = ("job", "queue", "schedule", "next run", "last run", "last outcome")
    widths = [max([len(c), *(len(row[c]) for row in rows)]) for c in columns]
    for line in [dict(zip(columns, columns, strict=True)), *rows]:
        print("  ".join(line[c].ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())
    return 0


def _demo(args: argparse.Namespace) -> int:
    from .demo import main as demo

    return demo()
