"""arq: an async function, ``arq`` worker with ``max_jobs`` raised (its throughput knob)."""

from __future__ import annotations

from typing import Any

from arq import create_pool
from arq.connections import RedisSettings

from .record import URL, arecord

CONCURRENCY = 100
WORKER = ["{bin}/arq", "adapters.arq.WorkerSettings"]
SETTINGS = f"arq worker, max_jobs {CONCURRENCY}, other settings default (poll_delay 0.5 s)"


async def noop(ctx: dict[str, Any], stamp: float) -> None:
    await arecord(stamp)


class WorkerSettings:
    functions = [noop]  # noqa: RUF012 (arq reads class attributes)
    redis_settings = RedisSettings.from_dsn(URL)
    max_jobs = CONCURRENCY


class Producer:
    """``ArqRedis.enqueue_job``; arq has no bulk enqueue."""

    many = None

    async def __aenter__(self) -> Producer:
        self.pool = await create_pool(RedisSettings.from_dsn(URL))
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.pool.aclose()

    async def one(self, stamp: float, delay: float) -> None:
        await self.pool.enqueue_job("noop", stamp, _defer_by=delay or None)
