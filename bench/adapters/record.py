"""The body of every system's no-op task, and the keys the harness reads.

``stamp == 0``: count the task (``INCR``), as in the throughput scenarios. Otherwise
``stamp`` is when the task should have started (its enqueue time, or its due time when
delayed), and the task pushes how late it started, in seconds (``RPUSH``). Either way
the task makes exactly one round trip to the server.
"""

from __future__ import annotations

import asyncio
import os
import time
import weakref

import redis
import redis.asyncio

URL = os.environ.get("BENCH_REDIS_URL", "")
DONE = "bench:done"
LATE = "bench:late"
POOL = 50  # connections of an async task client

_sync: redis.Redis | None = None
_async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, redis.asyncio.Redis] = (
    weakref.WeakKeyDictionary()
)


def record(stamp: float) -> None:
    """The task body of a system whose tasks are plain functions (run in threads)."""
    started = time.time()
    global _sync
    if _sync is None:
        _sync = redis.Redis.from_url(URL)
    if stamp:
        _sync.rpush(LATE, repr(started - stamp))
    else:
        _sync.incr(DONE)


async def arecord(stamp: float) -> None:
    """The task body of a system whose tasks are coroutines."""
    started = time.time()
    loop = asyncio.get_running_loop()
    client = _async.get(loop)
    if client is None:
        # A pool that waits for a free connection (redis-py 8's default one raises
        # MaxConnectionsError past 100 at once, and 5.x's opens one per task in flight).
        pool = redis.asyncio.BlockingConnectionPool.from_url(URL, max_connections=POOL)
        client = _async[loop] = redis.asyncio.Redis(connection_pool=pool)
    if stamp:
        await client.rpush(LATE, repr(started - stamp))
    else:
        await client.incr(DONE)
