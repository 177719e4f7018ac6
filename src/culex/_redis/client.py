"""The two drivers that send a :class:`~culex._redis.operations.Call`: sync and async.

They differ only in how they wait for the server; what is sent and how the reply is read
is decided by the call itself.

Speed: redis-py's client layer (command packing, pool checkout, retries, response
callbacks) costs more than the server's work for our small scripts, so the drivers keep
their own idle connections from redis-py's pool (which still does connecting, TLS, auth
and the hiredis parser), pack commands themselves, and read raw replies. Measured here:
about 2.5x the calls per second of ``Redis.execute_command`` (see bench/).
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Sequence
from typing import Any, TypeVar

import redis
import redis.asyncio
from redis import exceptions as redis_errors
from redis.exceptions import NoScriptError

from ..errors import ServerError, ServerUnavailable
from .operations import Call

T = TypeVar("T")

MAX_CONNECTIONS = 256  # calls in flight at once per async driver

# Error replies that say the whole server is unable to serve for now. redis-py turns some
# into classes of their own and strips the code from the message; others keep it.
_TRANSIENT = ("LOADING", "BUSY", "READONLY", "MASTERDOWN", "TRYAGAIN", "CLUSTERDOWN", "OOM")
_TRANSIENT_CLASSES: dict[type[Exception], str] = {
    redis_errors.BusyLoadingError: "LOADING",
    redis_errors.ReadOnlyError: "READONLY",
    redis_errors.OutOfMemoryError: "OOM",
    redis_errors.MasterDownError: "MASTERDOWN",
    redis_errors.TryAgainError: "TRYAGAIN",
    redis_errors.ClusterDownError: "CLUSTERDOWN",
}


def server_error(exc: Exception, where: str) -> ServerError:
    """Say what went wrong with the server in words a user can act on."""
    code = _TRANSIENT_CLASSES.get(type(exc))  # first: LOADING is a ConnectionError too
    if code is None and isinstance(exc, redis.ConnectionError | redis.TimeoutError | OSError):
        return ServerUnavailable(f"cannot reach the Redis server at {where}: {exc}")
    text = f"{code} {exc}" if code else str(exc)
    if text.startswith("OOM"):
        return ServerUnavailable(
            f"the Redis server at {where} is out of memory (maxmemory reached): {text}"
        )
    if text.startswith(_TRANSIENT):
        return ServerUnavailable(f"the Redis server at {where} cannot serve now: {text}")
    return ServerError(f"the Redis server at {where} refused the command: {text}")


def pack(calls: Sequence[Call[Any]]) -> bytes:
    """The RESP bytes of ``calls``, in order (one write for a whole batch)."""
    parts: list[bytes] = []
    for call in calls:
        if call.script is None:
            args: Sequence[Any] = call.args
        else:
            args = ("EVALSHA", call.script.sha, len(call.keys), *call.keys, *call.args)
        parts.append(b"*%d\r\n" % len(args))
        for arg in args:
            if isinstance(arg, str):
                data = arg.encode("utf-8", "surrogateescape")
            elif isinstance(arg, bytes):
                data = arg
            else:
                data = str(arg).encode()
            parts += (b"$%d\r\n" % len(data), data, b"\r\n")
    return b"".join(parts)


def _load(call: Call[Any]) -> Call[Any]:
    assert call.script is not None
    return Call((), ("SCRIPT", "LOAD", call.script.source), lambda reply: reply)


def _settle(calls: Sequence[Call[Any]], replies: list[Any], where: str) -> list[Any]:
    """Parse each reply; a failed call's place holds its ServerError."""
    return [
        server_error(reply, where) if isinstance(reply, Exception) else call.parse(reply)
        for call, reply in zip(calls, replies, strict=True)
    ]


class SyncDriver:
    """Sends calls over blocking connections (safe to share between threads)."""

    def __init__(self, client: redis.Redis, where: str) -> None:
        self.client = client
        self.where = where
        self._idle: deque[Any] = deque()  # append/pop are atomic: no lock needed
        self._pid = os.getpid()

    def run(self, call: Call[T]) -> T:
        reply = self._exchange([call])[0]
        if isinstance(reply, NoScriptError):
            self._exchange([_load(call)])
            reply = self._exchange([call])[0]
        if isinstance(reply, Exception):
            raise server_error(reply, self.where) from reply
        return call.parse(reply)

    def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Send calls in one round trip; a failed call's place holds its ServerError."""
        replies = self._exchange(calls)
        for i, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                self._exchange([_load(calls[i])])
                replies[i] = self._exchange([calls[i]])[0]
        return _settle(calls, replies, self.where)

    def _exchange(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Write the calls, read one reply each (error replies come back as exceptions)."""
        if os.getpid() != self._pid:  # a forked child must not share our sockets
            self._idle.clear()
            self._pid = os.getpid()
        packed = pack(calls)
        pool = self.client.connection_pool
        try:
            conn = self._idle.pop()
            reused = True
        except IndexError:
            try:
                conn, reused = pool.get_connection(), False
            except (redis.RedisError, OSError) as exc:
                raise server_error(exc, self.where) from exc
        try:
            try:
                conn.send_packed_command([packed], check_health=False)
            except (redis.ConnectionError, OSError):
                if not reused:
                    raise
                conn.disconnect()  # a stale idle connection (server restart): once more
                conn.send_packed_command([packed], check_health=False)
            replies = []
            for _ in calls:
                try:
                    replies.append(conn.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
        except (redis.RedisError, OSError) as exc:
            conn.disconnect()
            pool.release(conn)
            raise server_error(exc, self.where) from exc
        self._idle.append(conn)
        return replies

    def close(self) -> None:
        while self._idle:
            self._idle.pop().disconnect()
        self.client.close()


class AsyncDriver:
    """Sends calls over asyncio connections of one event loop.

    At most ``max_connections`` calls are in flight at once; more wait their turn (so a
    ``gather`` of thousands of enqueues does not open thousands of connections).
    """

    def __init__(
        self, client: redis.asyncio.Redis, where: str, max_connections: int = MAX_CONNECTIONS
    ) -> None:
        self.client = client
        self.where = where
        self._idle: deque[Any] = deque()
        self._slots = asyncio.Semaphore(max_connections)

    async def run(self, call: Call[T]) -> T:
        reply = (await self._exchange([call]))[0]
        if isinstance(reply, NoScriptError):
            await self._exchange([_load(call)])
            reply = (await self._exchange([call]))[0]
        if isinstance(reply, Exception):
            raise server_error(reply, self.where) from reply
        return call.parse(reply)

    async def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Send calls in one round trip; a failed call's place holds its ServerError."""
        replies = await self._exchange(calls)
        for i, reply in enumerate(replies):
            if isinstance(reply, NoScriptError):
                await self._exchange([_load(calls[i])])
                replies[i] = (await self._exchange([calls[i]]))[0]
        return _settle(calls, replies, self.where)

    async def _exchange(self, calls: Sequence[Call[Any]]) -> list[Any]:
        async with self._slots:
            return await self._exchange_now(calls)

    async def _exchange_now(self, calls: Sequence[Call[Any]]) -> list[Any]:
        packed = pack(calls)
        pool = self.client.connection_pool
        try:
            conn = self._idle.pop()
            reused = True
        except IndexError:
            try:
                conn, reused = await pool.get_connection(), False
            except (redis.RedisError, OSError) as exc:
                raise server_error(exc, self.where) from exc
        try:
            try:
                await conn.send_packed_command([packed], check_health=False)
            except (redis.ConnectionError, OSError):
                if not reused:
                    raise
                await conn.disconnect()
                await conn.send_packed_command([packed], check_health=False)
            replies = []
            for _ in calls:
                try:
                    replies.append(await conn.read_response())
                except redis.ResponseError as exc:
                    replies.append(exc)
        except BaseException as exc:
            # Also on cancellation: a half-read reply would poison the connection.
            # nowait: do not wait for the server to close its side (a blocked BLPOP would).
            await conn.disconnect(nowait=True)
            await pool.release(conn)
            if isinstance(exc, redis.RedisError | OSError):
                raise server_error(exc, self.where) from exc
            raise
        self._idle.append(conn)
        return replies

    async def close(self) -> None:
        while self._idle:
            await self._idle.pop().disconnect()
        await self.client.aclose()
