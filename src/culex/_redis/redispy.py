"""Drivers through redis-py: Sentinel, Cluster, and (by choice) a single server.

culex writes no Sentinel or Cluster client of its own (docs/design.md#the-server).
redis-py finds the master through the sentinels, keeps the cluster's slot map and its
connections to each node;
these drivers borrow one of its connections for each batch and send culex's calls on it,
reading the raw replies (redis-py's reply callbacks would reshape them), so every call is
parsed by its own parser, as with culex's own driver.

What these drivers add to redis-py's clients (one connection per node for a batch, only
what did not run sent again, NOSCRIPT answered with the source) is told, and kept, in
redispy_routing.py; here are the exchanges, blocking and asyncio.

The module imports redis-py only when one of its drivers is made: the default install does
not need it (``pip install culex[redis-py]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ServerError, ServerUnavailable
from .address import Address
from .calls import Call
from .connections import SOCKET_TIMEOUT, late
from .drivers import (
    MAX_CONNECTIONS,
    AsyncDriverProtocol,
    SyncDriverProtocol,
    parsed,
    server_error,
    settled,
)
from .redispy_routing import Batch, Client, Lost, Send, Unreached, redis_py, reply_error

T = TypeVar("T")

# What redis-py's sentinel connection raises when its master has been demoted.
_DEMOTED = "now a slave"


class _RedisPyDriver:
    """What the two redis-py drivers share: the address and redis-py's client.

    ``options``: more keyword arguments for redis-py's client (a ``credential_provider``,
    say); they win over those culex derives from the URL. ``retry_for``: how long calls
    that did not run are tried again (default: ``socket_timeout``; a runner, whose loops
    pause and try again by themselves, takes 0: one try again after the slot map is read)."""

    asynchronous = False

    def __init__(
        self,
        url: str,
        socket_timeout: float = SOCKET_TIMEOUT,
        options: Mapping[str, Any] | None = None,
        retry_for: float | None = None,
    ) -> None:
        self.address = Address.parse(url)
        self.where = self.address.shown
        self.socket_timeout = socket_timeout
        self.retry_for = socket_timeout if retry_for is None else retry_for
        self._client = Client(
            self.address, socket_timeout, options or {}, asynchronous=self.asynchronous
        )
        self.cluster = self._client.cluster


class RedisPySyncDriver(_RedisPyDriver):
    """A blocking driver through redis-py (Sentinel, Cluster, or one server)."""

    def run(self, call: Call[T]) -> T:
        return _parsed(call, self._replies([call])[0], self.where)

    def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        return _settled(calls, self._replies(calls), self.where)

    def _replies(self, calls: Sequence[Call[Any]]) -> list[Any]:
        batch = Batch(calls, time.monotonic() + self.retry_for)
        redis = redis_py()
        while True:
            if batch.stale:
                batch.stale = False
                if self.cluster:  # (no node may answer yet: the next try says so)
                    unread = (redis.exceptions.RedisError, redis.exceptions.RedisClusterException)
                    with contextlib.suppress(*unread):
                        self._client.client.nodes_manager.initialize()
            try:
                sends = batch.sends(self._client.node_of, self._client.node_at)
            except redis.exceptions.RedisError as exc:  # no node serves a slot (yet)
                raise server_error(ConnectionError(str(exc)), self.where) from exc
            self._exchanges(sends, batch)
            if batch.settle():
                return batch.replies
            time.sleep(batch.wait())

    def _exchanges(self, sends: list[Send], batch: Batch) -> None:
        """Write every node's part of the batch, then read each: the nodes work at once."""
        written: list[tuple[Send, Any, Any]] = []
        try:
            for send in sends:
                opened = self._write(send, batch)
                if opened is not None:
                    written.append((send, *opened))
            while written:
                send, pool, conn = written.pop(0)
                self._read(send, batch, pool, conn)  # (gives the connection back, whatever)
        finally:
            for _, pool, conn in written:  # left unread by an error: out of step, dropped
                conn.disconnect()
                pool.release(conn)

    def _write(self, send: Send, batch: Batch) -> tuple[Any, Any] | None:
        """Send one node's calls; its pool and connection (None: the node was not reached)."""
        redis = redis_py()
        client = self._client.client
        if send.node is not None:
            client = client.get_redis_connection(send.node)
        pool = client.connection_pool
        try:  # (a pool may connect here: a sentinel's asks for the master first)
            conn = pool.get_connection()
            conn.connect()
        except redis.exceptions.TimeoutError as exc:  # (a hung node: as culex's own driver)
            raise server_error(late(self.socket_timeout), self.where) from exc
        except redis.exceptions.ConnectionError as exc:
            _refused_login(exc, self.where)
            batch.unreached(send, exc)
            return None
        try:
            conn.send_packed_command(conn.pack_commands(send.words))
        except redis.exceptions.ConnectionError as exc:  # (an idle one the server dropped)
            conn.disconnect()
            pool.release(conn)
            batch.unreached(send, exc)  # the write failed: sent again on a new connection
            return None
        return pool, conn

    def _read(self, send: Send, batch: Batch, pool: Any, conn: Any) -> None:
        """Read one node's replies (its connection goes back to its pool)."""
        redis = redis_py()
        replies: list[Any] = []
        try:
            timeout = self.socket_timeout + send.blocks
            for _ in send.words:
                try:
                    replies.append(conn.read_response(timeout=timeout))
                except redis.exceptions.ConnectionError:
                    raise
                except redis.exceptions.ResponseError as exc:
                    replies.append(reply_error(exc))
        except redis.exceptions.RedisError as exc:
            conn.disconnect()
            if _DEMOTED in str(exc):
                batch.unreached(send, exc)
            else:
                batch.lost(send, _lost(exc, self.where, self.socket_timeout, send.blocks))
            return
        finally:
            pool.release(conn)
        batch.keep(send, replies)

    def close(self) -> None:
        self._client.client.close()
        for sentinel in self._client.sentinels:
            sentinel.close()


class RedisPyAsyncDriver(_RedisPyDriver):
    """An asyncio driver through redis-py (Sentinel, Cluster, or one server)."""

    asynchronous = True

    def __init__(
        self,
        url: str,
        socket_timeout: float = SOCKET_TIMEOUT,
        options: Mapping[str, Any] | None = None,
        retry_for: float | None = None,
    ) -> None:
        super().__init__(url, socket_timeout, options, retry_for)
        self._ready = False  # a cluster client reads its slot map first
        self._slots = asyncio.Semaphore(MAX_CONNECTIONS)  # batches in flight (as AsyncDriver)

    async def run(self, call: Call[T]) -> T:
        async with self._slots:
            return _parsed(call, (await self._replies([call]))[0], self.where)

    async def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        async with self._slots:
            return _settled(calls, await self._replies(calls), self.where)

    async def _replies(self, calls: Sequence[Call[Any]]) -> list[Any]:
        batch = Batch(calls, time.monotonic() + self.retry_for)
        redis = redis_py()
        while True:
            if self.cluster and (batch.stale or not self._ready):
                batch.stale = False
                await self._read_slot_map()
            try:
                sends = batch.sends(self._client.node_of, self._client.node_at)
            except redis.exceptions.RedisError as exc:  # no node serves a slot (yet)
                raise server_error(ConnectionError(str(exc)), self.where) from exc
            if len(sends) == 1:
                await self._exchange(sends[0], batch)
            else:  # one exchange per node, at once
                outcomes = await asyncio.gather(
                    *(self._exchange(send, batch) for send in sends), return_exceptions=True
                )
                for outcome in outcomes:
                    if isinstance(outcome, BaseException):
                        raise outcome
            if batch.settle():
                return batch.replies
            await asyncio.sleep(batch.wait())

    async def _read_slot_map(self) -> None:
        redis = redis_py()
        try:
            if self._ready:
                await self._client.client.nodes_manager.initialize()
            else:
                await self._client.client.initialize()
                self._ready = True
        except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
            if not self._ready:
                raise server_error(ConnectionError(str(exc)), self.where) from exc
            # else: no node answers yet; the next try says so

    async def _exchange(self, send: Send, batch: Batch) -> None:
        redis = redis_py()
        pool = self._client.client.connection_pool if send.node is None else None
        conn = None
        try:  # (a pool may connect here: a sentinel's asks for the master first)
            conn = await pool.get_connection() if pool else send.node.acquire_connection()
            await conn.connect()
            if pool is None:  # (a pool checks its connections itself)
                await _fresh(conn)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as exc:
            if conn is not None:
                await self._release(send, pool, conn)
            if isinstance(exc, redis.exceptions.TimeoutError):  # (a hung node)
                raise server_error(late(self.socket_timeout), self.where) from exc
            _refused_login(exc, self.where)
            batch.unreached(send, exc)
            return
        try:
            await conn.send_packed_command(conn.pack_commands(send.words))
        except redis.exceptions.ConnectionError as exc:  # (an idle one the server dropped)
            await conn.disconnect()
            await self._release(send, pool, conn)
            batch.unreached(send, exc)  # the write failed: sent again on a new connection
            return
        replies: list[Any] = []
        try:
            # One deadline for the replies, ours: redis-py's asyncio read given a timeout
            # answers None when it passes, as if that were a reply.
            async with asyncio.timeout(self.socket_timeout + send.blocks):
                for _ in send.words:
                    try:
                        replies.append(await conn.read_response(timeout=math.inf))
                    except redis.exceptions.ConnectionError:
                        raise
                    except redis.exceptions.ResponseError as exc:
                        replies.append(reply_error(exc))
        except redis.exceptions.RedisError as exc:
            await conn.disconnect()
            if _DEMOTED in str(exc):
                batch.unreached(send, exc)
            else:
                batch.lost(send, _lost(exc, self.where, self.socket_timeout, send.blocks))
            return
        except TimeoutError as exc:
            await conn.disconnect()
            batch.lost(send, _lost(exc, self.where, self.socket_timeout, send.blocks))
            return
        except BaseException:  # cancelled mid-exchange: the connection is out of step
            await asyncio.shield(conn.disconnect())
            raise
        finally:
            await self._release(send, pool, conn)
        batch.keep(send, replies)

    @staticmethod
    async def _release(send: Send, pool: Any, conn: Any) -> None:
        if pool is not None:
            await pool.release(conn)
        else:
            send.node.release(conn)

    async def close(self) -> None:
        await self._client.client.aclose()
        self._ready = False  # (a cluster client closed must be initialized again to be used)
        for sentinel in self._client.sentinels:
            await sentinel.aclose()


async def _fresh(conn: Any) -> None:
    """A cluster node's idle connection that its server closed (the node restarted, or
    dropped idle clients) is made again before anything is written on it: a closed one
    would fail at the read, as a batch lost after its write, which is never sent again.
    (The blocking client's pools check a connection so when they hand it out.)"""
    try:
        stale = await conn.can_read()  # (nothing should be left to read on an idle one)
    except (OSError, redis_py().exceptions.ConnectionError):
        stale = True
    if stale:
        await conn.disconnect()
        await conn.connect()


def _parsed(call: Call[T], reply: Any, where: str) -> T:
    if isinstance(reply, Lost):
        raise reply.error
    return parsed(call, reply, where)


def _settled(calls: Sequence[Call[Any]], replies: list[Any], where: str) -> list[Any]:
    """Each call's value, or its ServerError in its place; unless no call reached a node,
    or every connection was lost: then that raises, as for a single server (a node out of
    reach, or lost, leaves ServerUnavailable in its calls' places only)."""
    if replies and all(isinstance(reply, Unreached) for reply in replies):
        raise server_error(replies[0], where)
    if replies and all(isinstance(reply, Unreached | Lost) for reply in replies):
        raise next(reply.error for reply in replies if isinstance(reply, Lost))
    values = settled(calls, replies, where)
    return [r.error if isinstance(r, Lost) else v for r, v in zip(replies, values, strict=True)]


def _refused_login(exc: Exception, where: str) -> None:
    """A login the server refused is not a node out of reach: say so at once."""
    if isinstance(exc, redis_py().exceptions.AuthenticationError):
        raise ServerUnavailable(f"the Redis server at {where} refused the login: {exc}") from exc


def _lost(exc: Exception, where: str, timeout: float, blocks: float) -> ServerError:
    """A connection lost (or too slow: past ``timeout`` plus what the calls ``blocks``)
    after a batch was written: never sent again."""
    if isinstance(exc, TimeoutError | redis_py().exceptions.TimeoutError):
        error = server_error(late(timeout, blocks), where)
    else:
        error = server_error(ConnectionError(str(exc)), where)
    error.__cause__ = exc
    return error


if TYPE_CHECKING:  # mypy checks that these drivers implement what culex needs of one

    def _conforms(
        sync: RedisPySyncDriver, asynchronous: RedisPyAsyncDriver
    ) -> tuple[SyncDriverProtocol, AsyncDriverProtocol]:
        return sync, asynchronous
