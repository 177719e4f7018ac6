"""What task events cost: bytes per event at rest, and the no-op drain with events on and
off, measured in turns.

    python bench/events.py [--tasks 5000] [--rounds 7] [--valgrind]
        [--server auto|redis|valkey|PATH]

Bytes: N tasks enqueued and drained with events on write 3 N events (enqueued, started,
succeeded); MEMORY USAGE of the queue's stream (SAMPLES 0: every node) over its length.

Cost: each round drains N no-op tasks (async def perform, one runner, concurrency 10) in a
child process, once with events off and once on, in turns (the order swapped every round,
so that a drift of the shared machine falls on both alike); each drain's tasks were
enqueued by another child with the same setting. Per mode, the medians of the drain's
wall time, the server's CPU (INFO cpu, around the drain) and the runner's CPU; then the
ratios on / off. With ``--valgrind``, also the runner process's instructions per task
(bench/instructions.py's way: drains of N and 5 N, the difference over the tasks), which
is load-independent but leaves out the server, where the events are written. Prints the
figures; asserts nothing.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

import redis
from instructions import instructions
from server import arguments, private_server, server_cpu

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"

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
    print(time.perf_counter() - wall, time.process_time() - cpu)
    runner.stop()
    await running

if what == "enqueue":
    culex.enqueue_many([Noop() for _ in range(tasks)])
else:
    asyncio.run(drain())
"""

STREAM = "culex:{bench}:events"


def child(url: str, tasks: int, what: str, events: bool) -> str:
    env = {**os.environ, "PYTHONPATH": str(SRC), "CULEX_EVENTS": "1" if events else "0"}
    run = [sys.executable, "-c", CHILD, url, str(tasks), what]
    return subprocess.run(run, env=env, check=True, capture_output=True, text=True).stdout


def drain(client: redis.Redis, url: str, tasks: int, events: bool) -> tuple[float, float, float]:
    """(wall s, server CPU s, runner CPU s) of one drain of ``tasks`` freshly enqueued."""
    client.flushall()
    child(url, tasks, "enqueue", events)
    before = server_cpu(client)
    wall, runner = (float(x) for x in child(url, tasks, "drain", events).split())
    return wall, server_cpu(client) - before, runner


def bytes_per_event(client: redis.Redis, url: str, tasks: int) -> None:
    client.flushall()
    child(url, tasks, "enqueue", True)
    child(url, tasks, "drain", True)
    length = client.xlen(STREAM)
    used = client.memory_usage(STREAM, samples=0) or 0
    print(f"stream: {length:,} events in {used:,} bytes: {used / length:.1f} bytes an event")


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--tasks", type=int, default=5000, help="tasks per drain")
    parser.add_argument("--rounds", type=int, default=7, help="drains per mode, in turns")
    parser.add_argument("--valgrind", action="store_true", help="also count instructions")
    args = parser.parse_args()
    with private_server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        print(f"server: {server.version()}; {args.tasks:,} no-op tasks a drain")
        bytes_per_event(client, server.url, min(args.tasks, 3000))  # (10,000 kept at most)
        runs: dict[bool, list[tuple[float, float, float]]] = {False: [], True: []}
        for i in range(args.rounds):
            for events in (False, True) if i % 2 == 0 else (True, False):
                runs[events].append(drain(client, server.url, args.tasks, events))
        medians = {
            mode: [statistics.median(run[k] for run in found) for k in range(3)]
            for mode, found in runs.items()
        }
        for mode, (wall, cpu, runner) in medians.items():
            print(
                f"events {'on ' if mode else 'off'}: {args.tasks / wall:>8,.0f} tasks/s, server "
                f"{cpu / args.tasks * 1e6:.1f} us a task, runner {runner / args.tasks * 1e6:.1f}"
                f" us a task (medians of {args.rounds})"
            )
        on, off = medians[True], medians[False]
        print(
            f"on / off: drain time {on[0] / off[0]:.3f}, server CPU {on[1] / off[1]:.3f}, "
            f"runner CPU {on[2] / off[2]:.3f}"
        )
        if args.valgrind:
            for events in (False, True):
                os.environ["CULEX_EVENTS"] = "1" if events else "0"
                counts = []
                for tasks in (args.tasks // 5, args.tasks):
                    client.flushall()
                    counts.append(instructions(SRC, server.url, tasks, None))
                per_task = (counts[1] - counts[0]) / (args.tasks - args.tasks // 5)
                print(
                    f"events {'on ' if events else 'off'}: runner {per_task / 1000:.1f}k "
                    "instructions a task"
                )


if __name__ == "__main__":
    main()
