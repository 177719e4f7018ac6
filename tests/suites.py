"""The whole test run, as the README gives it and ``.ci/run`` runs it: ``python -m tests.suites``.

Three runs of the suite (tests/conftest.py):

1. everything on the wheel's Valkey;
2. the script and procedure tests again through redis-py's client (``CULEX_DRIVER=redis-py
   pytest -m procedures``);
3. everything again on a ``redis-server`` of the system (``CULEX_TEST_SERVER=redis-server``;
   on a machine without one, it skips with one line, as conftest.py says);
4. with ``CULEX_OLDEST_PYTHON`` naming the Python of an environment where culex was
   installed on the oldest versions pyproject.toml allows (``pip install -c .ci/oldest.txt
   -e '.[test]'``, as ``.ci/run`` does), a part of the suite again on those: the script and
   procedure tests through redis-py, and the tests of Cluster, tracing, metrics, middleware
   and the dashboard's app. Without it they are skipped, with one line.

The tests spend most of their time waiting (for a lease to end, a failover, a storm of
kills), not computing: a run of the suite keeps one of two cores about a quarter busy. So
the runs go side by side, and the two long ones in halves: ``tests/chaos`` and
``tests/server`` (runner fleets, clusters and failovers: about half the time, most of the
CPU) and the rest. Two lines of runs go at once, each taking one suite's heavy half and
the other's light half, in opposite orders, so that the heavy halves mostly run one at a
time: Valkey's heavy half then redis-server's light one (shown as it goes), and Valkey's
light half then redis-server's heavy one, beside it with the redis-py run (their output
kept, and shown when they end). The whole takes a little more than the longest line.
Each run starts servers of its own on free ports, in folders of its own.
``--one-at-a-time`` runs the three runs in turn, whole, instead. Arguments after ``--``
go to every pytest, and then each suite runs whole (a path or a ``-k`` given there would
not split as the halves do). The exit status is 0 only when every run passed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Suite:
    name: str
    env: dict[str, str]
    args: tuple[str, ...] = ()
    python: str = sys.executable


VALKEY = Suite("the suite on the wheel's Valkey", {})
REDIS_PY = Suite(
    "the script and procedure tests through redis-py",
    {"CULEX_DRIVER": "redis-py"},
    ("-m", "procedures"),
)
REDIS_SERVER = Suite("the suite on redis-server", {"CULEX_TEST_SERVER": "redis-server"})

# The oldest-versions runs (4. above): the Python they run on, and what they run.
OLDEST_PYTHON = "CULEX_OLDEST_PYTHON"
OLDEST_PATHS = (
    "tests/server/test_cluster.py",
    "tests/workflows/test_cluster_workflows.py",
    "tests/jobs/test_events_cluster.py",
    "tests/test_tracing.py",
    "tests/operations/test_metrics.py",
    "tests/operations/test_metrics_text.py",
    "tests/middleware",
    "tests/dashboard/test_app.py",
)


def oldest() -> tuple[Suite, ...]:
    """The oldest-versions runs, when $CULEX_OLDEST_PYTHON names their Python."""
    python = os.environ.get(OLDEST_PYTHON)
    if not python:
        return ()
    return (
        Suite(
            f"{REDIS_PY.name}, on the oldest versions allowed",
            REDIS_PY.env,
            REDIS_PY.args,
            python,
        ),
        Suite(
            "Cluster, tracing, metrics, middleware, app: oldest versions", {}, OLDEST_PATHS, python
        ),
    )


SUITES = (VALKEY, REDIS_PY, REDIS_SERVER, *oldest())

HEAVY = ("tests/chaos", "tests/server")  # runner fleets, clusters, failovers


def heavy(suite: Suite) -> Suite:
    """The half of ``suite`` that starts fleets of runners, clusters and failovers."""
    return Suite(f"{suite.name}: {', '.join(HEAVY)}", suite.env, (*suite.args, *HEAVY))


def light(suite: Suite) -> Suite:
    """The other half of ``suite``: every test outside HEAVY."""
    ignored = tuple(f"--ignore={folder}" for folder in HEAVY)
    return Suite(f"{suite.name}: the rest", suite.env, (*suite.args, *ignored))


# The lines of runs that go side by side: the first is shown as it goes. Each suite's
# heavy half runs while the other's light half does.
LINES = (
    (heavy(VALKEY), light(REDIS_SERVER)),
    (light(VALKEY), heavy(REDIS_SERVER)),
    (REDIS_PY, *oldest()),
)


def command(suite: Suite, extra: list[str]) -> list[str]:
    return [suite.python, "-m", "pytest", *suite.args, *extra]


_started: list[subprocess.Popen[bytes]] = []  # (ended with this process: see main)
_stopping = threading.Event()  # set as main ends the runs: a line starts no more


def start(suite: Suite, extra: list[str], output: Path | None) -> subprocess.Popen[bytes]:
    """``suite``'s pytest, its output to the terminal, or to ``output``."""
    env = {**os.environ, **suite.env}
    with contextlib.ExitStack() as files:
        sink = None if output is None else files.enter_context(output.open("ab"))
        stderr = None if output is None else subprocess.STDOUT
        # (SIGINT as it should be, even where this process was started ignoring it, as a
        # shell does with a command put in the background: main ends a run with it)
        run = subprocess.Popen(
            command(suite, extra), env=env, stdout=sink, stderr=stderr, preexec_fn=_sigint
        )
    _started.append(run)
    return run


def _sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def in_turns(extra: list[str]) -> dict[str, int]:
    codes = {}
    for suite in SUITES:
        print(f"\n=== {suite.name} ===", flush=True)
        codes[suite.name] = start(suite, extra, None).wait()
    return codes


def side_by_side(lines: tuple[tuple[Suite, ...], ...], folder: Path) -> dict[str, int]:
    """Each line's runs one after the other, the lines at once: the first line's output
    as it goes, the others' once the first has ended."""
    first, *others = lines
    print(f"=== {first[0].name} (the other runs go on beside it; their output follows) ===")
    sys.stdout.flush()
    codes: dict[str, int] = {}
    outputs = [folder / f"line-{n}.log" for n in range(len(others))]
    beside = [
        threading.Thread(target=_run_line, args=(line, output, codes), daemon=True)
        for line, output in zip(others, outputs, strict=True)
    ]
    for thread in beside:
        thread.start()
    _run_line(first, None, codes)
    for thread in beside:
        thread.join()
    for output in outputs:
        sys.stdout.write(output.read_text(errors="replace"))
    return {suite.name: codes[suite.name] for line in lines for suite in line}


def _run_line(line: tuple[Suite, ...], output: Path | None, codes: dict[str, int]) -> None:
    """Run ``line``'s suites in turn, their output to the terminal or appended to
    ``output``; each one's exit status into ``codes``."""
    for n, suite in enumerate(line):
        if _stopping.is_set():
            return
        if output is None:
            if n:
                print(f"\n=== {suite.name} ===", flush=True)
            codes[suite.name] = start(suite, [], None).wait()
            continue
        with output.open("ab") as sink:
            sink.write(f"\n=== {suite.name} ===\n".encode())
        codes[suite.name] = start(suite, [], output).wait()


def _whole(extra: list[str]) -> tuple[tuple[Suite, ...], ...]:
    """The lines of the three suites, whole, each with ``extra`` after its own arguments:
    Valkey's alone, redis-py's then redis-server's beside it."""

    def given(suite: Suite) -> Suite:
        return Suite(suite.name, suite.env, (*suite.args, *extra))

    return ((given(VALKEY),), (given(REDIS_PY), given(REDIS_SERVER)))


def main() -> int:
    parser = argparse.ArgumentParser(description="the whole test run: three runs of the suite")
    parser.add_argument("--one-at-a-time", action="store_true", help="the runs in turn")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to every pytest")
    args = parser.parse_args()
    began = time.monotonic()
    if not oldest():
        print(
            f"skipped: the runs on the oldest versions allowed ({OLDEST_PYTHON} is not set; "
            ".ci/run sets it)",
            flush=True,
        )
    # A SIGTERM (a CI job's timeout, say) ends the runs too, as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        if args.one_at_a_time:
            codes = in_turns(args.pytest_args)
        elif args.pytest_args:  # (arguments of the user's: each suite whole)
            with tempfile.TemporaryDirectory(prefix="culex-suites-") as folder:
                codes = side_by_side(_whole(args.pytest_args), Path(folder))
        else:
            with tempfile.TemporaryDirectory(prefix="culex-suites-") as folder:
                codes = side_by_side(LINES, Path(folder))
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    finally:
        _stopping.set()
        for run in _started:  # Ctrl-C's signal: pytest tears down, stopping its servers
            if run.poll() is None:
                run.send_signal(signal.SIGINT)
        for run in _started:
            try:
                run.wait(timeout=60)
            except subprocess.TimeoutExpired:
                run.kill()
                run.wait()
    print(f"\n=== {time.monotonic() - began:.0f} s in all ===")
    for name, code in codes.items():
        print(f"{'passed' if code == 0 else f'FAILED (exit status {code})':<28} {name}")
    return 0 if all(code == 0 for code in codes.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
