"""Spin, then block: how culex waits for a reply it expects within microseconds.

A server on the same machine answers culex's scripts in some tens of µs, but a thread
that blocks for the answer is woken long after it arrived: on some of the VMs culex was
measured on, a blocking read made a PING round trip three or four times as long as a
polling one (docs/fast.md). There, most of a round trip is the wake-up, not the server. So a
wait first polls without blocking (the spin of an adaptive mutex; Linux's SO_BUSY_POLL does
the same for network cards), then blocks as before.

How long to spin is learnt per connection, the way Linux's cpuidle-haltpoll governor
(drivers/cpuidle/governors/haltpoll.c) and KVM's ``halt_poll_ns`` learn how long a
halted CPU polls: a wait that ended soon after its spin (within ``busy_poll``) doubles
the next spin, up to ``busy_poll``; a wait longer than ``busy_poll`` (a server across a
network, an idle runner) halves it, so the CPU is not burnt for nothing; a spin that
caught its reply keeps it.
"""

from __future__ import annotations

import asyncio
import select
import selectors
import socket
import time
from collections.abc import Callable
from typing import Any

READ_SIZE = 65536
# The first spin, and the least one after a short wait (haltpoll's grow_start). Halving
# below it turns spinning off until a wait is short again.
GROW_START = 0.00002


class Spinner:
    """How long the next wait should spin, learnt from how long the last waits took."""

    __slots__ = ("cap", "limit")

    def __init__(self, cap: float) -> None:
        self.cap = cap  # ``busy_poll``: the longest spin, and the longest wait that is "short"
        self.limit = min(GROW_START, cap) if cap > 0 else 0.0

    def waited(self, seconds: float) -> None:
        """Learn from one wait that outlasted its spin and took ``seconds`` in all (a spin
        that caught its reply teaches nothing: the next spin keeps its length)."""
        if self.cap <= 0:
            return
        if seconds <= self.cap:  # it came soon after the spin gave up: spin longer
            self.limit = min(max(self.limit * 2, GROW_START), self.cap)
        else:  # a long wait: the spin was wasted
            self.limit = self.limit / 2 if self.limit >= 2 * GROW_START else 0.0


def receive(sock: socket.socket, spinner: Spinner) -> bytes:
    """The next bytes from a blocking socket: polled for ``spinner.limit``, then waited for.

    Only for plain sockets without a timeout: a socket with a timeout polls before every
    read (the flag would change nothing) and a TLS socket takes no flags.
    """
    if spinner.cap <= 0:
        return sock.recv(READ_SIZE)
    start = time.perf_counter()
    if spinner.limit > 0:
        polled = poll_recv(sock, start + spinner.limit)
        if polled is not None:
            return polled
    data = sock.recv(READ_SIZE)
    spinner.waited(time.perf_counter() - start)
    return data


def spin_for_reply(
    loop: asyncio.AbstractEventLoop, poller: select.poll, spinner: Spinner
) -> float | None:
    """Poll a connection for its reply before an awaiting coroutine lets the loop sleep.

    Done only when the loop has nothing else to run (asyncio's own loop says so: its
    ready queue is empty; another loop is never kept), so no other coroutine waits for the
    spin: the loop would block on its selector next anyway, and be woken a wake-up after
    the reply came. Returns 0.0 when the reply is there to read, the start of a spin that
    ran out (for :meth:`Spinner.waited`, once the reply came: a spin learnt to be 0 long is
    timed too, so that short waits make it grow again), or None when it may not spin."""
    if spinner.cap <= 0 or getattr(loop, "_ready", True):
        return None
    start = time.perf_counter()
    deadline = start + spinner.limit  # (a limit of 0, learnt: no spin, but the wait is timed)
    while not poller.poll(0):
        if time.perf_counter() >= deadline:
            return start
    return 0.0


def poll_recv(sock: socket.socket, deadline: float) -> bytes | None:
    """What ``sock`` holds, read without blocking as soon as it comes, polled for until
    ``deadline`` (``time.perf_counter``): its bytes, b"" at its end, or None when nothing
    came by then. A failed read raises (OSError)."""
    while True:
        try:
            return sock.recv(READ_SIZE, socket.MSG_DONTWAIT)
        except BlockingIOError:
            if time.perf_counter() >= deadline:
                return None


class SpinningSelector(selectors.DefaultSelector):
    """An event loop's selector that polls for up to ``busy_poll`` before it sleeps, so a
    runner takes a reply to its claim as it arrives instead of a wake-up later."""

    def __init__(self, limit: float) -> None:
        super().__init__()
        self.spinner = Spinner(limit)

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, Any]]:
        spinner = self.spinner
        if spinner.cap <= 0 or (timeout is not None and timeout <= 0):
            return super().select(timeout)
        start = time.perf_counter()
        if spinner.limit > 0:
            spin = spinner.limit if timeout is None else min(timeout, spinner.limit)
            deadline = start + spin
            while True:
                ready = super().select(0)
                if ready:
                    return ready
                if time.perf_counter() >= deadline:
                    break
            if timeout is not None:
                timeout = max(timeout - spin, 0.0)
        ready = super().select(timeout)
        if ready:  # (a select that timed out waited for a timer, not for a reply)
            spinner.waited(time.perf_counter() - start)
        return ready


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
