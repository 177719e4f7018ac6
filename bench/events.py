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
wall time, the server's CPU (INFO cpu, around the drain), its time in the scripts (INFO
commandstats of EVALSHA: where the events are written, less moved by the load of the
machine than the rest) and the runner's CPU; then the medians of each round's ratio on / off. With
``--valgrind``, also the runner process's instructions per task (bench/instructions.py's
way: drains of N / 5 and N, the difference over the tasks), which is load-independent but
leaves out the server, where the events are written. Prints the figures; asserts nothing.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
from pathlib import Path

import redis
from instructions import CHILD, instructions
from server import arguments, private_server, server_cpu

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"

STREAM = "culex:{bench}:events"
SCRIPTS = ("evalsha", "eval")


def child(url: str, tasks: int, what: str, events: bool) -> str:
    env = {**os.environ, "PYTHONPATH": str(SRC), "CULEX_EVENTS": "1" if events else "0"}
    run = [sys.executable, "-c", CHILD, url, str(tasks), what]
    return subprocess.run(run, env=env, check=True, capture_output=True, text=True).stdout


def drain(client: redis.Redis, url: str, tasks: int, events: bool) -> tuple[float, ...]:
    """(wall s, server CPU s, runner CPU s, server s inside the scripts) of one drain of
    ``tasks`` freshly enqueued."""
    client.flushall()
    child(url, tasks, "enqueue", events)
    client.config_resetstat()
    before = server_cpu(client)
    wall, runner = (float(x) for x in child(url, tasks, "drain", events).split())
    cpu = server_cpu(client) - before
    stats = client.info("commandstats")  # (a script's own commands count inside it too)
    inside = sum(stats.get(f"cmdstat_{name}", {}).get("usec", 0) for name in SCRIPTS) / 1e6
    return wall, cpu, runner, inside


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
        runs: dict[bool, list[tuple[float, ...]]] = {False: [], True: []}
        for i in range(args.rounds):
            for events in (False, True) if i % 2 == 0 else (True, False):
                runs[events].append(drain(client, server.url, args.tasks, events))
        medians = {
            mode: [statistics.median(run[k] for run in found) for k in range(4)]
            for mode, found in runs.items()
        }
        for mode, (wall, cpu, runner, inside) in medians.items():
            print(
                f"events {'on ' if mode else 'off'}: {args.tasks / wall:>8,.0f} tasks/s, server "
                f"{cpu / args.tasks * 1e6:.1f} us a task ({inside / args.tasks * 1e6:.1f} in the "
                f"scripts), runner {runner / args.tasks * 1e6:.1f} us a task (medians of "
                f"{args.rounds})"
            )
        ratios = [
            statistics.median(a[k] / b[k] for a, b in zip(runs[True], runs[False], strict=True))
            for k in range(4)
        ]
        print(
            f"on / off, medians of the rounds' ratios: drain time {ratios[0]:.3f}, server CPU "
            f"{ratios[1]:.3f}, in the scripts {ratios[3]:.3f}, runner CPU {ratios[2]:.3f}"
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
