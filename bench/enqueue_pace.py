"""Enqueue at the producer's pace: the rate of ``enqueue()`` and ``aenqueue()`` as producers
call them, for two checkouts in turns.

    python bench/enqueue_pace.py --before /tmp/culex-before/src [--after SRC]
        [--calls 8000] [--runs 3] [--modes sync,async,coroutines,threads,many]
        [--server auto|redis|valkey|PATH]

Modes, each ``--calls`` enqueues of a job with one int param:

- ``sync``: ``enqueue()`` in a loop, one call at a time;
- ``async``: ``await aenqueue()`` in a loop, one after another;
- ``coroutines``: 100 coroutines, each awaiting ``aenqueue()`` in a loop, at once;
- ``threads``: 8 threads, each calling ``enqueue()`` in a loop, at once;
- ``many``: ``enqueue_many`` of 100 jobs a call (the rate the others are held against).

Each mode runs in a child process with that checkout first on its path, on one private
server flushed in between; the order of the two checkouts flips every run. The machine is
noisy: the figures are medians, and the median of the per-run ratios (after / before).
Also printed, for the after checkout: each mode's rate as a share of ``many``'s. Prints the
figures; asserts nothing.
"""

from __future__ import annotations

import os
import statistics
import sys
from pathlib import Path

import child
import redis
from server import arguments, private_server, server_cpu

AFTER = Path(__file__).resolve().parent.parent / "src"
MODES = ("sync", "async", "coroutines", "threads", "many")

CHILD = """
import asyncio, json, sys, threading, time
import culex

class PaceJob(culex.QueuedJob):
    queue = "pace"
    n: int

    def perform(self) -> None:
        pass

culex.configure(redis_url=sys.argv[1])
calls, mode = int(sys.argv[2]), sys.argv[3]

def sync(count):
    for n in range(count):
        PaceJob(n=n).enqueue()

async def one_after_another(count):
    for n in range(count):
        await PaceJob(n=n).aenqueue()

async def at_once(count, producers=100):
    await asyncio.gather(*(one_after_another(count // producers) for _ in range(producers)))

def threads(count, producers=8):
    started = [threading.Thread(target=sync, args=(count // producers,)) for _ in range(producers)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()

def many(count, size=100):
    for start in range(0, count, size):
        culex.enqueue_many([PaceJob(n=n) for n in range(start, start + size)])

async def timed_async(body, count):
    await body(200)  # (the connections made and the script loaded before the clock)
    start = time.perf_counter()
    await body(count)
    return time.perf_counter() - start

def timed(body, count):
    body(200)
    start = time.perf_counter()
    body(count)
    return time.perf_counter() - start

if mode == "async":
    took = asyncio.run(timed_async(one_after_another, calls))
elif mode == "coroutines":
    took = asyncio.run(timed_async(at_once, calls))
else:
    took = timed({"sync": sync, "threads": threads, "many": many}[mode], calls)
print(json.dumps({"rate": calls / took}))
"""


def turn(src: Path, url: str, calls: int, mode: str) -> float:
    """The rate of ``calls`` enqueues in ``mode`` by the culex of ``src``, in its own process."""
    answer = child.run(
        sys.executable,
        ["-c", CHILD, *[url, str(calls), mode]],
        what=f"the enqueues of {src}",
        env={**os.environ, "PYTHONPATH": str(src)},
    )
    rate: float = answer["rate"]
    return rate


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--before", type=Path, required=True, help="src of the checkout before")
    parser.add_argument("--after", type=Path, default=AFTER, help="default: this checkout's src")
    parser.add_argument("--calls", type=int, default=8000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--modes", default=",".join(MODES))
    args = parser.parse_args()
    modes = args.modes.split(",")
    names = ("before", "after")
    rates: dict[tuple[str, str], list[float]] = {(m, n): [] for m in modes for n in names}
    server_us: dict[tuple[str, str], list[float]] = {(m, n): [] for m in modes for n in names}
    with private_server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        for run in range(args.runs):
            for mode in modes:
                order = ("before", "after") if run % 2 == 0 else ("after", "before")
                for name in order:
                    client.flushall()
                    cpu0 = server_cpu(client)
                    src = args.before if name == "before" else args.after
                    rate = turn(src, server.url, args.calls, mode)
                    used = server_cpu(client) - cpu0
                    rates[mode, name].append(rate)
                    server_us[mode, name].append(used / (args.calls + 200) * 1e6)
                    print(
                        f"run {run + 1} {mode:<10} {name:<6} {rate:>9,.0f} enqueues/s  "
                        f"server CPU {server_us[mode, name][-1]:.1f} us/call",
                        flush=True,
                    )
    print()
    print("| mode | before (/s) | after (/s) | after / before | after, share of many |")
    print("|---|---|---|---|---|")
    many = statistics.median(rates["many", "after"]) if "many" in modes else None
    for mode in modes:
        before = statistics.median(rates[mode, "before"])
        after = statistics.median(rates[mode, "after"])
        ratios = [a / b for a, b in zip(rates[mode, "after"], rates[mode, "before"], strict=True)]
        share = f"{after / many:.2f}" if many else "-"
        print(
            f"| {mode} | {before:,.0f} | {after:,.0f} | {statistics.median(ratios):.3f} | {share} |"
        )


if __name__ == "__main__":
    main()
