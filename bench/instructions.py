"""The runner's own cost per task in instructions: repeatable where seconds are not.

    python bench/instructions.py --before /tmp/culex-before/src [--after SRC]
        [--tasks 1000,5000] [--no-otel] [--server auto|redis|valkey|PATH]

The machine is shared and noisy: a drain's rate moves by 5% from one run to the next, more
than most changes on the hot path. valgrind's cachegrind counts the instructions a process
runs instead, the same from run to run whatever else the machine does. For each checkout
(``src`` folders, as counters.py takes them), a child with that checkout first on its
path drains N no-op tasks (async def perform, one runner, concurrency 10) under
``valgrind --tool=cachegrind --cache-sim=no``, after another child enqueued them; done for
two N, the difference over the tasks between them is what one task costs the runner's
process (its loop, claims, reports, lease keeper), without the start-up and imports.
``--no-otel`` hides opentelemetry from the children (a runner without the otel extra).
Needs valgrind (apt-get install valgrind). Prints the figures; asserts nothing.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import redis
from server import arguments, private_server

HERE = Path(__file__).resolve().parent
AFTER = HERE.parent / "src"

CHILD = """
import asyncio, sys, time
import culex

url, tasks, what = sys.argv[1], int(sys.argv[2]), sys.argv[3]
culex.configure(redis_url=url)
done = 0
all_done = asyncio.Event()

class Noop(culex.QueuedJob):
    queue = "bench"

    async def perform(self) -> None:
        global done
        done += 1
        if done == tasks:
            all_done.set()

async def drain():
    runner = culex.Runner(run_from=["bench"], concurrency=10)
    wall, cpu = time.perf_counter(), time.process_time()
    running = asyncio.create_task(runner.arun())
    await all_done.wait()
    print(time.perf_counter() - wall, time.process_time() - cpu)  # (bench/events.py reads it)
    runner.stop()
    await running

if what == "enqueue":
    culex.enqueue_many([Noop() for _ in range(tasks)])
else:
    asyncio.run(drain())
"""


def instructions(src: Path, url: str, tasks: int, hide: Path | None) -> int:
    """The instructions of one child that drains ``tasks`` tasks it did not enqueue."""
    path = [str(src)] + ([str(hide)] if hide else [])
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(path)}
    child = [sys.executable, "-c", CHILD, url, str(tasks)]
    subprocess.run([*child, "enqueue"], env=env, check=True)
    valgrind = ["valgrind", "--tool=cachegrind", "--cache-sim=no"]
    valgrind.append("--cachegrind-out-file=/dev/null")
    counted = subprocess.run(
        [*valgrind, *child, "drain"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stderr
    found = re.search(r"I\s+refs:\s+([\d,]+)", counted)
    if found is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{counted}")
    return int(found.group(1).replace(",", ""))


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--before", type=Path, required=True, help="src of the checkout before")
    parser.add_argument("--after", type=Path, default=AFTER, help="default: this checkout's src")
    parser.add_argument("--tasks", default="1000,5000", help="the two drains' sizes")
    parser.add_argument("--no-otel", action="store_true", help="hide opentelemetry")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    small, large = (int(n) for n in args.tasks.split(","))
    with tempfile.TemporaryDirectory() as hidden, private_server(args.server) as server:
        hide = None
        if args.no_otel:  # a package that fails to import: culex's tracing is off
            hide = Path(hidden)
            (hide / "opentelemetry").mkdir()
            (hide / "opentelemetry" / "__init__.py").write_text("raise ImportError('hidden')\n")
        client = redis.Redis.from_url(server.url)
        per_task = {}
        for name, src in (("before", args.before), ("after", args.after)):
            counts = []
            for tasks in (small, large):
                client.flushall()
                counts.append(instructions(src, server.url, tasks, hide))
            per_task[name] = (counts[1] - counts[0]) / (large - small)
            print(
                f"{name:<6} {per_task[name] / 1000:>7.1f}k instructions a task "
                f"(drains of {small:,} and {large:,}: {counts[0]:,} and {counts[1]:,})",
                flush=True,
            )
    print(f"after / before: {per_task['after'] / per_task['before']:.3f}")


if __name__ == "__main__":
    main()
