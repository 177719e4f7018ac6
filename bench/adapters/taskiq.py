"""taskiq with taskiq-redis: ``RedisStreamBroker`` (the one its README shows, with acks),
``taskiq worker`` with one worker process."""

from __future__ import annotations

from taskiq_redis import RedisStreamBroker

from .record import URL, arecord

CONCURRENCY = 100
WORKER = [
    "{bin}/taskiq",
    "worker",
    "adapters.taskiq:broker",
    "--workers",
    "1",
    "--max-async-tasks",
    str(CONCURRENCY),
]
SETTINGS = f"taskiq worker --workers 1 --max-async-tasks {CONCURRENCY} (the default), stream broker"
NO_DELAY = "no delay in the broker: it needs a schedule source and a `taskiq scheduler` process"

broker = RedisStreamBroker(url=URL, queue_name="bench")


@broker.task
async def noop(stamp: float) -> None:
    await arecord(stamp)


class Producer:
    """``task.kiq``; taskiq has no bulk enqueue."""

    many = None

    async def __aenter__(self) -> Producer:
        await broker.startup()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await broker.shutdown()

    async def one(self, stamp: float, delay: float) -> None:
        if delay:
            raise NotImplementedError(NO_DELAY)
        await noop.kiq(stamp)
