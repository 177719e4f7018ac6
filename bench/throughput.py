"""Enqueue and drain rates of culex for N no-op tasks, on a private server.

    python bench/throughput.py [--tasks 20000] [--concurrency 100] [--redis-url URL]

With no --redis-url it starts its own embedded Valkey in a temporary folder. Prints the
figures; asserts nothing (speed is measured here, never in the tests).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import resource
import tempfile
import time
from pathlib import Path

import culex
from culex.server.embedded import EmbeddedServer

done = 0
all_done = asyncio.Event()
target = 0


class NoopJob(culex.QueuedJob):
    queue = "bench"
    n: int

    async def perform(self) -> None:
        global done
        done += 1
        if done == target:
            all_done.set()


def enqueue_rate(tasks: int) -> float:
    start = time.perf_counter()
    for i in range(tasks):
        NoopJob(n=i).enqueue()
    return tasks / (time.perf_counter() - start)


async def drain_rate(tasks: int, concurrency: int) -> float:
    global target
    target = tasks
    start = time.perf_counter()
    runner = culex.Runner(run_from=["bench"], concurrency=concurrency)
    running = asyncio.create_task(runner.arun())
    await all_done.wait()
    elapsed = time.perf_counter() - start
    runner.stop()
    await running
    return tasks / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--redis-url")
    parser.add_argument("--log-info", action="store_true", help="keep the per-task INFO lines")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO if args.log_info else logging.WARNING)
    with tempfile.TemporaryDirectory(prefix="culex-bench-") as folder:
        server = None
        url = args.redis_url
        if url is None:
            server = EmbeddedServer(Path(folder))
            url = server.ensure_running()
        os.environ["CULEX_REDIS_URL"] = url
        culex.configure(redis_url=url)
        try:
            import redis

            redis.Redis.from_url(url).flushall()
            enqueue = enqueue_rate(args.tasks)
            drain = asyncio.run(drain_rate(args.tasks, args.concurrency))
        finally:
            if server is not None:
                server.stop()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"tasks              {args.tasks}")
    print(f"enqueue, one call  {enqueue:,.0f} tasks/s")
    print(f"drain, 1 runner    {drain:,.0f} tasks/s (concurrency {args.concurrency})")
    print(f"peak RSS           {rss_mb:.0f} MB (producer and runner in one process)")


if __name__ == "__main__":
    main()
