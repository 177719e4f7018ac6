"""Connections to the server named by the settings, made once per process (and per loop).

With no ``redis_url`` the embedded server is started or joined (DESIGN.md §7).
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import AsyncIterator
from typing import Any

import redis
import redis.asyncio

from .. import config
from .client import AsyncDriver, SyncDriver

_sync: dict[tuple[int, str], SyncDriver] = {}
_async: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[str, tuple[AsyncDriver, AsyncIterator[None]]]
] = weakref.WeakKeyDictionary()


def resolve_url(url: str | None) -> str:
    """The URL to use: the given one, or the embedded server's (started if needed)."""
    if url:
        return url
    from ..embedded import ensure_default_server

    return ensure_default_server()


def _options(url: str) -> dict[str, Any]:
    # Replies stay bytes (a task hash may hold bytes that are not UTF-8, and hiredis is
    # fastest so); ids decoded with surrogateescape go back to the server unchanged.
    options: dict[str, Any] = {
        "decode_responses": False,
        "encoding_errors": "surrogateescape",
        "health_check_interval": 30,
        "protocol": 2,  # raw replies are parsed by the calls: one reply shape
        # The drivers keep their connections and bound them themselves (AsyncDriver waits
        # for a free one); redis-py 8's pool would raise past 100 instead of waiting.
        "max_connections": 2**31,
    }
    if not url.startswith("unix:"):
        options["socket_keepalive"] = True
    return options


def sync_driver(url: str | None = None) -> SyncDriver:
    """A blocking driver for ``url`` (default: the configured server)."""
    named = url if url is not None else config.settings().redis_url
    key = (os.getpid(), named or "")
    driver = _sync.get(key)
    if driver is None:
        where = resolve_url(named)
        client = redis.Redis.from_url(where, **_options(where))
        driver = _sync[key] = SyncDriver(client, where)
    return driver


async def async_driver(url: str | None = None) -> AsyncDriver:
    """An asyncio driver for ``url`` on the running loop (clients are bound to a loop)."""
    named = url if url is not None else config.settings().redis_url
    per_loop = _async.setdefault(asyncio.get_running_loop(), {})
    entry = per_loop.get(named or "")
    if entry is None:
        where = resolve_url(named)
        client = redis.asyncio.Redis.from_url(where, **_options(where))
        driver = AsyncDriver(client, where)
        closer = _close_with_loop(driver)
        await closer.__anext__()
        entry = per_loop[named or ""] = (driver, closer)
    return entry[0]


async def _close_with_loop(driver: AsyncDriver) -> AsyncIterator[None]:
    """Closes the driver when its loop shuts down (``asyncio.run`` closes async generators)."""
    try:
        yield
    finally:
        await driver.close()


def new_sync_driver(url: str) -> SyncDriver:
    """A blocking driver of its own (a runner's heartbeat thread)."""
    return SyncDriver(redis.Redis.from_url(url, **_options(url)), url)


def new_async_driver(url: str) -> AsyncDriver:
    """A driver of its own (a runner's: its blocking waits must not hold a shared pool)."""
    return AsyncDriver(redis.asyncio.Redis.from_url(url, **_options(url)), url)


def _forget() -> None:
    for driver in _sync.values():
        driver.close()
    _sync.clear()


config.on_change(_forget)
