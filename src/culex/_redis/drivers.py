"""The two drivers that send a :class:`~culex._redis.calls.Call`: sync and async.

They differ only in how they wait for the server; what is sent and how the reply is read
is decided by the call itself. Each keeps its idle connections (culex._redis.connections) and
sends a batch of calls in one write, reading one reply per call.
"""

from __future__ import annotations

import asyncio
import os
from collections import deque
from collections.abc import Coroutine, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, runtime_checkable

import hiredis

from ..errors import ServerError, ServerUnavailable
from .address import Address
from .calls import Call
from .connections import SOCKET_TIMEOUT, AsyncConnection, ReplyError, SyncConnection
from .reloading import again, merge, no_script

T = TypeVar("T")

MAX_CONNECTIONS = 256  # calls in flight at once per async driver

# Error replies that say the whole server is unable to serve for now.
# (MOVED and ASK too: a cluster whose slots are in transit, as culex's cluster driver gets
# them when the slots have not settled in time.)
_TRANSIENT = (
    "LOADING",
    "BUSY",
    "READONLY",
    "MASTERDOWN",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "MOVED",
    "ASK",
)


def server_error(exc: BaseException, where: str) -> ServerError:
    """Say what went wrong with the server in words a user can act on."""
    if isinstance(exc, TimeoutError):  # (connections.late says how long it waited, and why)
        return ServerUnavailable(f"the Redis server at {where} {exc}; the connection was dropped")
    if isinstance(exc, OSError):  # refused, reset, closed
        return ServerUnavailable(f"cannot reach the Redis server at {where}: {exc}")
    text = str(exc)
    if text.startswith("OOM"):  # server-wide too: a runner pauses, as for the others
        return ServerUnavailable(
            f"the Redis server at {where} is out of memory (maxmemory reached): {text}"
        )
    if text.startswith(_TRANSIENT):
        return ServerUnavailable(f"the Redis server at {where} cannot serve now: {text}")
    return ServerError(f"the Redis server at {where} refused the command: {text}")


class Pending(Generic[T]):
    """A call sent whose reply is still to come: ``await pending.wait`` for its value."""

    __slots__ = ("wait",)

    def __init__(self, wait: Coroutine[Any, Any, T]) -> None:
        self.wait = wait


def blocks(calls: Sequence[Call[Any]]) -> float:
    """How long the server may hold the replies to ``calls`` on purpose (their blocking
    commands' own waits, one after another)."""
    return calls[0].blocks if len(calls) == 1 else sum(call.blocks for call in calls)


def _words(call: Call[Any]) -> tuple[Any, ...]:
    if call.script is None:
        return tuple(call.args)
    return ("EVALSHA", call.script.sha, len(call.keys), *call.keys, *call.args)


def pack(calls: Sequence[Call[Any]]) -> bytes:
    """The RESP bytes of ``calls``, in order (one write for a whole batch)."""
    parts: list[bytes] = []
    for call in calls:
        words = _words(call)
        try:
            parts.append(hiredis.pack_command(words))
        except UnicodeEncodeError:  # an id read back with surrogateescape: its raw bytes
            parts.append(_pack_slowly(words))
    return b"".join(parts)


def _pack_slowly(words: Sequence[Any]) -> bytes:
    parts = [b"*%d\r\n" % len(words)]
    for word in words:
        if isinstance(word, str):
            data = word.encode("utf-8", "surrogateescape")
        elif isinstance(word, bytes):
            data = word
        else:
            data = str(word).encode()
        parts += (b"$%d\r\n" % len(data), data, b"\r\n")
    return b"".join(parts)


# What both drivers do around their exchange, described once: send the calls; if the
# server lost scripts (a restart, SCRIPT FLUSH: NOSCRIPT replies), send ``again(...)`` and
# ``merge`` its replies (reloading.py); then ``parsed`` (one call) or ``settled`` (a
# batch). Each driver only supplies ``_exchange``, the write of a batch and the read of
# its replies.


def parsed(call: Call[T], reply: Any, where: str) -> T:
    """The value of one call's reply; a refused call raises its ServerError."""
    if isinstance(reply, ReplyError):
        raise server_error(reply, where) from reply
    return call.parse(reply)


def settled(calls: Sequence[Call[Any]], replies: list[Any], where: str) -> list[Any]:
    """Parse each reply; a failed call's place holds its ServerError."""
    return [
        server_error(reply, where) if isinstance(reply, ReplyError) else call.parse(reply)
        for call, reply in zip(calls, replies, strict=True)
    ]


class SyncDriver:
    """Sends calls over blocking connections (safe to share between threads).

    ``busy_poll``: the longest a wait for a reply polls before it blocks (culex._redis.spin).
    ``socket_timeout``: the longest a connection or a reply may take (past a blocking
    command's own wait); then the connection is dropped and ServerUnavailable raised.
    """

    cluster = False

    def __init__(
        self, url: str, busy_poll: float = 0.0, socket_timeout: float = SOCKET_TIMEOUT
    ) -> None:
        self.address = Address.parse(url)
        self.busy_poll = busy_poll
        self.socket_timeout = socket_timeout
        self.where = self.address.shown  # (error messages never carry the password)
        self._idle: deque[SyncConnection] = deque()  # append/pop are atomic: no lock needed
        self._pid = os.getpid()

    def run(self, call: Call[T]) -> T:
        return parsed(call, self._replies([call])[0], self.where)

    def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Send calls in one round trip; a failed call's place holds its ServerError."""
        return settled(calls, self._replies(calls), self.where)

    def _replies(self, calls: Sequence[Call[Any]]) -> list[Any]:
        replies = self._exchange(calls)
        resend = again(calls, replies)
        return replies if resend is None else merge(calls, replies, self._exchange(resend))

    def _exchange(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Write the calls, read one reply each (error replies come back as ReplyError)."""
        if os.getpid() != self._pid:  # a forked child must not share our sockets
            self._idle.clear()
            self._pid = os.getpid()
        packed = pack(calls)
        waits = blocks(calls)
        try:
            conn = self._idle.pop()
        except IndexError:
            conn = None
        try:
            if conn is not None:
                try:
                    replies = conn.exchange(packed, len(calls), waits)
                except TimeoutError:  # the server may yet run them: no resend
                    raise
                except OSError:  # an idle connection gone stale (a server restart): once more
                    conn.close()
                    conn = None
            if conn is None:
                conn = SyncConnection(self.address, self.socket_timeout, self.busy_poll)
                replies = conn.exchange(packed, len(calls), waits)
        except OSError as exc:
            if conn is not None:
                conn.close()
            raise server_error(exc, self.where) from exc
        except BaseException:
            if conn is not None:
                conn.close()
            raise
        self._idle.append(conn)
        return replies

    def close(self) -> None:
        while self._idle:
            self._idle.pop().close()

    def __del__(self) -> None:
        # A driver dropped with idle connections (a configure() while another thread still
        # had one out, which it then gave back here) closes them rather than leak them.
        self.close()


class AsyncDriver:
    """Sends calls over asyncio connections of one event loop.

    At most ``max_connections`` calls are in flight at once; more wait their turn (so a
    ``gather`` of thousands of enqueues does not open thousands of connections).
    ``socket_timeout`` as for :class:`SyncDriver`; ``busy_poll``: the longest a wait for a
    reply polls before the loop sleeps, while the loop has nothing else to run
    (culex._redis.spin.spin_for_reply).
    """

    cluster = False

    def __init__(
        self,
        url: str,
        max_connections: int = MAX_CONNECTIONS,
        socket_timeout: float = SOCKET_TIMEOUT,
        busy_poll: float = 0.0,
    ) -> None:
        self.address = Address.parse(url)
        self.busy_poll = busy_poll
        self.where = self.address.shown  # (error messages never carry the password)
        self.socket_timeout = socket_timeout
        self._idle: deque[AsyncConnection] = deque()
        self._slots = asyncio.Semaphore(max_connections)

    async def run(self, call: Call[T]) -> T:
        return parsed(call, (await self._replies([call]))[0], self.where)

    def run_now(self, call: Call[T], loop: asyncio.AbstractEventLoop) -> T | Pending[T] | None:
        """``call`` sent and answered without a turn of the loop, on an idle connection
        (AsyncConnection.send_now): its value; a :class:`Pending` to await when the reply
        did not come within the spin; None when it cannot go so (nothing was sent, or the
        server lost the script: the reply refused it): then :meth:`run` does it. A Pending
        holds a slot of ``max_connections`` while its reply is out (taken as it is awaited:
        at once when awaited at once, as the coalescer does, since one was free)."""
        idle = self._idle
        if call.blocks or not idle or self._slots.locked() or getattr(loop, "_ready", True):
            return None  # (a loop with callbacks to run: its own turn comes first)
        if idle[-1].raw is None:  # (no spin, or TLS: not packed for nothing)
            return None
        conn = idle.pop()
        got = conn.send_now(pack([call]), 1, loop)
        if got is None:
            if conn.usable:
                idle.append(conn)
            else:  # (gone stale while idle: run() makes another)
                conn.close()
            return None
        if isinstance(got, asyncio.Future):
            return Pending(self._later(call, conn, got))
        idle.append(conn)
        return None if no_script(got[0]) else parsed(call, got[0], self.where)

    async def _later(
        self, call: Call[T], conn: AsyncConnection, waiter: asyncio.Future[list[Any]]
    ) -> T:
        """The rest of :meth:`run_now`'s exchange, as :meth:`_exchange` ends one."""
        try:
            async with self._slots:  # (a cancellation while it waits for one closes conn too)
                replies = await waiter
        except TimeoutError as exc:  # the server may yet run it: no resend
            conn.close()
            raise server_error(exc, self.where) from exc
        except OSError:  # gone stale while idle (a server restart): once more, outside the
            conn.close()  # slot (run() takes its own)
            return await self.run(call)
        except BaseException:
            conn.close()
            raise
        self._idle.append(conn)
        if no_script(replies[0]):  # (the script was lost: run() loads it and sends again)
            return await self.run(call)
        return parsed(call, replies[0], self.where)

    async def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Send calls in one round trip; a failed call's place holds its ServerError."""
        return settled(calls, await self._replies(calls), self.where)

    async def _replies(self, calls: Sequence[Call[Any]]) -> list[Any]:
        async with self._slots:  # (a reload after NOSCRIPT keeps the slot: one at a time)
            replies = await self._exchange(calls)
            resend = again(calls, replies)
            return (
                replies if resend is None else merge(calls, replies, await self._exchange(resend))
            )

    async def _exchange(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Write the calls, read one reply each (error replies come back as ReplyError)."""
        packed = pack(calls)
        conn = None
        while self._idle:
            conn = self._idle.pop()
            if conn.usable:
                break
            conn = None
        waits = blocks(calls)
        try:
            if conn is not None:
                try:
                    replies = await conn.exchange(packed, len(calls), waits)
                except TimeoutError:  # the server may yet run them: no resend
                    raise
                except OSError:  # gone stale while idle (a server restart): once more
                    conn = None
            if conn is None:
                conn = await AsyncConnection.open(self.address, self.socket_timeout, self.busy_poll)
                replies = await conn.exchange(packed, len(calls), waits)
        except OSError as exc:
            # (exchange closes its connection on any error, cancellation included)
            raise server_error(exc, self.where) from exc
        self._idle.append(conn)
        return replies

    async def close(self) -> None:
        while self._idle:
            self._idle.pop().close()


@runtime_checkable
class SyncDriverProtocol(Protocol):
    """A blocking driver, safe to share between threads.

    ``cluster``: its keys are spread over the slots of a cluster, so no call may name keys
    of two queues (a wait over several queues is one wait per queue). ``where``: the
    server's URL as it may be shown (without its password)."""

    cluster: bool
    where: str

    def run(self, call: Call[T]) -> T:
        """Send one call; its parsed reply. A refused call raises its ServerError, a
        server out of reach ServerUnavailable; no call waits past ``socket_timeout``
        (plus what the call ``blocks`` on purpose)."""
        ...

    def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Send calls in one round trip, run in order; their parsed replies, in order. A
        refused call's place holds its ServerError (the others still ran); a server out of
        reach raises ServerUnavailable (on a cluster, one node out of reach leaves
        ServerUnavailable in the places of its calls)."""
        ...

    def close(self) -> None:
        """Drop the idle connections (the driver may still be used: it opens new ones)."""
        ...


@runtime_checkable
class AsyncDriverProtocol(Protocol):
    """An asyncio driver, bound to the event loop it is first used on; ``cluster`` as for
    :class:`SyncDriverProtocol`."""

    cluster: bool
    where: str

    async def run(self, call: Call[T]) -> T:
        """As :meth:`SyncDriverProtocol.run`."""
        ...

    async def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """As :meth:`SyncDriverProtocol.run_many`."""
        ...

    async def close(self) -> None:
        """As :meth:`SyncDriverProtocol.close`."""
        ...


if TYPE_CHECKING:  # mypy checks that the drivers implement what culex needs of one

    def _conforms(
        sync: SyncDriver, asynchronous: AsyncDriver
    ) -> tuple[SyncDriverProtocol, AsyncDriverProtocol]:
        return sync, asynchronous
