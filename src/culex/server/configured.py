"""The connection to the configured server: which server (the ``redis_url`` setting, or the
embedded default, docs/design.md#the-server) and its drivers, made once per process (and per loop).

Which driver: culex's own for ``redis://``, ``rediss://`` and ``unix://`` (the ``driver``
setting may choose redis-py's instead); redis-py's for ``redis+sentinel://`` and
``redis+cluster://``. A ``redis://`` URL that reaches a node of a cluster (``cluster_enabled:1``)
is used as a cluster, with a log line saying so: asked once per process and URL (not of a
``unix://`` socket: a cluster's nodes send their clients to each other by TCP address).

The driver a process's producers share coalesces the calls they make at once
(culex._redis.coalescing); a runner's drivers are its own, and do not.

It sits above ``culex._redis``, which is given a URL and options and knows no settings.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import AsyncIterator
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from .. import config
from .._redis import commands
from .._redis.address import Address
from .._redis.calls import Call
from .._redis.coalescing import AsyncCoalescer, SyncCoalescer
from .._redis.connections import SOCKET_TIMEOUT
from .._redis.drivers import (
    AsyncDriver,
    AsyncDriverProtocol,
    Pending,
    SyncDriver,
    SyncDriverProtocol,
)
from .._redis.redispy import RedisPyAsyncDriver, RedisPySyncDriver
from ..errors import ConfigurationError, ServerError

T = TypeVar("T")

logger = logging.getLogger("culex")

_sync: dict[str, SyncDriverProtocol] = {}  # (a driver drops its connections in a forked child)
# Per loop, by (url, generation of the settings): a driver and what closes it with its loop
# (a future while it is being made). A configure() starts a new generation: the drivers of
# the old one are closed with their loops.
_async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[tuple[str, int], Any]] = (
    weakref.WeakKeyDictionary()
)
_generation = [0]
# Whether the server of a redis:// URL is a cluster node: its cluster URL, or "" (asked once).
_cluster_of: dict[str, str] = {}


def resolve_url(url: str | None) -> str:
    """The URL to use: the given one, or the embedded server's (started if needed)."""
    if url:
        return url
    from .embedded import ensure_default_server  # (a server with a redis_url never needs it)

    return ensure_default_server()


def sync_driver(url: str | None = None) -> SyncDriverProtocol:
    """A blocking driver for ``url`` (default: the configured server)."""
    settings = config.settings()
    named = url if url is not None else settings.redis_url
    key = named or ""
    driver = _sync.get(key)
    if driver is None:
        driver = _sync[key] = SyncCoalescer(
            new_sync_driver(
                resolve_url(named), settings.socket_timeout, busy_poll=settings.busy_poll
            )
        )
    return driver


async def run_one(call: Call[T]) -> T:
    """``await (await async_driver()).run(call)``, but sent without a turn of the loop when
    the driver is made and idle (AsyncCoalescer.run_now): a producer's common call."""
    loop = asyncio.get_running_loop()
    driver = _made_driver(loop, config.settings().redis_url)
    if driver is None:
        return await (await async_driver()).run(call)
    if type(driver) is AsyncCoalescer:
        got = driver.run_now(call, loop)
        if isinstance(got, Pending):
            return await got.wait
        if got is not None:
            return got
    return await driver.run(call)


def _made_driver(loop: asyncio.AbstractEventLoop, named: str | None) -> AsyncDriverProtocol | None:
    """The driver made for ``named`` on ``loop`` (under the current configuration), or None
    when none is made yet."""
    per_loop = _async.get(loop)
    entry = None if per_loop is None else per_loop.get(_key(named))
    if type(entry) is not tuple:  # (none, or a future: still being made)
        return None
    driver: AsyncDriverProtocol = entry[0]
    return driver


def _key(named: str | None) -> tuple[str, int]:
    return (named or "", _generation[0])  # (a configure() may change how to connect)


async def async_driver(url: str | None = None) -> AsyncDriverProtocol:
    """An asyncio driver for ``url`` on the running loop (clients are bound to a loop)."""
    settings = config.settings()
    named = url if url is not None else settings.redis_url
    loop = asyncio.get_running_loop()
    driver = _made_driver(loop, named)
    if driver is not None:  # the common case: made before
        return driver
    per_loop = _async.setdefault(loop, {})
    key = _key(named)
    entry = per_loop.get(key)
    if entry is None:  # the first caller makes it; callers meanwhile wait for the same one
        entry = per_loop[key] = asyncio.ensure_future(
            _made(named, settings.socket_timeout, settings.busy_poll)
        )
        entry.add_done_callback(lambda made: _keep(per_loop, key, made))
    assert isinstance(entry, asyncio.Future)
    made: tuple[AsyncDriverProtocol, AsyncIterator[None]] = await asyncio.shield(entry)
    return made[0]


async def _made(
    named: str | None, socket_timeout: float, busy_poll: float
) -> tuple[AsyncDriverProtocol, AsyncIterator[None]]:
    made = await new_async_driver(resolve_url(named), socket_timeout, busy_poll=busy_poll)
    driver = AsyncCoalescer(made)
    closer = _close_with_loop(driver)
    await closer.__anext__()
    return driver, closer


def _keep(per_loop: dict[Any, Any], key: tuple[str, int], made: asyncio.Future[Any]) -> None:
    """Keep a made driver for the next calls; forget one that failed (the next call tries
    again)."""
    if made.cancelled() or made.exception() is not None:
        per_loop.pop(key, None)
    else:
        per_loop[key] = made.result()


async def _close_with_loop(driver: AsyncDriverProtocol) -> AsyncIterator[None]:
    """Closes the driver when its loop shuts down (``asyncio.run`` closes async generators)."""
    try:
        yield
    finally:
        await driver.close()


def new_sync_driver(
    url: str, socket_timeout: float = SOCKET_TIMEOUT, *, busy_poll: float = 0.0
) -> SyncDriverProtocol:
    """A blocking driver of its own (a runner's heartbeat thread: it never spins, since a
    spinning thread would hold the GIL that the runner's loop needs)."""
    if _through_redis_py(url):
        return RedisPySyncDriver(url, socket_timeout, config.settings().redis_options)
    driver = SyncDriver(url, busy_poll, socket_timeout)
    cluster_url = _known_cluster(url)
    if cluster_url is None:
        cluster_url = _cluster_of[url] = _as_cluster(url, _cluster_enabled(driver.run))
    if cluster_url:
        driver.close()
        return RedisPySyncDriver(cluster_url, socket_timeout, config.settings().redis_options)
    return driver


async def new_async_driver(
    url: str,
    socket_timeout: float = SOCKET_TIMEOUT,
    *,
    retry_for: float | None = None,
    busy_poll: float = 0.0,
) -> AsyncDriverProtocol:
    """A driver of its own (a runner's: its blocking waits must not hold a shared pool).
    ``retry_for``: see RedisPyAsyncDriver (a runner's loops pause and try again by
    themselves, so one node out of reach must not hold up the other nodes' queues).
    ``busy_poll``: culex's own driver polls for a reply while the loop has nothing else to
    run (a runner's loop polls in its selector instead: culex._redis.spin)."""
    options = config.settings().redis_options
    if _through_redis_py(url):
        return RedisPyAsyncDriver(url, socket_timeout, options, retry_for)
    driver = AsyncDriver(url, socket_timeout=socket_timeout, busy_poll=busy_poll)
    cluster_url = _known_cluster(url)
    if cluster_url is None:
        try:
            enabled = await driver.run(commands.cluster_enabled())
        except ServerError:
            enabled = False  # (unreachable now: the first real call says so)
        cluster_url = _cluster_of[url] = _as_cluster(url, enabled)
    if cluster_url:
        await driver.close()
        return RedisPyAsyncDriver(cluster_url, socket_timeout, options, retry_for)
    return driver


def _through_redis_py(url: str) -> bool:
    settings = config.settings()
    if Address.parse(url).kind != "server" or settings.driver == "redis-py":
        return True
    if settings.redis_options:
        raise ConfigurationError(
            "redis_options are keyword arguments of redis-py's client, which culex uses for "
            "redis+sentinel:// and redis+cluster:// URLs, or with driver='redis-py'"
        )
    return False


def _known_cluster(url: str) -> str | None:
    """The cluster URL of a server's URL, "" if it is no cluster node, None if not yet
    known (a unix socket is never asked: see the module's docstring)."""
    return "" if Address.parse(url).path is not None else _cluster_of.get(url)


def _cluster_enabled(run: Any) -> bool:
    try:
        return bool(run(commands.cluster_enabled()))
    except ServerError:
        return False  # (unreachable now: the first real call says so)


def _as_cluster(url: str, enabled: bool) -> str:
    """The cluster URL of a redis:// URL whose server is a cluster node ("" if it is not)."""
    if not enabled:
        return ""
    parts = urlsplit(url)
    cluster_url = urlunsplit((f"{parts.scheme}+cluster", parts.netloc, "", parts.query, ""))
    logger.info(
        "the server at %s is a node of a cluster (cluster_enabled:1): culex uses it as a "
        "cluster, as %s would",
        Address.parse(url).shown,
        Address.parse(cluster_url).shown,
    )
    return cluster_url


def _forget() -> None:
    for driver in _sync.values():
        driver.close()
    _sync.clear()
    _cluster_of.clear()
    _generation[0] += 1


config.on_change(_forget)
