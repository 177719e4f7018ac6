"""The connection to the configured server: which server (the ``redis_url`` setting, or the
embedded default, DESIGN.md §7) and its drivers, made once per process (and per loop).

It sits above ``culex._redis``, which is given a URL and options and knows no settings.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import AsyncIterator

from . import config
from ._redis.connections import SOCKET_TIMEOUT
from ._redis.drivers import AsyncDriver, SyncDriver

_sync: dict[str, SyncDriver] = {}  # (a driver drops its connections in a forked child)
_async: weakref.WeakKeyDictionary[
    asyncio.AbstractEventLoop, dict[tuple[str, float], tuple[AsyncDriver, AsyncIterator[None]]]
] = weakref.WeakKeyDictionary()


def resolve_url(url: str | None) -> str:
    """The URL to use: the given one, or the embedded server's (started if needed)."""
    if url:
        return url
    from .embedded import ensure_default_server  # (a server with a redis_url never needs it)

    return ensure_default_server()


def sync_driver(url: str | None = None) -> SyncDriver:
    """A blocking driver for ``url`` (default: the configured server)."""
    settings = config.settings()
    named = url if url is not None else settings.redis_url
    key = named or ""
    driver = _sync.get(key)
    if driver is None:
        driver = _sync[key] = SyncDriver(
            resolve_url(named), settings.busy_poll, settings.socket_timeout
        )
    return driver


async def async_driver(url: str | None = None) -> AsyncDriver:
    """An asyncio driver for ``url`` on the running loop (clients are bound to a loop)."""
    settings = config.settings()
    named = url if url is not None else settings.redis_url
    per_loop = _async.setdefault(asyncio.get_running_loop(), {})
    key = (named or "", settings.socket_timeout)  # (a configure() may change the timeout)
    entry = per_loop.get(key)
    if entry is None:
        driver = AsyncDriver(resolve_url(named), socket_timeout=settings.socket_timeout)
        closer = _close_with_loop(driver)
        await closer.__anext__()
        entry = per_loop[key] = (driver, closer)
    return entry[0]


async def _close_with_loop(driver: AsyncDriver) -> AsyncIterator[None]:
    """Closes the driver when its loop shuts down (``asyncio.run`` closes async generators)."""
    try:
        yield
    finally:
        await driver.close()


def new_sync_driver(url: str, socket_timeout: float = SOCKET_TIMEOUT) -> SyncDriver:
    """A blocking driver of its own (a runner's heartbeat thread: it never spins, since a
    spinning thread would hold the GIL that the runner's loop needs)."""
    return SyncDriver(url, socket_timeout=socket_timeout)


def new_async_driver(url: str, socket_timeout: float = SOCKET_TIMEOUT) -> AsyncDriver:
    """A driver of its own (a runner's: its blocking waits must not hold a shared pool)."""
    return AsyncDriver(url, socket_timeout=socket_timeout)


def _forget() -> None:
    for driver in _sync.values():
        driver.close()
    _sync.clear()


config.on_change(_forget)
