"""What a producer's wait for a result costs in round trips to the server.

    python bench/result_wait.py [--wait 2] [--server valkey|redis|PATH]

Two waits of ``--wait`` seconds with ``task.result()``: one that times out (no runner
runs), and one that a runner ends: it is started in a thread after ``--wait`` seconds,
so the task succeeds just after. Counts the exchanges (one write, its replies read) of
the waiting thread only: not the runner's, nor the loading of a script. Run it with
another checkout on PYTHONPATH to compare. Prints the figures; asserts nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
from typing import Any

from server import arguments, private_server

import culex
from culex._redis.connections import SyncConnection


class WaitedJob(culex.QueuedJob):
    queue = "waited"

    def perform(self) -> int:
        return 7


def counting() -> list[int]:
    """Exchanges made by the calling thread from now on (one entry each)."""
    me = threading.get_ident()
    counts: list[int] = []
    exchange = SyncConnection.exchange

    def counted(self: SyncConnection, packed: bytes, count: int, *blocks: float) -> Any:
        if threading.get_ident() == me:
            counts.append(count)
        return exchange(self, packed, count, *blocks)  # (older checkouts take no blocks)

    SyncConnection.exchange = counted  # type: ignore[method-assign]
    return counts


def run_later(delay: float, stop: threading.Event) -> threading.Thread:
    async def main() -> None:
        await asyncio.sleep(delay)
        runner = culex.Runner(run_from=["waited"])
        running = asyncio.create_task(runner.arun())
        await asyncio.to_thread(stop.wait)
        runner.stop()
        await running

    thread = threading.Thread(target=asyncio.run, args=(main(),))
    thread.start()
    return thread


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--wait", type=float, default=2.0)
    args = parser.parse_args()
    with private_server(args.server) as server:
        culex.configure(redis_url=server.url)
        task = WaitedJob().enqueue()
        with contextlib.suppress(TimeoutError):  # once first: a script load is not counted
            task.result(timeout=0)
        counts = counting()
        started = time.perf_counter()
        with contextlib.suppress(TimeoutError):
            task.result(timeout=args.wait)
        took = time.perf_counter() - started
        print(f"a {args.wait:g} s wait that times out: {len(counts)} exchanges in {took:.2f} s")
        counts.clear()
        stop = threading.Event()
        thread = run_later(args.wait, stop)
        started = time.perf_counter()
        value = task.result(timeout=args.wait * 5)
        took = time.perf_counter() - started
        stop.set()
        thread.join()
        print(
            f"a wait that its task ends after {args.wait:g} s: {len(counts)} exchanges "
            f"in {took:.2f} s (result {value})"
        )


if __name__ == "__main__":
    main()
