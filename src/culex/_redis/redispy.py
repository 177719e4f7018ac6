"""Drivers through redis-py: Sentinel, Cluster, and (by choice) a single server.

culex writes no Sentinel or Cluster client of its own (docs/design.md#the-server).
redis-py finds the master through the sentinels, keeps the cluster's slot map and its
connections to each node;
these drivers borrow one of its connections for each batch and send culex's calls on it,
reading the raw replies (redis-py's reply callbacks would reshape them), so every call is
parsed by its own parser, as with culex's own driver.

What these drivers add to redis-py's clients, and why:

- **One connection per node for a batch.** Calls are grouped by the node that serves their
  keys (a single server or a sentinel's master: one group) and each group goes out in one
  write, in order. A blocking wait with a claim behind it stays one exchange, and WAIT /
  WAITAOF, which confirm the writes *of their connection*, are sent on the connection of
  each node the batch wrote to; the batch is confirmed only when every node confirmed.
- **Only what did not run is sent again.** A reply that says the call was refused without
  running (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, MASTERDOWN, LOADING, READONLY: a demoted
  master, which redis-py's sentinel connection reports as "now a slave"), or a connection
  that could not be opened, is retried after the slot map is read again, for up to
  ``socket_timeout``; then the caller gets ServerUnavailable (in a batch, in the places of
  those calls only: the others' replies are kept). A connection lost after a batch
  was written is never resent (the server may have run it): ServerUnavailable at once.
- **NOSCRIPT** (a failed-over replica has an empty script cache): the call is sent again as
  EVAL with its source, which also loads it.

The module imports redis-py only when one of its drivers is made: the default install does
not need it (``pip install culex[redis-py]``).
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, TypeVar

from ..errors import ConfigurationError, ServerUnavailable
from .address import Address
from .calls import Call
from .connections import SOCKET_TIMEOUT, ReplyError, late
from .drivers import (
    MAX_CONNECTIONS,
    AsyncDriverProtocol,
    SyncDriverProtocol,
    parsed,
    server_error,
    settled,
)

T = TypeVar("T")

# Error replies that say the call was refused before it ran: safe to send again.
_NOT_RUN = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "LOADING", "READONLY")
# Commands that name no key: sent to the cluster's default node (a primary).
_KEYLESS = frozenset(
    ("PING", "INFO", "CONFIG", "COMMAND", "TIME", "SHUTDOWN", "SCRIPT", "DBSIZE", "FLUSHALL")
)
# Commands that confirm the writes of their own connection (see the module's docstring).
_CONFIRMS = frozenset(("WAIT", "WAITAOF"))
# The pauses between tries of calls that did not run (a failover in progress).
_FIRST_PAUSE, _LONGEST_PAUSE = 0.05, 0.5
# What redis-py's sentinel connection raises when its master has been demoted.
_DEMOTED = "now a slave"


def _redis() -> Any:
    try:
        import redis
    except ImportError:  # pragma: no cover - the test install has it
        raise ConfigurationError(
            "Sentinel, Cluster and driver='redis-py' go through redis-py, which is not "
            "installed: pip install 'culex[redis-py]'"
        ) from None
    return redis


def client_options(address: Address, socket_timeout: float) -> dict[str, Any]:
    """redis-py's keyword arguments for a data node of ``address`` (login, TLS, timeouts)."""
    retry = _redis().retry.Retry(_redis().backoff.NoBackoff(), 0)
    options: dict[str, Any] = {
        # culex decides what is tried again, and for how long (see the module's docstring)
        "retry": retry,
        "username": address.username,
        "password": address.password,
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_timeout,
        "decode_responses": False,
        "encoding_errors": "surrogateescape",  # (an id read back from bad bytes: those bytes)
        "protocol": 2,  # the replies culex's parsers read (redis-py 8 speaks RESP3 by default)
    }
    if address.tls:
        tls = dict(address.tls_options)
        if "ssl_server_hostname" in tls:
            raise ConfigurationError(
                f"{address.shown}: ssl_server_hostname works with culex's own driver only; "
                "redis-py checks the certificate against each node's host"
            )
        options["ssl"] = True
        options["ssl_cert_reqs"] = tls.get("ssl_cert_reqs", "required")
        if not address.tls_verify:
            options["ssl_check_hostname"] = False
        for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
            if name in tls:
                options[name] = tls[name]
    return options


def _words(call: Call[Any], as_source: bool) -> tuple[Any, ...]:
    if call.script is None:
        return _raw(call.args)
    if as_source:
        return ("EVAL", call.script.source, len(call.keys), *_raw(call.keys), *_raw(call.args))
    return ("EVALSHA", call.script.sha, len(call.keys), *_raw(call.keys), *_raw(call.args))


def _raw(words: tuple[Any, ...]) -> tuple[Any, ...]:
    """``words`` as redis-py can send them: a text that holds a surrogate (a queue name or an
    id read back with surrogateescape, whose bytes are not UTF-8) as those bytes; redis-py
    would fail to encode it (culex's own driver packs it so: drivers._pack_slowly)."""
    if all(not isinstance(word, str) or word.isascii() for word in words):
        return words
    return tuple(
        word.encode("utf-8", "surrogateescape") if isinstance(word, str) else word for word in words
    )


def _command(call: Call[Any]) -> str:
    return "" if call.script is not None else str(call.args[0]).upper()


def _key(call: Call[Any]) -> str | None:
    """The key whose slot serves ``call`` (None: it names none)."""
    if call.script is not None:
        return call.keys[0] if call.keys else None
    if _command(call) in _KEYLESS or len(call.args) < 2:
        return None
    key = call.args[1]
    return key.decode("utf-8", "surrogateescape") if isinstance(key, bytes) else str(key)


def _reply_error(exc: Exception) -> ReplyError:
    """redis-py's exception for an error reply, back as the reply it was (code first)."""
    code = getattr(exc, "status_code", None)
    return ReplyError(f"{code} {exc}" if code else str(exc))


class _Unreached(ReplyError, OSError):
    """In the place of a call that was never sent: its node could not be reached. Tried
    again like a refusal (TRYAGAIN); if time runs out first, it reads as "cannot reach"."""

    @property
    def code(self) -> str:
        return "TRYAGAIN"


@dataclass
class _Send:
    """One exchange: calls (by index in the batch) for one node, on one connection."""

    node: Any  # a cluster node, or None: the client's own pool
    indices: list[int] = field(default_factory=list)
    words: list[tuple[Any, ...]] = field(default_factory=list)
    blocks: float = 0.0


class _Batch:
    """The state of one batch across tries: what each call replied, what is left, how to
    send it. Shared by the sync and async drivers, which only do the exchanges."""

    def __init__(self, calls: Sequence[Call[Any]], deadline: float) -> None:
        self.calls = calls
        self.replies: list[Any] = [None] * len(calls)
        self.todo = list(range(len(calls)))
        self.deadline = deadline
        self.as_source: set[int] = set()  # calls to send as EVAL (NOSCRIPT)
        self.asking: dict[int, tuple[str, int]] = {}  # calls to send to an ASK target
        self.pause = _FIRST_PAUSE
        self.stale = False  # the slot map may be out of date: read it before the next try
        self.refused = False  # a call of this try was refused (or not sent): pause first
        self.tries = 0

    def sends(self, node_of: Any, node_at: Any) -> list[_Send]:
        """Group what is left by node. ``node_of(key)``: the node of a key (None for a
        single server or a sentinel's master: one group); ``node_at(host, port)``: the node
        an ASK reply named. A confirming call goes to every node the batch wrote to."""
        groups: dict[Any, _Send] = {}

        def group(node: Any) -> _Send:
            name = None if node is None else node.name
            if name not in groups:
                groups[name] = _Send(node)
            return groups[name]

        for i in self.todo:
            self.replies[i] = None
            call = self.calls[i]
            if _command(call) in _CONFIRMS and groups:
                targets = list(groups.values())
            elif i in self.asking:
                targets = [group(node_at(*self.asking[i]))]
                targets[0].indices.append(-1)
                targets[0].words.append(("ASKING",))
            else:
                targets = [group(node_of(_key(call)))]
            for send in targets:
                send.indices.append(i)
                send.words.append(_words(call, i in self.as_source))
                send.blocks += call.blocks
        return list(groups.values())

    def keep(self, send: _Send, replies: list[Any]) -> None:
        """Keep one exchange's replies; a confirming call sent to several nodes keeps the
        reply that confirms least."""
        for i, reply in zip(send.indices, replies, strict=True):
            if i < 0:  # the ASKING before a call sent to an ASK target
                continue
            held = self.replies[i]
            if held is not None:
                reply = _weakest(self.calls[i], held, reply)
            self.replies[i] = reply

    def unreached(self, send: _Send, exc: BaseException) -> None:
        """Nothing was sent to ``send``'s node: its calls are tried again."""
        for i in send.indices:
            if i >= 0:
                self.replies[i] = _Unreached(str(exc))

    def settle(self) -> bool:
        """Look at the replies: True when nothing is left to send again, or when time is up
        (after one try again at least: a stale slot map is read again first). Then a call
        that was never answered keeps its refusal, which its caller gets as a ServerError
        (ServerUnavailable) in its place: the other calls' replies are kept."""
        again: list[int] = []
        self.asking.clear()
        self.refused = False
        self.tries += 1
        for i in self.todo:
            reply = self.replies[i]
            if not isinstance(reply, ReplyError):
                continue
            if reply.code == "NOSCRIPT":
                self.as_source.add(i)
                again.append(i)
            elif reply.code in _NOT_RUN:
                self.refused = True
                if reply.code == "ASK":
                    self.asking[i] = _ask_target(reply)
                else:
                    self.stale = True
                again.append(i)
        if again and self.tries > 1 and time.monotonic() >= self.deadline:
            return True  # time is up
        if again:  # a write sent again is confirmed again
            confirms = [i for i in self.todo if _command(self.calls[i]) in _CONFIRMS]
            again = sorted({*again, *(i for i in confirms if i > again[0])})
        self.todo = again
        return not again

    def wait(self) -> float:
        """How long to pause before the next try."""
        if not self.refused or self.asking:  # NOSCRIPT, ASK: at once
            return 0.0
        pause, self.pause = self.pause, min(self.pause * 2, _LONGEST_PAUSE)
        return pause


def _ask_target(reply: ReplyError) -> tuple[str, int]:
    host, _, port = str(reply).split(" ")[2].rpartition(":")
    return host, int(port)


def _weakest(call: Call[Any], held: Any, reply: Any) -> Any:
    """Of two nodes' replies to one confirming call, the one that confirms less."""
    for one in (held, reply):
        if isinstance(one, ReplyError) or not call.parse(one):
            return one
    return held


class _Client:
    """redis-py's client for an address, and what both drivers ask of it: which node
    serves a key."""

    def __init__(
        self,
        address: Address,
        socket_timeout: float,
        extra: Mapping[str, Any],
        *,
        asynchronous: bool,
    ) -> None:
        redis = _redis()
        options = {**client_options(address, socket_timeout), **extra}
        module = redis.asyncio if asynchronous else redis
        self.cluster = address.kind == "cluster"
        self.sentinels: list[Any] = []  # clients of the sentinels: closed with the driver
        if address.kind == "cluster":
            cluster = module.cluster
            nodes = [cluster.ClusterNode(host, port) for host, port in address.nodes]
            try:  # (the blocking client reads the slot map here: no node may answer)
                self.client = cluster.RedisCluster(startup_nodes=nodes, **options)
            except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
                raise server_error(ConnectionError(str(exc)), address.shown) from exc
        elif address.kind == "sentinel":
            sentinel_options = {
                "socket_timeout": socket_timeout,
                "socket_connect_timeout": socket_timeout,
                **address.sentinel_login,
            }
            sentinels = module.sentinel.Sentinel(
                list(address.nodes), sentinel_kwargs=sentinel_options, **options
            )
            self.client = sentinels.master_for(address.service, db=address.db)
            self.sentinels = list(sentinels.sentinels)
        elif address.path is not None:
            self.client = module.Redis(unix_socket_path=address.path, db=address.db, **options)
        else:
            self.client = module.Redis(
                host=address.host, port=address.port, db=address.db, **options
            )

    def node_of(self, key: str | None) -> Any:
        """The cluster node that serves ``key`` (a primary; None: no key), or None when
        there is one server."""
        if not self.cluster:
            return None
        if key is None:
            return self.client.get_default_node()
        return self.client.get_node_from_key(key)

    def node_at(self, host: str, port: int) -> Any:
        node = self.client.get_node(host=host, port=port)
        if node is None:  # not in the map yet: read it again
            raise _redis().exceptions.RedisError(f"no node {host}:{port} in the slot map")
        return node


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
        self._client = _Client(
            self.address, socket_timeout, options or {}, asynchronous=self.asynchronous
        )
        self.cluster = self._client.cluster


class RedisPySyncDriver(_RedisPyDriver):
    """A blocking driver through redis-py (Sentinel, Cluster, or one server)."""

    def run(self, call: Call[T]) -> T:
        return parsed(call, self._replies([call])[0], self.where)

    def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        return settled(calls, _reached(self._replies(calls), self.where), self.where)

    def _replies(self, calls: Sequence[Call[Any]]) -> list[Any]:
        batch = _Batch(calls, time.monotonic() + self.retry_for)
        redis = _redis()
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

    def _exchanges(self, sends: list[_Send], batch: _Batch) -> None:
        """Write every node's part of the batch, then read each: the nodes work at once."""
        written: list[tuple[_Send, Any, Any]] = []
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

    def _write(self, send: _Send, batch: _Batch) -> tuple[Any, Any] | None:
        """Send one node's calls; its pool and connection (None: the node was not reached)."""
        redis = _redis()
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

    def _read(self, send: _Send, batch: _Batch, pool: Any, conn: Any) -> None:
        """Read one node's replies (its connection goes back to its pool)."""
        redis = _redis()
        replies: list[Any] = []
        try:
            timeout = self.socket_timeout + send.blocks
            for _ in send.words:
                try:
                    replies.append(conn.read_response(timeout=timeout))
                except redis.exceptions.ConnectionError:
                    raise
                except redis.exceptions.ResponseError as exc:
                    replies.append(_reply_error(exc))
        except redis.exceptions.RedisError as exc:
            conn.disconnect()
            if _DEMOTED in str(exc):
                batch.unreached(send, exc)
                return
            raise _lost(exc, self.where, self.socket_timeout, send.blocks) from exc
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
            return parsed(call, (await self._replies([call]))[0], self.where)

    async def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        async with self._slots:
            return settled(calls, _reached(await self._replies(calls), self.where), self.where)

    async def _replies(self, calls: Sequence[Call[Any]]) -> list[Any]:
        batch = _Batch(calls, time.monotonic() + self.retry_for)
        redis = _redis()
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
        redis = _redis()
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

    async def _exchange(self, send: _Send, batch: _Batch) -> None:
        redis = _redis()
        pool = self._client.client.connection_pool if send.node is None else None
        conn = None
        try:  # (a pool may connect here: a sentinel's asks for the master first)
            conn = await pool.get_connection() if pool else send.node.acquire_connection()
            await conn.connect()
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
                        replies.append(_reply_error(exc))
        except redis.exceptions.RedisError as exc:
            await conn.disconnect()
            if _DEMOTED in str(exc):
                batch.unreached(send, exc)
                return
            raise _lost(exc, self.where, self.socket_timeout, send.blocks) from exc
        except TimeoutError as exc:
            await conn.disconnect()
            raise _lost(exc, self.where, self.socket_timeout, send.blocks) from exc
        except BaseException:  # cancelled mid-exchange: the connection is out of step
            await asyncio.shield(conn.disconnect())
            raise
        finally:
            await self._release(send, pool, conn)
        batch.keep(send, replies)

    @staticmethod
    async def _release(send: _Send, pool: Any, conn: Any) -> None:
        if pool is not None:
            await pool.release(conn)
        else:
            send.node.release(conn)

    async def close(self) -> None:
        await self._client.client.aclose()
        self._ready = False  # (a cluster client closed must be initialized again to be used)
        for sentinel in self._client.sentinels:
            await sentinel.aclose()


def _reached(replies: list[Any], where: str) -> list[Any]:
    """``replies``, unless no call reached a node: then the deployment is out of reach, and
    that raises (a single node out of reach leaves ServerUnavailable in its calls' places)."""
    if replies and all(isinstance(reply, _Unreached) for reply in replies):
        raise server_error(replies[0], where)
    return replies


def _refused_login(exc: Exception, where: str) -> None:
    """A login the server refused is not a node out of reach: say so at once."""
    if isinstance(exc, _redis().exceptions.AuthenticationError):
        raise ServerUnavailable(f"the Redis server at {where} refused the login: {exc}") from exc


def _lost(exc: Exception, where: str, timeout: float, blocks: float) -> Exception:
    """A connection lost (or too slow: past ``timeout`` plus what the calls ``blocks``)
    after a batch was written: never sent again."""
    if isinstance(exc, TimeoutError | _redis().exceptions.TimeoutError):
        return server_error(late(timeout, blocks), where)
    return server_error(ConnectionError(str(exc)), where)


if TYPE_CHECKING:  # mypy checks that these drivers implement what culex needs of one

    def _conforms(
        sync: RedisPySyncDriver, asynchronous: RedisPyAsyncDriver
    ) -> tuple[SyncDriverProtocol, AsyncDriverProtocol]:
        return sync, asynchronous
