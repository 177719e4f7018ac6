"""One-call ``enqueue()`` of two checkouts, in turns: the rate a producer gets calling it in
a loop, one call at a time, and the server's time per call.

    python bench/enqueue_turns.py --before /tmp/culex-before/src [--after SRC]
        [--calls 8000] [--runs 5] [--server auto|redis|valkey|PATH]

``--before`` and ``--after`` are ``src`` folders of two checkouts (``git archive <commit> src
| tar -x -C /tmp/culex-before``). Each run makes ``--calls`` enqueues of a job with one int
param with each checkout, the order flipping every run, in a child process with that
checkout first on its path, on one private server flushed in between. The machine is noisy:
the figures are the medians of the runs and the median of the per-run ratios (after /
before). Prints the figures; asserts nothing.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import redis
from server import arguments, private_server, server_cpu

AFTER = Path(__file__).resolve().parent.parent / "src"

CHILD = """
import json, sys, time
import culex

class NoopJob(culex.QueuedJob):
    queue = "bench"
    n: int

    def perform(self) -> None:
        pass

culex.configure(redis_url=sys.argv[1])
calls = int(sys.argv[2])
for n in range(200):  # (the connection made and the script loaded before the clock starts)
    NoopJob(n=n).enqueue()
start = time.perf_counter()
for n in range(calls):
    NoopJob(n=n).enqueue()
print(json.dumps({"rate": calls / (time.perf_counter() - start)}))
"""


def turn(src: Path, url: str, calls: int) -> float:
    """The rate of ``calls`` one-call enqueues by the culex of ``src``, in its own process."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, url, str(calls)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    rate: float = json.loads(out.strip().splitlines()[-1])["rate"]
    return rate


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--before", type=Path, required=True, help="src of the checkout before")
    parser.add_argument("--after", type=Path, default=AFTER, help="default: this checkout's src")
    parser.add_argument("--calls", type=int, default=8000)
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    rates: dict[str, list[float]] = {"before": [], "after": []}
    server_us: dict[str, list[float]] = {"before": [], "after": []}
    with private_server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        for run in range(args.runs):
            order = ("before", "after") if run % 2 == 0 else ("after", "before")
            for name in order:
                client.flushall()
                cpu0 = server_cpu(client)
                rate = turn(args.before if name == "before" else args.after, server.url, args.calls)
                used = server_cpu(client) - cpu0
                rates[name].append(rate)
                server_us[name].append(used / (args.calls + 200) * 1e6)
                print(
                    f"run {run + 1} {name:<6} {rate:>9,.0f} enqueues/s  server CPU "
                    f"{server_us[name][-1]:.1f} us/call",
                    flush=True,
                )
    ratios = [a / b for a, b in zip(rates["after"], rates["before"], strict=True)]
    for name in ("before", "after"):
        print(
            f"{name:<6} median {statistics.median(rates[name]):>9,.0f} enqueues/s, server CPU "
            f"{statistics.median(server_us[name]):.1f} us/call"
        )
    print(f"after / before: median of the per-run ratios {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
