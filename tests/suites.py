"""The whole test run, as the README gives it and ``.ci/run`` runs it: ``python -m tests.suites``.

Three runs of the suite (tests/conftest.py):

1. everything on the wheel's Valkey;
2. the script and procedure tests again through redis-py's client (``CULEX_DRIVER=redis-py
   pytest -m procedures``);
3. everything again on a ``redis-server`` of the system (``CULEX_TEST_SERVER=redis-server``;
   on a machine without one, it skips with one line, as conftest.py says).

The tests spend most of their time waiting (for a lease to end, a failover, a storm of
kills), not computing: a run of the suite keeps one of two cores about a quarter busy. So
the first run is shown as it goes while the other two, one after the other, run beside it
with their output kept, and shown when they end: the whole takes a little more than the
longest run instead of the sum of the three. Each run starts servers of its own on free
ports, in folders of its own. ``--one-at-a-time`` runs them in turn instead. Arguments
after ``--`` go to every pytest. The exit status is 0 only when all three passed.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Suite:
    name: str
    env: dict[str, str]
    args: tuple[str, ...] = ()


SUITES = (
    Suite("the suite on the wheel's Valkey", {}),
    Suite(
        "the script and procedure tests through redis-py",
        {"CULEX_DRIVER": "redis-py"},
        ("-m", "procedures"),
    ),
    Suite("the suite on redis-server", {"CULEX_TEST_SERVER": "redis-server"}),
)


def command(suite: Suite, extra: list[str]) -> list[str]:
    return [sys.executable, "-m", "pytest", *suite.args, *extra]


_started: list[subprocess.Popen[bytes]] = []  # (ended with this process: see main)


def start(suite: Suite, extra: list[str], output: Path | None) -> subprocess.Popen[bytes]:
    """``suite``'s pytest, its output to the terminal, or to ``output``."""
    env = {**os.environ, **suite.env}
    with contextlib.ExitStack() as files:
        sink = None if output is None else files.enter_context(output.open("wb"))
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


def side_by_side(extra: list[str], folder: Path) -> dict[str, int]:
    """The first suite in the foreground; the others, in turn, beside it, their output
    shown once the first has ended."""
    first, *others = SUITES
    print(f"=== {first.name} (the other runs go on beside it; their output follows) ===")
    sys.stdout.flush()
    shown = start(first, extra, None)
    codes: dict[str, int] = {}
    outputs = [folder / f"suite-{n}.log" for n in range(len(others))]
    for suite, output in zip(others, outputs, strict=True):
        codes[suite.name] = start(suite, extra, output).wait()
    codes[first.name] = shown.wait()
    for suite, output in zip(others, outputs, strict=True):
        print(f"\n=== {suite.name} ===", flush=True)
        sys.stdout.write(output.read_text(errors="replace"))
    return {suite.name: codes[suite.name] for suite in SUITES}


def main() -> int:
    parser = argparse.ArgumentParser(description="the whole test run: three runs of the suite")
    parser.add_argument("--one-at-a-time", action="store_true", help="the runs in turn")
    parser.add_argument("pytest_args", nargs="*", help="after --: passed to every pytest")
    args = parser.parse_args()
    began = time.monotonic()
    # A SIGTERM (a CI job's timeout, say) ends the runs too, as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(128 + signal.SIGTERM))
    try:
        if args.one_at_a_time:
            codes = in_turns(args.pytest_args)
        else:
            with tempfile.TemporaryDirectory(prefix="culex-suites-") as folder:
                codes = side_by_side(args.pytest_args, Path(folder))
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 128 + signal.SIGINT
    finally:
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
