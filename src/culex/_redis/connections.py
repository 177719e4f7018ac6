"""Connections to a Redis-protocol server: sockets and RESP replies.

culex sends only a few kinds of commands (its scripts, a blocking wait, some reads), packed
by the calls themselves, so it needs no general client: a socket, hiredis's reply parser
and a handshake. Owning this layer is what makes culex fast and small. redis-py's client
layer cost more per call than the server's work for our scripts, and importing it alone
would add megabytes to every runner (docs/fast.md).

Where a server is and how to log in to it: culex._redis.address.
"""

from __future__ import annotations

import asyncio
import select
import socket
import struct
import time
from collections.abc import Sequence
from typing import Any, cast

import hiredis

from .address import Address
from .spin import READ_SIZE, Spinner, poll_recv, receive, spin_for_reply

# The default of the socket_timeout setting: the longest culex waits for a connection, or
# for a reply beyond the wait a blocking command asks for (docs/guide.md says why 5 s).
SOCKET_TIMEOUT = 5.0


class ReplyError(Exception):
    """An error reply of the server; ``code`` is its first word (NOSCRIPT, OOM, ...)."""

    @property
    def code(self) -> str:
        text = str(self)
        return text.split(" ", 1)[0] if text else ""


class ProtocolError(ConnectionError):
    """The server sent something that is not RESP: the connection is dropped."""


# The query options of a rediss:// URL (redis-py's names; see the module's docstring).
def new_reader() -> hiredis.Reader:
    return hiredis.Reader(replyError=ReplyError, protocolError=ProtocolError)


def _check_handshake(replies: list[Any], address: Address) -> None:
    for reply in replies:
        if isinstance(reply, ReplyError):
            raise ConnectionError(f"the server at {address.shown} refused the login: {reply}")


def late(timeout: float, blocks: float = 0.0, what: str = "answer") -> TimeoutError:
    """The error of a server that did not ``what`` within ``timeout`` (socket_timeout)
    past the ``blocks`` seconds that blocking commands may hold their replies on purpose."""
    if blocks:
        return TimeoutError(
            f"did not {what} within {blocks + timeout:g} s (the commands' own wait of "
            f"{blocks:g} s plus socket_timeout {timeout:g} s)"
        )
    return TimeoutError(f"did not {what} within {timeout:g} s (socket_timeout)")


def _timeval(seconds: float) -> bytes:
    whole = int(seconds)
    return struct.pack("ll", whole, round((seconds - whole) * 1e6))


class SyncConnection:
    """A blocking connection; one exchange at a time, each bounded by ``timeout``
    (socket_timeout) plus what its commands may block on purpose."""

    def __init__(
        self, address: Address, timeout: float = SOCKET_TIMEOUT, busy_poll: float = 0.0
    ) -> None:
        try:
            sock = _connect(address, timeout)
        except TimeoutError:
            raise late(timeout, what="accept a connection") from None
        self._sock = sock
        self._reader = new_reader()
        self.timeout = timeout
        self._bound = 0.0  # the bound on each read and write now set on the socket
        # A TLS socket keeps Python's timeout (it takes no flags, so it never spins); a
        # plain one blocks with the kernel's timeouts instead (SO_RCVTIMEO, SO_SNDTIMEO, as
        # hiredis does), so that a wait may poll first (culex._redis.spin) and a bounded
        # read costs no more system calls than an unbounded one.
        self._tls = address.tls
        if not self._tls:
            sock.settimeout(None)
        self._spinner = Spinner(0.0 if self._tls else busy_poll)
        commands = address.handshake()
        if commands:
            try:
                _check_handshake(self.exchange(hiredis_pack(commands), len(commands)), address)
            except BaseException:
                self.close()
                raise

    def exchange(self, packed: bytes, count: int, blocks: float = 0.0) -> list[Any]:
        """Send ``packed`` and read ``count`` replies (error replies as ReplyError). Raises
        TimeoutError when the server is silent for ``blocks`` + ``timeout`` seconds; the
        connection must then be closed (a reply may be half read)."""
        bound = self.timeout + blocks
        if bound != self._bound:
            self._limit(bound)
        try:
            self._sock.sendall(packed)
            replies: list[Any] = []
            reader = self._reader
            while len(replies) < count:
                reply = reader.gets()
                if reply is False:
                    data = receive(self._sock, self._spinner)
                    if not data:
                        raise ConnectionError("the server closed the connection")
                    reader.feed(data)
                else:
                    replies.append(reply)
        except (BlockingIOError, TimeoutError):  # the kernel's timeout, or Python's (TLS)
            raise late(self.timeout, blocks) from None
        return replies

    def _limit(self, seconds: float) -> None:
        if self._tls:
            self._sock.settimeout(seconds)
        else:
            value = _timeval(seconds)
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, value)
            self._sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, value)
        self._bound = seconds

    def close(self) -> None:
        self._sock.close()


def _connect(address: Address, timeout: float) -> socket.socket:
    if address.path is not None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(address.path)
        except BaseException:
            sock.close()
            raise
        return sock
    sock = socket.create_connection((address.host, address.port), timeout)
    sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
    if address.tls:
        sock = address.tls_context().wrap_socket(sock, server_hostname=address.host)
    return sock


class _Protocol(asyncio.Protocol):
    """Feeds what arrives to the parser and hands the replies to the waiting exchange."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.reader = new_reader()
        self.waiter: asyncio.Future[list[Any]] | None = None
        self.count = 0
        self.replies: list[Any] = []
        self.lost: Exception | None = None
        # The exchange in flight must be answered by ``deadline`` (loop time). One timer
        # serves many exchanges: it is moved only when it would fire too late, and when it
        # fires early it looks again at the deadline then. So most exchanges set a number
        # and touch no timer (a timer made and cancelled per exchange costs a sizeable share
        # of an exchange's own Python: docs/fast.md).
        self.deadline = 0.0
        self.timeout = 0.0
        self.blocks = 0.0
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (uvloop's transports are not subclasses of asyncio.Transport, but are ones)
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self.reader.feed(data)
        waiter = self.waiter
        if waiter is None:
            return
        try:
            while len(self.replies) < self.count:
                reply = self.reader.gets()
                if reply is False:
                    return
                self.replies.append(reply)
        except ProtocolError as exc:
            self._fail(exc)
            return
        self.waiter = None
        if not waiter.done():
            waiter.set_result(self.replies)

    def connection_lost(self, exc: Exception | None) -> None:
        self._fail(exc or ConnectionError("the server closed the connection"))

    def _fail(self, exc: Exception) -> None:
        self.lost = exc if isinstance(exc, OSError) else ConnectionError(str(exc))
        waiter, self.waiter = self.waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_exception(self.lost)
        if self.transport is not None:
            # abort, not close: close would wait to send what is still buffered, to a
            # server that may never read it (a stopped one), and the socket stays open
            self.transport.abort()

    def watch(self, loop: asyncio.AbstractEventLoop, timeout: float, blocks: float) -> None:
        """Drop the connection if the exchange just sent is not answered in time."""
        self.timeout, self.blocks = timeout, blocks
        self.deadline = deadline = loop.time() + timeout + blocks
        timer = self.timer
        if timer is None or timer.when() > deadline:
            if timer is not None:
                timer.cancel()
            self.timer = loop.call_at(deadline, self._look, loop)

    def _look(self, loop: asyncio.AbstractEventLoop) -> None:
        self.timer = None
        if self.waiter is None:  # nothing in flight: no timer until the next exchange
            return
        if loop.time() < self.deadline:  # a later exchange's deadline: look again then
            self.timer = loop.call_at(self.deadline, self._look, loop)
            return
        self._fail(late(self.timeout, self.blocks))


class AsyncConnection:
    """An asyncio connection; one exchange at a time, each bounded by ``timeout``
    (socket_timeout) plus what its commands may block on purpose."""

    def __init__(self, protocol: _Protocol, timeout: float, busy_poll: float = 0.0) -> None:
        self._protocol = protocol
        self.timeout = timeout
        # With ``busy_poll``, a wait for a reply polls first while the loop has nothing
        # else to run (culex._redis.spin.spin_for_reply).
        self._spinner: Spinner | None = None
        self._poller: select.poll | None = None
        self.raw: socket.socket | None = None  # (set below: then send_now may send)
        transport = protocol.transport
        sock = transport.get_extra_info("socket") if transport is not None else None
        if busy_poll > 0 and sock is not None:
            self._spinner = Spinner(busy_poll)
            self._poller = select.poll()
            self._poller.register(sock.fileno(), select.POLLIN)
            # The plain socket of asyncio's own transport (not TLS's): a reply a spin saw
            # come is read from it at once, instead of at the loop's next turn.
            raw = getattr(transport, "_sock", None)
            tls = transport is not None and transport.get_extra_info("sslcontext")
            if isinstance(raw, socket.socket) and not tls:
                self.raw = raw

    @classmethod
    async def open(
        cls, address: Address, timeout: float = SOCKET_TIMEOUT, busy_poll: float = 0.0
    ) -> AsyncConnection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(timeout):
                if address.path is not None:
                    _, protocol = await loop.create_unix_connection(_Protocol, address.path)
                else:
                    ssl = address.tls_context() if address.tls else None
                    _, protocol = await loop.create_connection(
                        _Protocol, address.host, address.port, ssl=ssl
                    )
                    transport = protocol.transport
                    sock = transport.get_extra_info("socket") if transport else None
                    if sock is not None:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE, 1)
        except TimeoutError:
            raise late(timeout, what="accept a connection") from None
        connection = cls(protocol, timeout, busy_poll)
        commands = address.handshake()
        if commands:
            try:
                replies = await connection.exchange(hiredis_pack(commands), len(commands))
                _check_handshake(replies, address)
            except BaseException:
                connection.close()
                raise
        return connection

    async def exchange(self, packed: bytes, count: int, blocks: float = 0.0) -> list[Any]:
        """Send ``packed`` and read ``count`` replies. Raises TimeoutError when the server is
        silent for ``blocks`` + ``timeout`` seconds. A failed or cancelled exchange closes
        the connection (a half-read reply would poison the next)."""
        protocol = self._protocol
        if protocol.lost is not None or protocol.transport is None:
            raise ConnectionError("the connection is closed")
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()
        protocol.waiter, protocol.count, protocol.replies = waiter, count, []
        protocol.transport.write(packed)
        protocol.watch(loop, self.timeout, blocks)
        spinner = self._spinner
        spun = None
        if spinner is not None and not blocks:
            assert self._poller is not None
            spun = spin_for_reply(loop, self._poller, spinner)
            if spun == 0.0 and self.raw is not None:  # it came: read it now
                self._read_now(self.raw)
        try:
            replies: list[Any] = await waiter
        except BaseException:
            self.close()
            raise
        if spun and spinner is not None:  # (a spin that ran out: learn how long it took)
            spinner.waited(time.perf_counter() - spun)
        return replies

    def send_now(
        self, packed: bytes, count: int, loop: asyncio.AbstractEventLoop
    ) -> list[Any] | asyncio.Future[list[Any]] | None:
        """The exchange without a turn of the loop, for a connection with nothing in flight:
        ``packed`` written on the socket at once, the reply polled for (as ``busy_poll``
        allows) and read as it comes. The replies when all came within the spin; else a
        future of them, the exchange going on as :meth:`exchange`'s would (the future fails
        with the connection, or when the server is silent for ``timeout`` s; whoever awaits
        it closes the connection on a failure or a cancellation). None, nothing sent, when
        there is no plain socket or no spin (TLS, ``busy_poll`` 0), the loop has callbacks
        to run, the transport holds unsent bytes, or the write failed (then the connection
        is no longer :attr:`usable`)."""
        raw, spinner, protocol = self.raw, self._spinner, self._protocol
        transport = protocol.transport
        if (
            raw is None
            or spinner is None
            or transport is None
            or protocol.lost is not None
            or getattr(loop, "_ready", True)
            or transport.get_write_buffer_size()
        ):
            return None
        try:
            sent = raw.send(packed)
        except BlockingIOError:  # (the socket's buffer is full: the transport's way, then)
            return None
        except OSError as exc:  # (nothing of it went: the connection is done for)
            protocol._fail(exc)
            return None
        if sent < len(packed):  # (the rest goes as the transport can)
            transport.write(packed[sent:])
        replies: list[Any] = []
        reader = protocol.reader
        start = time.perf_counter()
        deadline = start + spinner.limit
        try:
            while (data := poll_recv(raw, deadline)) is not None and data:
                reader.feed(data)
                while len(replies) < count and (reply := reader.gets()) is not False:
                    replies.append(reply)
                if len(replies) == count:
                    return replies
        except OSError as exc:  # (a failed read: the transport meets it at its next one)
            if isinstance(exc, ProtocolError):  # (a reply that is not RESP: the connection ends)
                protocol._fail(exc)
        waiter = loop.create_future()
        if protocol.lost is not None:
            waiter.set_exception(protocol.lost)
            return waiter
        protocol.waiter, protocol.count, protocol.replies = waiter, count, replies
        protocol.watch(loop, self.timeout, 0.0)
        waiter.add_done_callback(lambda _: spinner.waited(time.perf_counter() - start))
        return waiter

    def _read_now(self, raw: socket.socket) -> None:
        """Hand what the socket holds to the protocol now, so the waiting exchange is
        answered without a turn of the loop. The transport reads the socket only when its
        selector says so, and takes a read that finds nothing (this one took it) in its
        stride; anything else (the end, an error) is left for the transport to meet."""
        try:
            data = raw.recv(READ_SIZE, socket.MSG_DONTWAIT)
        except OSError:
            return
        if data:
            self._protocol.data_received(data)

    @property
    def usable(self) -> bool:
        return self._protocol.lost is None

    def close(self) -> None:
        # abort, not close: a TLS transport's close first waits for the server's answer to
        # its close_notify, and a loop that ends meanwhile (asyncio.run, right after a
        # driver's close) leaves the socket open for the collector to warn about. Nothing
        # is in flight on a connection being closed, so nothing is lost.
        if self._protocol.transport is not None:
            self._protocol.transport.abort()
        self._protocol.lost = self._protocol.lost or ConnectionError("closed")


def hiredis_pack(commands: Sequence[tuple[Any, ...]]) -> bytes:
    """RESP for plain commands (str, bytes, int and float words)."""
    return b"".join(hiredis.pack_command(command) for command in commands)
