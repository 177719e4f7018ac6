"""streaq: an async task, ``streaq run`` with its ``concurrency`` raised."""

from __future__ import annotations

from streaq import Worker

from .record import URL, arecord

CONCURRENCY = 100
WORKER = ["{bin}/streaq", "run", "adapters.streaq:worker"]
SETTINGS = f"streaq run, concurrency {CONCURRENCY}, other settings default"

worker = Worker(redis_url=URL, concurrency=CONCURRENCY, queue_name="bench")


@worker.task()
async def noop(stamp: float) -> None:
    await arecord(stamp)


class Producer:
    """``task.enqueue`` / ``.start(delay=...)``, and ``Worker.enqueue_many``."""

    async def __aenter__(self) -> Producer:
        await worker.__aenter__()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await worker.__aexit__(None, None, None)

    async def one(self, stamp: float, delay: float) -> None:
        if delay:
            await noop.enqueue(stamp).start(delay=delay)
        else:
            await noop.enqueue(stamp)

    async def many(self, stamps: list[float]) -> None:
        await worker.enqueue_many([noop.enqueue(s) for s in stamps])
