"""culex only: the drain rate of no-op tasks with ``culex run --processes 1`` and ``2``.

    python bench/processes.py [--tasks 50000] [--concurrency 100] [--runs 3] [--counts 1,2]

For each run and each process count in turn: fill the queue with TASKS no-op tasks (a bulk
enqueue, in a child), start ``culex run bare_jobs --processes P`` (its log thrown away, at
``--log-level``, default INFO as the command has it), and time the drain from 10% done to
90% done, watching waiting + pending every 5 ms: the interpreters' start-up and the last
stragglers are left out. Also the CPU per task over the whole drain: the server's (INFO
cpu), and the runners' (every runner process and the supervisor, start-up included: the
children's rusage once they are reaped).
Prints each run and the medians; asserts nothing.
"""

from __future__ import annotations

import os
import resource
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path

import culex_run
import redis
from memory import JOBS
from server import arguments, private_server, server_cpu

from culex._redis.keys import queue_keys

PAUSE = 0.005  # seconds between looks at the queue


def start(
    folder: Path, url: str, processes: int, concurrency: int, level: str
) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "culex", "--log-level", level, "run", "bare_jobs"]
    command += ["--processes", str(processes), "--concurrency", str(concurrency)]
    command += ["--redis-url", url]
    return subprocess.Popen(command, cwd=folder, stderr=subprocess.DEVNULL)


def drain(client: redis.Redis, tasks: int) -> tuple[float, float]:
    """Seconds from 10% to 90% of ``tasks`` done, and the server CPU seconds of it all."""
    keys = queue_keys("culex", culex_run.QUEUE)
    cpu = server_cpu(client)
    marks: dict[float, float] = {}
    while True:
        left = client.zcard(keys.waiting) + client.zcard(keys.pending)
        now = time.perf_counter()
        for fraction in (0.9, 0.1):
            if left <= tasks * fraction:
                marks.setdefault(fraction, now)
        if not left:
            return marks[0.1] - marks[0.9], server_cpu(client) - cpu
        time.sleep(PAUSE)


def one_run(
    folder: Path,
    client: redis.Redis,
    url: str,
    processes: int,
    tasks: int,
    concurrency: int,
    level: str,
) -> dict[str, float]:
    client.flushall()
    culex_run.enqueue(folder, "bare_jobs", url, tasks, "stamp=0")
    before = _children_cpu()
    runner = start(folder, url, processes, concurrency, level)
    try:
        seconds, cpu = drain(client, tasks)
    finally:
        runner.send_signal(signal.SIGTERM)
        runner.wait(60)
    return {
        "rate": 0.8 * tasks / seconds,
        "server_us_per_task": cpu / tasks * 1e6,
        "runner_us_per_task": (_children_cpu() - before) / tasks * 1e6,
    }


def _children_cpu() -> float:
    """CPU seconds of the reaped children of this process and of theirs."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--tasks", type=int, default=50_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--counts", default="1,2", help="process counts, in the order run")
    parser.add_argument("--log-level", default="INFO")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    folder = culex_run.jobs_folder("bare_jobs", JOBS)
    results: dict[int, list[dict[str, float]]] = {count: [] for count in counts}
    with private_server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        print(
            f"{server.version()}, {os.cpu_count()} cores, {args.tasks:,} no-op tasks, "
            f"concurrency {args.concurrency} per process, log level {args.log_level}; "
            f"load average {os.getloadavg()[0]:.2f}"
        )
        for run in range(1, args.runs + 1):
            for count in counts:
                got = one_run(
                    folder, client, server.url, count, args.tasks, args.concurrency, args.log_level
                )
                results[count].append(got)
                print(
                    f"  run {run}, --processes {count}: {got['rate']:,.0f} tasks/s, "
                    f"CPU per task: server {got['server_us_per_task']:.1f} µs, "
                    f"runners {got['runner_us_per_task']:.1f} µs"
                )
        client.close()
    print(f"load average at the end {os.getloadavg()[0]:.2f}")
    for count in counts:
        rate = statistics.median(r["rate"] for r in results[count])
        on_server = statistics.median(r["server_us_per_task"] for r in results[count])
        runners = statistics.median(r["runner_us_per_task"] for r in results[count])
        print(
            f"median, --processes {count}: {rate:,.0f} tasks/s; CPU per task: "
            f"server {on_server:.1f} µs, runners {runners:.1f} µs"
        )


if __name__ == "__main__":
    main()
