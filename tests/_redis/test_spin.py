"""Spin, then block (culex._redis.spin): how long to spin, the socket read, the selector."""

from __future__ import annotations

import asyncio
import select
import selectors
import socket
import struct
import threading
from collections.abc import Iterator

import pytest

import culex
from culex import config
from culex._redis.address import Address
from culex._redis.calls import Call
from culex._redis.coalescing import AsyncCoalescer, SyncCoalescer
from culex._redis.connections import SyncConnection
from culex._redis.drivers import AsyncDriver, SyncDriver
from culex._redis.spin import (
    GROW_START,
    Spinner,
    SpinningSelector,
    loop_factory,
    receive,
    spin_for_reply,
)
from culex.server import configured


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_a_spinner_learns_how_long_to_spin_from_how_long_the_waits_took() -> None:
    spinner = Spinner(0.0002)
    assert spinner.limit == GROW_START
    grown = []
    for _ in range(5):  # replies come soon after each spin gives up: spin longer
        spinner.waited(0.0001)
        grown.append(spinner.limit)
    assert grown == pytest.approx([2 * GROW_START, 4 * GROW_START, 8 * GROW_START, 0.0002, 0.0002])
    shrunk = []
    for _ in range(4):  # long waits (an idle runner, a distant server): spin less, then not
        spinner.waited(0.05)
        shrunk.append(spinner.limit)
    assert shrunk == pytest.approx([0.0001, 0.00005, 0.000025, 0.0])
    spinner.waited(0.05)
    assert spinner.limit == 0.0
    spinner.waited(0.00015)  # a short wait again: spin from the start
    assert spinner.limit == GROW_START


def test_a_spinner_without_a_cap_never_spins() -> None:
    spinner = Spinner(0.0)
    spinner.waited(0.0)
    assert spinner.limit == 0.0


def test_receive_takes_what_is_there_and_waits_for_what_is_not(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    spinner = Spinner(0.5)
    b.sendall(b"+PONG\r\n")
    assert receive(a, spinner) == b"+PONG\r\n"
    assert spinner.limit == GROW_START  # caught by the spin: nothing to learn
    late = threading.Timer(0.05, b.sendall, args=(b"late",))
    late.start()
    assert receive(a, spinner) == b"late"  # past the spin, the read blocks until it comes
    late.join()
    assert spinner.limit == 2 * GROW_START  # it came within the cap: spin longer next time
    b.sendall(b"+OK\r\n")
    assert receive(a, spinner) == b"+OK\r\n"
    assert spinner.limit == 2 * GROW_START  # caught by the spin: it keeps its length
    spinner.cap = 0.01
    late = threading.Timer(0.05, b.sendall, args=(b"later",))
    late.start()
    assert receive(a, spinner) == b"later"
    late.join()
    assert spinner.limit == GROW_START  # longer than the cap: spin less


def test_the_selector_spins_then_sleeps_keeps_timeouts_and_learns(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    selector = SpinningSelector(0.5)
    try:
        selector.register(a, selectors.EVENT_READ)
        assert selector.select(0.01) == []  # nothing came: the timeout holds
        assert selector.spinner.limit == GROW_START  # a timer's wait teaches nothing
        b.sendall(b"x")
        assert [key.fileobj for key, _ in selector.select(None)] == [a]
        a.recv(1)
        late = threading.Timer(0.05, b.sendall, args=(b"y",))
        late.start()
        assert [key.fileobj for key, _ in selector.select(5)] == [a]
        late.join()
        assert selector.spinner.limit == 2 * GROW_START
    finally:
        selector.close()


def test_a_plain_connection_spins_within_its_timeout(url: str) -> None:
    """The socket stays blocking (a socket with Python's timeout polls before each read,
    which would end the spin at once); the kernel's timeouts bound its reads and writes."""
    connection = SyncConnection(Address.parse(url), timeout=5.0, busy_poll=0.0001)
    try:
        assert connection._spinner.cap == 0.0001
        assert connection._sock.gettimeout() is None
        assert connection.exchange(b"*1\r\n$4\r\nPING\r\n", 1) == [b"PONG"]
        for option in (socket.SO_RCVTIMEO, socket.SO_SNDTIMEO):
            bound = connection._sock.getsockopt(socket.SOL_SOCKET, option, 16)
            assert struct.unpack("ll", bound) == (5, 0)  # a struct timeval: 5 s, 0 µs
    finally:
        connection.close()


def test_culex_run_polls_on_its_own_loop_only_where_it_may() -> None:
    factory = loop_factory(0.0001)
    assert factory is not None
    loop = factory()
    try:
        assert isinstance(loop._selector, SpinningSelector)  # type: ignore[attr-defined]
    finally:
        loop.close()
    assert loop_factory(0) is None  # polling off: the policy's loop, as asyncio.run makes it

    class Custom(asyncio.DefaultEventLoopPolicy):  # an application's own (uvloop's, say)
        pass

    default = asyncio.get_event_loop_policy()
    asyncio.set_event_loop_policy(Custom())
    try:
        assert loop_factory(0.0001) is None
    finally:
        asyncio.set_event_loop_policy(default)


def test_busy_poll_is_a_checked_setting_that_reaches_the_driver(url: str) -> None:
    try:
        culex.configure(busy_poll=0.0002, redis_url=url)
        shared = configured.sync_driver()  # (it coalesces calls: culex._redis.coalescing)
        assert isinstance(shared, SyncCoalescer) and isinstance(shared.driver, SyncDriver)
        assert shared.driver.busy_poll == 0.0002  # what enqueue() sends with
        culex.configure(busy_poll=0)
        assert config.settings().busy_poll == 0
        shared = configured.sync_driver()
        assert isinstance(shared, SyncCoalescer) and isinstance(shared.driver, SyncDriver)
        assert shared.driver.busy_poll == 0
        for bad in (-1, 1, "fast"):
            with pytest.raises(culex.ConfigurationError, match="busy_poll"):
                culex.configure(busy_poll=bad)
    finally:
        config.reset()


async def test_an_async_wait_polls_only_while_the_loop_has_nothing_else_to_run() -> None:
    loop = asyncio.get_running_loop()
    left, right = socket.socketpair()
    poller = select.poll()
    poller.register(left.fileno(), select.POLLIN)
    spinner = Spinner(0.001)
    spinner.limit = 0.001
    try:
        loop.call_soon(lambda: None)  # another callback waits its turn: no spin
        assert spin_for_reply(loop, poller, spinner) is None
        await asyncio.sleep(0)
        started = spin_for_reply(loop, poller, spinner)  # nothing came: it ran out
        assert started is not None and started > 0
        right.send(b"+OK\r\n")
        assert spin_for_reply(loop, poller, spinner) == 0.0  # there to read
        left.recv(100)
        spinner.limit = 0.0  # (learnt that spins do not pay: the wait is still timed)
        started = spin_for_reply(loop, poller, spinner)
        assert started is not None and started > 0
        assert spin_for_reply(loop, poller, Spinner(0.0)) is None  # (busy_poll 0: never)
    finally:
        left.close()
        right.close()


async def test_the_shared_async_driver_polls_and_reads_each_reply_once(url: str) -> None:
    """With busy_poll, a reply a spin saw come is read at once (no turn of the loop); the
    loop's own read then finds nothing. Every reply still reaches its own call, in step,
    over many calls, with other coroutines running beside (no spin then)."""
    try:
        culex.configure(busy_poll=0.0005, redis_url=url)
        shared = await configured.async_driver()
        assert isinstance(shared, AsyncCoalescer) and isinstance(shared.driver, AsyncDriver)
        assert shared.driver.busy_poll == 0.0005
        words = [f"w{n}" for n in range(300)]
        assert [await shared.run(echo(word)) for word in words] == words  # one at a time
        results = await asyncio.gather(*(shared.run(echo(word)) for word in words))
        assert results == words  # many at once
    finally:
        config.reset()


def echo(word: str) -> Call[str]:
    return Call((), ("ECHO", word), lambda reply: reply.decode())
