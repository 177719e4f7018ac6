"""Spin, then block (culex._redis.spin): the credit rule, the socket read, the selector."""

from __future__ import annotations

import asyncio
import selectors
import socket
import threading
from collections.abc import Iterator

import pytest

import culex
from culex import config
from culex._redis import connection
from culex._redis.spin import CREDIT, SKIP, Spinner, SpinningSelector, loop_factory, receive
from culex._redis.wire import Address, SyncConnection


@pytest.fixture
def pair() -> Iterator[tuple[socket.socket, socket.socket]]:
    a, b = socket.socketpair()
    try:
        yield a, b
    finally:
        a.close()
        b.close()


def test_a_spinner_stops_spinning_after_misses_and_probes_again_later() -> None:
    spinner = Spinner(0.001)
    for _ in range(CREDIT):
        assert spinner.worth_it()
        spinner.missed()
    assert [spinner.worth_it() for _ in range(SKIP - 1)] == [False] * (SKIP - 1)
    assert spinner.worth_it()  # one probe in SKIP
    spinner.caught()  # replies are quick again: full credit
    assert all(spinner.worth_it() for _ in range(3 * SKIP))


def test_a_spinner_without_a_limit_never_spins() -> None:
    assert not Spinner(0.0).worth_it()


def test_receive_takes_what_is_there_and_waits_for_what_is_not(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    spinner = Spinner(0.0001)
    spinner.missed()
    b.sendall(b"+PONG\r\n")
    assert receive(a, spinner) == b"+PONG\r\n"
    assert all(spinner.worth_it() for _ in range(CREDIT))  # the catch restored the credit
    late = threading.Timer(0.05, b.sendall, args=(b"late",))
    late.start()
    assert receive(a, spinner) == b"late"  # past the spin, the read blocks until it comes
    late.join()


def test_the_selector_spins_then_sleeps_and_keeps_timeouts(
    pair: tuple[socket.socket, socket.socket],
) -> None:
    a, b = pair
    selector = SpinningSelector(0.0001)
    try:
        selector.register(a, selectors.EVENT_READ)
        assert selector.select(0.01) == []  # nothing came: the timeout holds
        b.sendall(b"x")
        assert [key.fileobj for key, _ in selector.select(None)] == [a]
        a.recv(1)
        late = threading.Timer(0.05, b.sendall, args=(b"y",))
        late.start()
        assert [key.fileobj for key, _ in selector.select(5)] == [a]
        late.join()
    finally:
        selector.close()


def test_only_plain_blocking_sockets_spin(url: str) -> None:
    address = Address.parse(url)
    for timeout, limit in ((None, 0.0001), (5.0, 0.0)):  # a socket with a timeout polls anyway
        connection = SyncConnection(address, timeout=timeout, busy_poll=0.0001)
        try:
            assert connection._spinner.limit == limit
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
        assert connection.sync_driver().busy_poll == 0.0002  # what enqueue() sends with
        culex.configure(busy_poll=0)
        assert config.settings().busy_poll == 0
        assert connection.sync_driver().busy_poll == 0
        for bad in (-1, 1, "fast"):
            with pytest.raises(culex.ConfigurationError, match="busy_poll"):
                culex.configure(busy_poll=bad)
    finally:
        config.reset()
