"""culex commands that run something: a runner, the embedded server, the dashboard, the
metrics endpoint, the demo."""

from __future__ import annotations

import argparse
import gc
import importlib
import importlib.util
import os
import signal
import sys
import traceback
from pathlib import Path
from typing import TYPE_CHECKING

from .. import config, logs
from .._redis.address import Address
from ..errors import ConfigurationError, CulexError

if TYPE_CHECKING:
    pass

# The dashboard's basic auth, USER:PASSWORD, when no flag gives it.
BASIC_AUTH_ENV = "CULEX_BASIC_AUTH"


def load_module(name: str) -> None:
    """Import the user's module (by dotted name, or by file path) so its jobs register.

    What the import raises is a CulexError that shows the user's own error as Python
    shows it (file, line, a SyntaxError's caret, the message) without the frames of culex
    and importlib that led to it."""
    path = Path(name)
    try:
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
        importlib.import_module(name)
    except ModuleNotFoundError as exc:
        if exc.name and name.startswith(exc.name):
            raise CulexError(
                f"no module named {name!r} (run culex from your project's folder)"
            ) from None
        raise CulexError(_import_error(name, exc, _missing_advice(exc))) from None
    except CulexError:
        raise
    except Exception as exc:
        raise CulexError(_import_error(name, exc, "")) from None


# Where the frames culex leaves out of an import error come from: culex itself, importlib.
_OWN_FILES = tuple(
    str(folder) + os.sep
    for package in (Path(__file__).parent.parent, Path(importlib.__file__).parent)
    for folder in {package, package.resolve()}
)


def _import_error(name: str, exc: BaseException, advice: str) -> str:
    """``cannot import NAME:``, the traceback of ``exc`` from the user's frames only (a
    SyntaxError's file, line and caret as Python shows them), and ``advice`` if any."""
    shown = traceback.TracebackException.from_exception(exc)
    frames = [
        frame for frame in shown.stack if not frame.filename.startswith(("<frozen ", *_OWN_FILES))
    ]
    shown.stack = traceback.StackSummary.from_list(frames)
    lines = "".join(shown.format(chain=False)).rstrip("\n")
    if not frames:  # (a SyntaxError: its file and line are in its own lines)
        lines = lines.removeprefix("Traceback (most recent call last):\n")
    return f"cannot import {name}:\n{lines}" + (f"\n{advice}" if advice else "")


def _missing_advice(exc: ModuleNotFoundError) -> str:
    return (
        f"(the module {exc.name!r} is not installed for the Python that runs culex, "
        f"{sys.executable})"
    )


def run_command(args: argparse.Namespace) -> int:
    from ..runner import Runner

    given = {name: getattr(args, name) for name in config.kinds()}
    # For the whole process: an enqueue inside a perform sees them too.
    flags = {name: value for name, value in given.items() if value is not None}
    config.set_flags(flags)
    if args.supervisor_pipe is not None:
        from ..runner.supervisor import follow

        follow(args.supervisor_pipe)
    load_module(args.module)
    logs.keep()  # (culex's lines, whatever logging set-up the module made: logs.py)
    runner = Runner()  # (a supervisor too: a check that fails, fails here, once)
    max_tasks, max_memory = args.max_tasks_per_process, args.max_memory_per_process
    recycled = max_tasks is not None or max_memory is not None
    if args.supervisor_pipe is None and (args.processes > 1 or recycled):
        from ..runner.supervisor import supervise

        # (recycling needs a supervisor, even of one runner process)
        return supervise(
            args.module, flags, args.log_level, args.processes,
            max_tasks=max_tasks, max_memory_mb=max_memory,
        )  # fmt: skip
    if args.supervisor_report is not None:
        from ..runner.supervised import Supervised

        runner.supervised = Supervised(args.supervisor_report, max_tasks, max_memory)
    if args.start_quiet:  # (started by a quiet supervisor)
        runner.quiet()
    # What is loaded by now (modules, classes, functions) lives as long as the process:
    # freeze it, so that the full collections of a busy runner skip it and stall far less
    # (docs/fast.md; bench/collector.py measures it).
    gc.collect()
    gc.freeze()
    try:
        runner.run()
    except ConfigurationError as exc:
        if args.supervisor_pipe is None:
            raise
        from ..runner.supervisor import CONFIG_ERROR

        # (its own exit code: the supervisor stops rather than start it again)
        print(f"culex: {exc}", file=sys.stderr)
        return CONFIG_ERROR
    return 0


def server_command(args: argparse.Namespace) -> int:
    from ..server.embedded import EmbeddedServer, default_data_dir

    server = EmbeddedServer(args.data_dir or default_data_dir())
    if args.action == "start":
        print(f"culex server running at {server.ensure_running()}")
    elif args.action == "stop":
        print("culex server stopped" if server.stop() else "culex server was not running")
    else:
        for key, value in server.status().items():
            print(f"{key}: {value}")
    return 0


def dashboard_command(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ..dashboard import app
    except ImportError as exc:
        raise CulexError(
            f"the dashboard needs its extra: pip install 'culex[dashboard]' ({exc})"
        ) from None
    credentials = None
    # --basic-auth or --basic-auth-file, else the environment (not seen in ps).
    given = args.basic_auth if args.basic_auth is not None else os.environ.get(BASIC_AUTH_ENV)
    if given is not None:
        user, colon, password = given.partition(":")
        if not colon or not user or not password:
            raise CulexError(
                "--basic-auth takes USER:PASSWORD, both non-empty (so do --basic-auth-file "
                f"and ${BASIC_AUTH_ENV})"
            )
        credentials = (user, password)
    if not 0 < args.port < 65536:
        raise CulexError(f"--port must be 1 to 65535, not {args.port}")
    settings = config.settings_for(args.redis_url)
    if settings.redis_url:
        Address.parse(settings.redis_url)  # (a URL that is no URL: said now, once)
    dashboard = app(settings, read_only=args.read_only, basic_auth=credentials)
    server = uvicorn.Server(
        uvicorn.Config(dashboard, host=args.host, port=args.port, log_level=args.log_level.lower())
    )

    # uvicorn stops gracefully on SIGTERM or SIGINT, then raises the signal again for the
    # handlers that were there before its own: these, so that the process exits 0 after a
    # graceful stop (not killed by the signal, -15). One that lands before uvicorn has put
    # its own in place asks the server to stop as soon as it has started.
    def stop(signum: int, frame: object) -> None:
        server.should_exit = True

    before = {signum: signal.signal(signum, stop) for signum in (signal.SIGTERM, signal.SIGINT)}
    try:
        server.run()
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    return 0 if server.started else 1


def metrics_command(args: argparse.Namespace) -> int:
    try:
        from ..operations.metrics import serve
    except ImportError as exc:
        print(f"culex metrics needs prometheus-client ({exc}): pip install 'culex[metrics]'")
        return 2
    if not 0 <= args.port < 65536:
        raise CulexError(f"--port must be 0 to 65535, not {args.port}")
    settings = config.settings_for(args.redis_url)
    serve(settings, args.host, args.port)
    return 0


def demo_command(args: argparse.Namespace) -> int:
    from ..demo import main as demo

    return demo()
