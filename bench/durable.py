"""What durable tasks cost: round trips per step, the server's time per step record, and
the drain of tasks that use no steps, this checkout against one before durable tasks.

    mkdir -p /tmp/base-ac6d054 && git archive ac6d054 src | tar -x -C /tmp/base-ac6d054
    python bench/durable.py --before /tmp/base-ac6d054/src [--tasks 10000] [--runs 8]
        [--steps 10] [--server auto|redis|valkey|PATH]
    python bench/durable.py --no-drain       # only the round trips and the server's time

- Round trips: one runner (concurrency 1) runs a task of ``--steps`` steps twice: its first
  attempt records every step, then raises; its retry replays them all. The round trips
  each step call waits on are counted by wrapping the procedures culex.jobs.steps drives
  (every request of a procedure is one round trip; the driver may carry other callers'
  calls with it, never split one), and, for the ``def perform``, the exchanges on the
  wire of the perform's own thread. The goals: 1 per new step; 0 per replayed step (the
  records come in one read per attempt, which the attempt's first place pays).
- The server's time per step record: step.lua called directly on claimed tasks (5 steps
  each for 2,000 tasks; 1,000 steps on one task, the limit), INFO commandstats reset
  before: the µs per call of EVALSHA, which only step.lua sends meanwhile; and the
  replay's read (HGETALL) of such tasks.
- The drain of no-op tasks that use no steps (``async def perform``; bench/counters.py's
  child), this checkout and ``--before`` in turns on one private server, the order
  flipping every run: the medians and the median of the per-run ratios (after / before),
  which must not fall below 1 by more than the machine's noise (about ±5 %: README.md).
  On a loaded machine, count instead: ``python bench/instructions.py --before ...``.

Each measurement runs in a child process with that checkout's ``src`` first on its path.
Prints the figures; asserts nothing.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import threading
from collections.abc import Generator
from pathlib import Path
from typing import Any

import redis
from server import arguments, private_server

HERE = Path(__file__).resolve().parent
AFTER = HERE.parent / "src"


def child(src: Path, *words: str) -> dict[str, Any]:
    """Run ``durable.py --child words...`` with the culex of ``src``; its last line's JSON."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, __file__, "--child", *words],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


# -- round trips (in the child) ------------------------------------------------------------


def round_trips(url: str, steps: int) -> dict[str, Any]:
    """Per attempt, the round trips of each step call, for a def and an async def perform."""
    import asyncio
    from datetime import timedelta

    import culex
    from culex._redis import connections
    from culex.jobs import steps as job_steps

    culex.configure(redis_url=url)
    trips = [0]  # requests of the procedures the durable calls drove
    wire: dict[int, int] = {}  # exchanges on the wire of each thread (sync)

    def counting(procedure: Generator[Any, Any, Any]) -> Generator[Any, Any, Any]:
        try:
            request = next(procedure)
        except StopIteration as done:
            return done.value
        while True:
            trips[0] += 1
            reply = yield request
            try:
                request = procedure.send(reply)
            except StopIteration as done:
                return done.value

    run_sync, run_async = job_steps.run_sync, job_steps.run_async
    job_steps.run_sync = lambda p, url=None: run_sync(counting(p), url)  # type: ignore[assignment]
    job_steps.run_async = lambda p, url=None: run_async(counting(p), url)  # type: ignore[assignment]
    exchange = connections.SyncConnection.exchange

    def counted(self: Any, packed: bytes, count: int, blocks: float = 0.0) -> list[Any]:
        me = threading.get_ident()
        wire[me] = wire.get(me, 0) + 1
        return exchange(self, packed, count, blocks)

    connections.SyncConnection.exchange = counted  # type: ignore[method-assign]
    seen: dict[str, list[list[int]]] = {"def": [], "async def": [], "def, wire": []}
    done = asyncio.Event()

    def value(k: int) -> str:
        return f"result {k}"

    async def avalue(k: int) -> str:
        return f"result {k}"

    class SyncSteps(culex.QueuedJob):
        queue = "bench_durable"
        n: int

        def reschedule_interval(self, retry_count: int) -> timedelta:
            return timedelta(0)

        def perform(self) -> None:
            mine, me = [], threading.get_ident()
            on_wire = []
            for k in range(self.n):
                t, w = trips[0], wire.get(me, 0)
                self.step(f"s{k}", value, k)
                mine.append(trips[0] - t)
                on_wire.append(wire.get(me, 0) - w)
            seen["def"].append(mine)
            seen["def, wire"].append(on_wire)
            if self.attempt == 1:
                raise RuntimeError("the first attempt fails after its steps")

    class AsyncSteps(SyncSteps):
        async def perform(self) -> None:  # type: ignore[override]
            mine = []
            for k in range(self.n):
                t = trips[0]
                await self.astep(f"s{k}", avalue, k)
                mine.append(trips[0] - t)
            seen["async def"].append(mine)
            if self.attempt == 1:
                raise RuntimeError("the first attempt fails after its steps")
            done.set()

    async def run() -> None:
        runner = culex.Runner(run_from=["bench_durable"], concurrency=1)
        running = asyncio.create_task(runner.arun())
        task = await SyncSteps(n=steps).aenqueue()
        await task.aresult(timeout=60)
        await AsyncSteps(n=steps).aenqueue()
        await asyncio.wait_for(done.wait(), 60)
        runner.stop()
        await running

    asyncio.run(run())
    return seen


# -- the server's time (in the child) ------------------------------------------------------


def server_time(url: str) -> dict[str, Any]:
    """µs per step.lua call (EVALSHA) and per replay read (HGETALL), by the shape of task."""
    import culex
    from culex._redis import claims, commands, steps
    from culex._redis.keys import queue_keys
    from culex.server.procedures import one_call, run_sync

    culex.configure(redis_url=url)
    client = redis.Redis.from_url(url)
    keys = queue_keys("culex", "bench_step")

    class StepTarget(culex.QueuedJob):
        queue = "bench_step"

    figures: dict[str, Any] = {}
    result = json.dumps("x" * 40)  # a small result: 42 bytes of JSON
    for tasks, each in ((2000, 5), (1, 1000)):
        client.flushall()
        ids = [t.id for t in culex.enqueue_many([StepTarget() for _ in range(tasks)])]
        claim = claims.claim(keys, limit=tasks, lease_ms=600_000, promote_limit=tasks,
                             dead_ttl_ms=60_000)  # fmt: skip
        run_sync(one_call(claim), url)
        client.config_resetstat()
        for task_id in ids:
            for k in range(each):
                call = steps.step(keys, task_id, 1, k, f"s{k}", result, max_steps=1000,
                                  max_step_bytes=1 << 20, max_task_bytes=16 << 20)  # fmt: skip
                reply = run_sync(one_call(call), url)
                assert reply == ("recorded",), reply
        stats = client.info("commandstats")["cmdstat_evalsha"]
        client.config_resetstat()
        for task_id in ids:
            run_sync(one_call(commands.read_task(keys, task_id)), url)
        read = client.info("commandstats")["cmdstat_hgetall"]
        figures[f"{tasks} tasks x {each} steps"] = {
            "step_calls": stats["calls"],
            "step_usec_per_call": stats["usec_per_call"],
            "read_calls": read["calls"],
            "read_usec_per_call": read["usec_per_call"],
        }
    # The floor: an EVALSHA of a script that only replies, the same way.
    floor = client.register_script("return {'recorded'}")
    floor()
    client.config_resetstat()
    for _ in range(2000):
        floor()
    figures["floor"] = client.info("commandstats")["cmdstat_evalsha"]["usec_per_call"]
    return figures


# -- the parent ----------------------------------------------------------------------------


def drains(before: Path, url: str, tasks: int, runs: int, concurrency: int) -> None:
    import counters  # (bench/counters.py: the child that drains no-op tasks)

    client = redis.Redis.from_url(url)
    rates: dict[str, list[float]] = {"before": [], "after": []}
    own: dict[str, list[float]] = {"before": [], "after": []}
    for run in range(runs):
        for name in ("before", "after") if run % 2 == 0 else ("after", "before"):
            client.flushall()
            result = counters.drain(before if name == "before" else AFTER, url, tasks,
                                    concurrency, False)  # fmt: skip
            rates[name].append(result["rate"])
            own[name].append(result["runner_cpu"] / tasks * 1e6)
            print(f"run {run + 1} {name:<6} {result['rate']:>9,.0f} tasks/s  runner CPU "
                  f"{own[name][-1]:.1f} us/task", flush=True)  # fmt: skip
    ratios = [a / b for a, b in zip(rates["after"], rates["before"], strict=True)]
    print(f"\ndrain of {tasks:,} no-op tasks that use no steps, async def perform, "
          f"concurrency {concurrency}, {runs} runs in turns")  # fmt: skip
    for name in ("before", "after"):
        print(f"  {name:<7} median {statistics.median(rates[name]):>9,.0f} tasks/s  "
              f"runner CPU {statistics.median(own[name]):.1f} us/task")  # fmt: skip
    print(f"  after / before: median ratio {statistics.median(ratios):.3f} "
          f"(runs {', '.join(f'{r:.3f}' for r in ratios)})")  # fmt: skip


def main() -> None:
    if sys.argv[1:2] == ["--child"]:
        what, url, *rest = sys.argv[2:]
        found = round_trips(url, int(rest[0])) if what == "trips" else server_time(url)
        print(json.dumps(found))
        return
    parser = arguments(__doc__)
    parser.add_argument("--before", type=Path, help="src of the checkout before durable tasks")
    parser.add_argument("--no-drain", action="store_true", help="skip the drain comparison")
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--steps", type=int, default=10, help="steps of the round trips' task")
    args = parser.parse_args()
    if not args.no_drain and args.before is None:
        parser.error("--before is required (or --no-drain)")
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    with private_server(args.server) as server:
        print(f"server: {server.version()}")
        trips = child(AFTER, "trips", server.url, str(args.steps))
        print(f"\nround trips of each step call, a task of {args.steps} steps "
              "(attempt 1 records them, attempt 2 replays them):")  # fmt: skip
        for kind, attempts in trips.items():
            for n, counts in enumerate(attempts, 1):
                rest = counts[1:]
                print(f"  {kind:<11} attempt {n}: {counts}  -> first place {counts[0]}, "
                      f"each later one {sum(rest) / len(rest):.2f}")  # fmt: skip
        times = child(AFTER, "time", server.url)
        print("\nthe server's time (INFO commandstats):")
        print(f"  {'floor':<20} {times.pop('floor'):.2f} us an EVALSHA of a script that only "
              "replies")  # fmt: skip
        for shape, f in times.items():
            print(f"  {shape:<20} step.lua {f['step_usec_per_call']:.2f} us a record "
                  f"({f['step_calls']:,} calls);  the replay's read (HGETALL) "
                  f"{f['read_usec_per_call']:.2f} us ({f['read_calls']:,} calls)")  # fmt: skip
        if not args.no_drain:
            print()
            drains(args.before, server.url, args.tasks, args.runs, args.concurrency)


if __name__ == "__main__":
    main()
