"""The body of every system's no-op task, and the keys the harness reads.

``stamp == 0``: count the task (``INCR``), as in the throughput scenarios. Otherwise
``stamp`` is when the task should have started (its enqueue time, or its due time when
delayed), and the task pushes how late it started, in seconds (``RPUSH``). Either way
the task makes exactly one round trip to the server.

Two bodies, chosen by the environment variable ``BENCH_BODY``:

- ``redis-py`` (the default, every scenario of the table): a redis-py client, sync or
  asyncio as the system's tasks are.
- ``stdlib`` (the "RSS in B, stdlib task body" column only): the same command written over a
  plain socket, importing nothing a worker does not already have. A peer built on
  redis-py carries redis-py anyway, culex does not; this body lets the runner's peak RSS
  measure each system's own footprint rather than the task's imports.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from typing import Any
from urllib.parse import urlsplit

URL = os.environ.get("BENCH_REDIS_URL", "")
BODY = os.environ.get("BENCH_BODY", "redis-py")
DONE = "bench:done"
LATE = "bench:late"
POOL = 50  # connections of an async task client


def _args(stamp: float, started: float) -> tuple[str, ...]:
    return ("RPUSH", LATE, repr(started - stamp)) if stamp else ("INCR", DONE)


if BODY == "redis-py":
    import asyncio
    import weakref

    import redis
    import redis.asyncio

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

elif BODY == "stdlib":
    _address = urlsplit(URL)
    _host, _port = _address.hostname or "127.0.0.1", _address.port or 6379
    _local = threading.local()
    _pools: dict[Any, Any] = {}

    def _command(args: tuple[str, ...]) -> bytes:
        parts = [b"*%d\r\n" % len(args)]
        for arg in args:
            data = arg.encode()
            parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
        return b"".join(parts)

    def _check(line: bytes) -> None:
        if not line.startswith(b":"):  # INCR and RPUSH answer with an integer
            raise RuntimeError(f"unexpected reply {line!r}")

    def record(stamp: float) -> None:
        """The task body of a system whose tasks are plain functions (run in threads)."""
        started = time.time()
        if not hasattr(_local, "reader"):
            sock = socket.create_connection((_host, _port))
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            _local.sock, _local.reader = sock, sock.makefile("rb")
        _local.sock.sendall(_command(_args(stamp, started)))
        _check(_local.reader.readline())

    async def arecord(stamp: float) -> None:
        """The task body of a system whose tasks are coroutines: a pool of POOL streams."""
        import asyncio  # a coroutine runs on asyncio: already imported by the system

        started = time.time()
        loop = asyncio.get_running_loop()
        pool = _pools.get(loop)
        if pool is None:
            pool = _pools[loop] = {"idle": asyncio.Queue(), "opened": 0}
        if pool["idle"].empty() and pool["opened"] < POOL:
            pool["opened"] += 1
            stream = await asyncio.open_connection(_host, _port)
        else:
            stream = await pool["idle"].get()
        try:
            reader, writer = stream
            writer.write(_command(_args(stamp, started)))
            _check(await reader.readline())
        finally:
            pool["idle"].put_nowait(stream)

else:
    raise SystemExit(f"BENCH_BODY must be redis-py or stdlib, not {BODY!r}")
