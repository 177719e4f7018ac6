"""Spin, then block: how culex waits for a reply it expects within microseconds.

A server on the same machine answers culex's scripts in some tens of µs, but a thread
that blocks for the answer is woken long after it arrived: on the 2-core VM of
bench/README.md a PING round trip took 70 µs with a blocking read and 22 µs when the
reader polled without blocking. Most of a round trip is the wake-up, not the server.
So a wait first polls without blocking for up to ``busy_poll`` seconds (the spin of an
adaptive mutex; Linux's SO_BUSY_POLL does the same for network cards), then blocks as
before. A wait that keeps outlasting the spin (a server across a network, an idle
runner) stops spinning for a while, so the CPU is not burnt for nothing.
"""

from __future__ import annotations

import asyncio
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any

READ_SIZE = 65536
# A spin that caught its reply restores this many misses' worth of credit; a spin that
# missed costs one. With no credit left, waits block at once, and one in SKIP spins
# again to see whether replies come quickly once more.
CREDIT = 8
SKIP = 64


class Spinner:
    """Whether the next wait should spin first, learnt from how the last spins ended."""

    __slots__ = ("_credit", "_skipped", "limit")

    def __init__(self, limit: float) -> None:
        self.limit = limit
        self._credit = CREDIT
        self._skipped = 0

    def worth_it(self) -> bool:
        if self.limit <= 0:
            return False
        if self._credit > 0:
            return True
        self._skipped += 1
        if self._skipped < SKIP:
            return False
        self._skipped, self._credit = 0, 1
        return True

    def caught(self) -> None:
        self._credit = CREDIT

    def missed(self) -> None:
        self._credit -= 1


def receive(sock: socket.socket, spinner: Spinner) -> bytes:
    """The next bytes from a blocking socket: polled for ``spinner.limit``, then waited for.

    Only for plain sockets without a timeout: a socket with a timeout polls before every
    read (the flag would change nothing) and a TLS socket takes no flags.
    """
    if spinner.worth_it():
        deadline = time.perf_counter() + spinner.limit
        while True:
            try:
                data = sock.recv(READ_SIZE, socket.MSG_DONTWAIT)
            except BlockingIOError:
                if time.perf_counter() < deadline:
                    continue
                spinner.missed()
                break
            spinner.caught()
            return data
    return sock.recv(READ_SIZE)


class SpinningSelector(selectors.DefaultSelector):
    """An event loop's selector that polls for up to ``busy_poll`` before it sleeps, so a
    runner takes a reply to its claim as it arrives instead of a wake-up later."""

    def __init__(self, limit: float) -> None:
        super().__init__()
        self.spinner = Spinner(limit)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, Any]]:
        if (timeout is None or timeout > 0) and self.spinner.worth_it():
            limit = self.spinner.limit if timeout is None else min(timeout, self.spinner.limit)
            deadline = time.perf_counter() + limit
            while True:
                ready = super().select(0)
                if ready:
                    self.spinner.caught()
                    return ready
                if time.perf_counter() >= deadline:
                    break
            if timeout is not None and timeout <= self.spinner.limit:
                return []  # the whole timeout was spun away; nothing to blame the spin for
            self.spinner.missed()
            timeout = None if timeout is None else timeout - limit
        return super().select(timeout)


def loop_factory(busy_poll: float) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """The event loop ``culex run`` makes: one whose selector polls before it sleeps.
    None (the policy's own loop, as ``asyncio.run`` makes it) when polling is off, or when
    the application installed an event loop policy of its own (uvloop, say)."""
    if (
        busy_poll <= 0
        or type(asyncio.get_event_loop_policy()) is not asyncio.DefaultEventLoopPolicy
    ):
        return None
    return lambda: asyncio.SelectorEventLoop(SpinningSelector(busy_poll))
