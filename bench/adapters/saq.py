"""saq: an async function, the ``saq`` worker with its ``concurrency`` raised."""

from __future__ import annotations

from typing import Any

from saq import Queue

from .record import URL, arecord

CONCURRENCY = 100
WORKER = ["{bin}/saq", "adapters.saq.settings"]
SETTINGS = f"saq worker, concurrency {CONCURRENCY}, other settings default (schedule poll 1 s)"


async def noop(ctx: dict[str, Any], *, stamp: float) -> None:
    await arecord(stamp)


settings = {
    "queue": Queue.from_url(URL, name="bench"),
    "functions": [noop],
    "concurrency": CONCURRENCY,
}


class Producer:
    """``Queue.enqueue``; saq has no bulk enqueue (``map`` waits for the results)."""

    many = None

    async def __aenter__(self) -> Producer:
        self.queue = Queue.from_url(URL, name="bench")
        await self.queue.connect()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.queue.disconnect()

    async def one(self, stamp: float, delay: float) -> None:
        # scheduled: epoch seconds of the due time (0: now)
        await self.queue.enqueue("noop", stamp=stamp, scheduled=stamp if delay else 0)
