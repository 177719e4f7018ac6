"""The dashboard's pages at scale: 1,000,000 waiting and 100,000 dead tasks in one queue;
then 100,000 queues of 10 tasks each.

    python bench/dashboard.py [--waiting 1000000] [--dead 100000] [--repeat 7]
                              [--queues 100000] [--per-queue 10] [--server valkey|redis|PATH]

Fills a private server as bench/inspection.py does, serves the dashboard with uvicorn in a
thread, and times each page over HTTP (the median of ``--repeat`` GETs, a fresh connection
each, as a browser's refresh): the overview, a queue's first page of waiting and of dead
(100 rows), a page half-way down waiting, a job filter, a search (text no task holds: the
2,000 ids a page looks at; an id prefix), the Dead page, a task, and its live refresh. Then,
on a second private server, ``--queues`` queues (bench/queues_fill.py: every tenth holds a
dead task): the overview's first page and one half-way through the queues, its chart (an
hour, a week), the Dead page, a dead tab with its selector of queues, and /metrics (every
queue: the median of 3 at most). Prints the figures and each page's size; asserts nothing.
"""

from __future__ import annotations

import argparse
import socket
import statistics
import threading
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager

import redis
import uvicorn
from inspection import RARE, fill
from queues_fill import fill_queues
from server import arguments, private_server

from culex import config
from culex._redis.keys import queues_key
from culex.dashboard import app
from culex.operations import inspection


@contextmanager
def served(settings: config.Settings) -> Iterator[str]:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app(settings), port=port, log_level="warning"))
    thread = threading.Thread(target=server.run)
    thread.start()
    while not server.started:
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join()


def timed(address: str, repeat: int, live: bool = False) -> tuple[float, int]:
    """The median ms of a GET of ``address``, and the page's size in bytes."""
    headers = {"X-Culex-Live": "1"} if live else {}
    times, size = [], 0
    for _ in range(repeat):
        start = time.perf_counter()
        with urllib.request.urlopen(urllib.request.Request(address, headers=headers)) as page:
            size = len(page.read())
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times), size


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--waiting", type=int, default=1_000_000)
    parser.add_argument("--dead", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--queues", type=int, default=100_000)
    parser.add_argument("--per-queue", type=int, default=10)
    args = parser.parse_args()
    with private_server(args.server) as server:
        client = redis.Redis.from_url(server.url)
        fill(client, "waiting", args.waiting, (RARE, RARE // 2, "RareJob", "CommonJob", "EmailJob"))
        fill(client, "dead", args.dead, (10, 0, "ChargeJob", "EmailJob", "EmailJob"))
        client.sadd(queues_key("culex"), "bench")  # (the fill enqueues nothing)
        settings = config.settings(redis_url=server.url)
        print(f"{server.version()}: {args.waiting:,} waiting and {args.dead:,} dead in one queue")
        half = inspection.tasks("bench", "waiting", settings, limit=500)
        some = half.rows[0].id
        with served(settings) as base:
            q = f"{base}/queue?queue=bench"
            pages = [
                ("overview", f"{base}/", False),
                ("queue: waiting, first 100, newest first", f"{q}&limit=100&order=newest", False),
                ("queue: waiting, next 100 (cursor)",
                 f"{q}&limit=100&order=newest&cursor={half.next_cursor}", False),
                ("queue: waiting, 100 in run order (oldest first)", f"{q}&limit=100", False),
                ("queue: waiting, job CommonJob, 100", f"{q}&limit=100&job=CommonJob", False),
                ("queue: dead, first 100", f"{q}&state=dead&limit=100", False),
                ("queue: waiting, search text in none", f"{q}&limit=100&q=no-such-text", False),
                ("queue: waiting, search an id prefix", f"{q}&limit=100&q={some[:-4]}", False),
                ("dead page (every queue), first 100", f"{base}/dead?limit=100", False),
                ("task page", f"{base}/task?queue=bench&id={some}", False),
                ("overview, live refresh", f"{base}/", True),
            ]  # fmt: skip
            for name, address, live in pages:
                ms, size = timed(address, args.repeat, live)
                print(f"{name:<46}{ms:>9.1f} ms  {size / 1024:>7.1f} KiB")
    if args.queues:
        with private_server(args.server) as server:
            many(redis.Redis.from_url(server.url), config.settings(redis_url=server.url), args)


def many(client: redis.Redis, settings: config.Settings, args: argparse.Namespace) -> None:
    """The pages that read every queue, on ``--queues`` queues."""
    start = time.perf_counter()
    fill_queues(client, args.queues, args.per_queue)
    filled = time.perf_counter() - start
    tasks = args.queues * args.per_queue + args.queues // 10
    print(f"\n{args.queues:,} queues, {tasks:,} tasks (filled in {filled:.1f} s)")
    middle = f"q{args.queues // 2:06d}"
    with served(settings) as base:
        pages = [
            ("overview (first 50 queues)", f"{base}/", args.repeat),
            ("overview, 50 queues half-way (after=)", f"{base}/?after={middle}", args.repeat),
            ("chart: an hour of 50 queues", f"{base}/series?range=hour", args.repeat),
            ("chart: a week of 50 queues", f"{base}/series?range=week", args.repeat),
            ("Dead page (every queue), first 100", f"{base}/dead", args.repeat),
            ("a dead tab, with its selector", f"{base}/queue?queue=q000000&state=dead",
             args.repeat),
            ("/metrics (every queue)", f"{base}/metrics", min(args.repeat, 3)),
        ]  # fmt: skip
        for name, address, repeat in pages:
            ms, size = timed(address, repeat)
            print(f"{name:<46}{ms:>9.1f} ms  {size / 1024:>7.1f} KiB")


if __name__ == "__main__":
    main()
