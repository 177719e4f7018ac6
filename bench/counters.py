"""What the counters cost a runner: drain N no-op tasks with one runner, before and after.

    python bench/counters.py --before /tmp/culex-before/src [--tasks 20000] [--runs 5]
        [--sync] [--concurrency 10] [--server auto|redis|valkey|PATH]
    python bench/counters.py --memory     # the bytes the counters take

``--before`` is the ``src`` folder of a checkout without the counters (or, with ``--any``,
of any checkout: the before of a later change on the hot path, such as flow control), e.g.::

    mkdir -p /tmp/culex-before && git archive main src | tar -x -C /tmp/culex-before

Each run drains the same N tasks once with each checkout, in turns (the order flips every
run), on one private server flushed in between: a child process with that checkout first
on its path enqueues N tasks (``enqueue_many``), starts one runner in-process and times it
from its start to the last task's end, and reads the server's CPU used meanwhile. The
machine is noisy, so the figures are the medians of the runs and the median of the
per-run ratios (after / before). Prints the figures; asserts nothing.
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
from pathlib import Path

import redis
from server import arguments, private_server

HERE = Path(__file__).resolve().parent
AFTER = HERE.parent / "src"

# The child: one checkout's culex, N no-op tasks, one runner; prints the drain's rate, and
# the CPU seconds the runner's process and the server used meanwhile.
CHILD = """
import asyncio, json, resource, sys, time
import culex, redis

url, tasks, concurrency, sync = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
culex.configure(redis_url=url)
done = 0
all_done = asyncio.Event()

def count():
    global done
    done += 1
    if done == tasks:
        all_done.set()

class Noop(culex.QueuedJob):
    queue = "bench"

    async def perform(self) -> None:
        count()

class SyncNoop(culex.QueuedJob):
    queue = "bench"

    def perform(self) -> None:
        loop.call_soon_threadsafe(count)

job = SyncNoop if sync == "1" else Noop
culex.enqueue_many([job() for _ in range(tasks)])
client = redis.Redis.from_url(url)

def cpu():
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])

def own_cpu():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime

async def drain():
    global loop
    loop = asyncio.get_running_loop()
    runner = culex.Runner(run_from=["bench"], concurrency=concurrency)
    cpu0, own0, start = cpu(), own_cpu(), time.perf_counter()
    running = asyncio.create_task(runner.arun())
    await all_done.wait()
    elapsed, own = time.perf_counter() - start, own_cpu() - own0
    server = cpu() - cpu0
    runner.stop()
    await running
    return elapsed, own, server

elapsed, own, server = asyncio.run(drain())
counted = client.hgetall("culex:{bench}:stats:total")
print(json.dumps({
    "rate": tasks / elapsed, "runner_cpu": own, "server_cpu": server, "counted": len(counted) > 0
}))
"""


def drain(src: Path, url: str, tasks: int, concurrency: int, sync: bool) -> dict[str, float]:
    """One drain of ``tasks`` by the culex of ``src``, in its own process."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(tasks), str(concurrency), "1" if sync else "0"],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def memory(client: redis.Redis) -> None:
    """MEMORY USAGE of one bucket hash for 3 job types, with every field written (each
    outcome in each run-time bucket) and as a steady job writes it (its successes in 4
    buckets, failures in 2, deaths in 1, and the sum), and what a queue keeps at most:
    2 days of minutes, 8 days of hours and the totals, each minute and hour in use."""
    print("bytes of one counters hash (MEMORY USAGE), 3 job types:")
    for name, parts in (
        ("every field", [f"{o}{i}" for o in "sfd" for i in range(15)] + ["s", "f", "d", "ms"]),
        ("typical", ["s2", "s3", "s4", "s5", "f3", "f4", "d6", "ms"]),
    ):
        client.flushall()
        fields = {
            f"{job}|{part}": 123456
            for job in ("SendEmailJob", "ResizeImageJob", "SyncUserJob")
            for part in parts
        }
        client.hset("culex:{q}:stats:total", mapping=fields)
        size = client.memory_usage("culex:{q}:stats:total", samples=0) or 0
        most = size * (2 * 24 * 60 + 8 * 24 + 1)
        print(
            f"  {name:<12} {len(fields):>3} fields  {size:>6,} bytes a hash  "
            f"{most / 2**20:>6.1f} MiB a queue at most (every minute of 2 days in use)"
        )


def counter_writes(client: redis.Redis, tasks: int) -> tuple[float, float, float]:
    """Per 1,000 tasks of the drain just made: the HINCRBY the scripts sent, and the
    complete calls (one ZREM each); and the server's µs in HINCRBY per task (INFO
    commandstats, reset before the drain)."""
    stats = client.info("commandstats")
    hincrby = stats.get("cmdstat_hincrby", {"calls": 0, "usec": 0})
    zrem = stats.get("cmdstat_zrem", {"calls": 0})
    per_1000 = 1000 / tasks
    return (
        hincrby["calls"] * per_1000,
        hincrby["usec"] / tasks,
        zrem["calls"] * per_1000,
    )


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--before", type=Path, help="src of the checkout before")
    parser.add_argument("--memory", action="store_true", help="only the bytes of the counters")
    parser.add_argument("--after", type=Path, default=AFTER, help="default: this checkout's src")
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--concurrency", type=int, default=10)
    parser.add_argument("--sync", action="store_true", help="a def perform (in a thread)")
    parser.add_argument(
        "--any",
        action="store_true",
        help="two checkouts that both count (a later change's before and after: flow control)",
    )
    args = parser.parse_args()
    # (a SIGTERM ends the run through the finally blocks, which stop the private server)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))
    rates: dict[str, list[float]] = {"before": [], "after": []}
    cpus: dict[str, list[float]] = {"before": [], "after": []}
    own: dict[str, list[float]] = {"before": [], "after": []}
    writes: list[tuple[float, float, float]] = []
    if not args.memory and args.before is None:
        parser.error("--before is required (or --memory)")
    with private_server(args.server) as server:
        url = server.url
        client = redis.Redis.from_url(url)
        if args.memory:
            memory(client)
            return
        for run in range(args.runs):
            order = ("before", "after") if run % 2 == 0 else ("after", "before")
            for name in order:
                client.flushall()
                client.config_resetstat()
                src = args.before if name == "before" else args.after
                result = drain(src, url, args.tasks, args.concurrency, args.sync)
                if name == "after":
                    writes.append(counter_writes(client, args.tasks))
                if not args.any and result["counted"] != (name == "after"):
                    raise SystemExit(f"{name}: {src} does not look like that checkout")
                rates[name].append(result["rate"])
                cpus[name].append(result["server_cpu"] / args.tasks * 1e6)
                own[name].append(result["runner_cpu"] / args.tasks * 1e6)
                print(
                    f"run {run + 1} {name:<6} {result['rate']:>9,.0f} tasks/s  runner CPU "
                    f"{own[name][-1]:.1f} us/task  server CPU {cpus[name][-1]:.1f} us/task",
                    flush=True,
                )
    ratios = [a / b for a, b in zip(rates["after"], rates["before"], strict=True)]
    cpu_ratios = [a / b for a, b in zip(own["after"], own["before"], strict=True)]
    kind = "def perform (thread)" if args.sync else "async def perform"
    print(f"\n{args.tasks} no-op tasks, {kind}, one runner, concurrency {args.concurrency}")
    for name in ("before", "after"):
        print(
            f"{name:<7} median {statistics.median(rates[name]):>9,.0f} tasks/s   "
            f"runner CPU {statistics.median(own[name]):.1f} us/task   "
            f"server CPU {statistics.median(cpus[name]):.1f} us/task   "
            f"runs {', '.join(f'{r:,.0f}' for r in rates[name])}"
        )
    calls = statistics.median(w[0] for w in writes)
    server_us = statistics.median(w[1] for w in writes)
    reports = statistics.median(w[2] for w in writes)
    print(
        f"after: {reports:.0f} complete calls and {calls:.0f} HINCRBY per 1,000 tasks, "
        f"{server_us:.2f} us of the server's time a task in HINCRBY"
    )
    print(
        f"after / before, rate: median ratio {statistics.median(ratios):.3f} "
        f"(runs {', '.join(f'{r:.3f}' for r in ratios)})"
    )
    print(
        f"after / before, runner CPU per task: median ratio {statistics.median(cpu_ratios):.3f} "
        f"(runs {', '.join(f'{r:.3f}' for r in cpu_ratios)})"
    )


if __name__ == "__main__":
    main()
