"""The test session's own private Valkey server, started the way culex starts one.

Tests never use a server they did not start (a developer's Redis on :6379 is left alone).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import tempfile
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import culex
from culex import config
from culex._redis.client import SyncDriver
from culex.embedded import EmbeddedServer


@pytest.fixture(scope="session")
def server() -> Iterator[EmbeddedServer]:
    with tempfile.TemporaryDirectory(prefix="culex-test-") as data_dir:
        embedded = EmbeddedServer(Path(data_dir))
        url = embedded.ensure_running()
        os.environ["CULEX_REDIS_URL"] = url
        config.reset()
        try:
            yield embedded
        finally:
            embedded.stop()
            os.environ.pop("CULEX_REDIS_URL", None)


@pytest.fixture
def url(server: EmbeddedServer) -> str:
    return server.url


@pytest.fixture
def r(server: EmbeddedServer) -> Iterator[redis.Redis]:
    """A plain redis-py client on the test server; the database is empty for each test."""
    client = redis.Redis.from_url(server.url)
    client.flushall()
    config.reset()
    try:
        yield client
    finally:
        client.close()
        config.reset()


@contextlib.asynccontextmanager
async def running(runner: culex.Runner) -> AsyncIterator[culex.Runner]:
    """Run ``runner`` on the test's loop for the duration of the block, then stop it."""
    task = asyncio.create_task(runner.arun())
    try:
        yield runner
    finally:
        runner.stop()
        await asyncio.wait_for(task, 30)


def driver_of(r: redis.Redis) -> SyncDriver:
    """culex's own blocking driver, on the server ``r`` talks to (one per server)."""
    return _driver(f"unix://{r.connection_pool.connection_kwargs['path']}")


@functools.cache
def _driver(url: str) -> SyncDriver:
    return SyncDriver(url)


def snapshot(r: redis.Redis) -> dict[bytes, Any]:
    """Every key, with its content and whether it expires: what a refused script must leave."""
    state: dict[bytes, Any] = {}
    for key in r.keys("*"):
        kind = r.type(key)
        if kind == b"zset":
            value: Any = r.zrange(key, 0, -1, withscores=True)
        elif kind == b"hash":
            value = r.hgetall(key)
        elif kind == b"list":
            value = r.lrange(key, 0, -1)
        else:
            value = r.dump(key)
        state[key] = (value, r.pttl(key) > 0)
    return state


def writes(r: redis.Redis) -> int:
    """How many writes the server has taken (INFO persistence)."""
    return int(r.info("persistence")["rdb_changes_since_last_save"])


def count_exchanges(monkeypatch: pytest.MonkeyPatch, connection: type) -> list[int]:
    """How many calls each exchange with the server carries, in order."""
    counts: list[int] = []
    exchange = connection.exchange

    def counted(self: object, packed: bytes, count: int) -> object:
        counts.append(count)
        return exchange(self, packed, count)

    monkeypatch.setattr(connection, "exchange", counted)
    return counts
