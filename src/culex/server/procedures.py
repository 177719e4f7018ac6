"""Procedures: culex's procedures described once, without I/O, and driven sync or async.

A procedure is a generator that yields a :class:`~culex._redis.calls.Call` (send it,
reply with its value) or a list of calls (send them in one round trip, reply with their
values, a refused call's place holding its ServerError); its return value is the
procedure's. :func:`run_sync` and :func:`run_async` drive one, so every procedure gets a
blocking and an asyncio twin from one body. Given an :class:`Outage`, they hold a call the
server cannot serve now and send it again when the outage says so.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Generator
from typing import Any, Literal, Protocol, TypeVar, overload

from .._redis.calls import Call
from .._redis.drivers import AsyncDriverProtocol, SyncDriverProtocol
from ..errors import ServerUnavailable
from . import configured

T = TypeVar("T")
R = TypeVar("R")

Procedure = Generator[Call[Any] | list[Call[Any]], Any, T]
"""An I/O-free procedure whose value is a ``T`` (see the module's docstring)."""


@overload
def one_call(call: Call[T]) -> Procedure[T]: ...
@overload
def one_call(call: Call[R], then: Callable[[R], T]) -> Procedure[T]: ...
def one_call(call: Call[Any], then: Callable[[Any], Any] | None = None) -> Procedure[Any]:
    """The procedure of a single call; its value is the reply, or ``then`` of it. Build the
    call before calling this, so its arguments are checked before any I/O (a generator's
    body runs only once it is driven)."""
    reply = yield call
    return reply if then is None else then(reply)


def raised(replies: list[Any]) -> list[Any]:
    """The replies of one round trip (a list of calls), raising the first a server refused."""
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def together(
    procedures: list[Procedure[Any]], *, refused: Literal["raise", "return"] = "raise"
) -> Procedure[list[Any]]:
    """Procedures that each make one call, sent in one round trip; the value is theirs, in order.
    A call the server refused raises its ServerError, as it would alone; with
    ``refused="return"`` the error is that procedure's value instead, and the others keep theirs."""
    calls: list[Call[Any]] = []
    for procedure in procedures:
        call = next(procedure)
        if not isinstance(call, Call):
            raise TypeError("together() takes procedures that each make a single call")
        calls.append(call)
    replies = yield calls
    values = []
    for procedure, reply in zip(procedures, replies, strict=True):
        if isinstance(reply, Exception):
            if refused == "raise":
                raise reply
            values.append(reply)
            continue
        try:
            procedure.send(reply)
        except StopIteration as done:
            values.append(done.value)
        else:
            raise TypeError("together() takes procedures that each make a single call")
    return values


class Outage(Protocol):
    """How a call is held while the server cannot serve it (ServerUnavailable: out of
    reach, out of memory, loading, ...): the same call is sent again after each pause."""

    def pause(self, error: ServerUnavailable) -> float:
        """The seconds to wait before the call is sent again; raises to give up."""
        ...

    def passed(self) -> None:
        """A call got through (the next outage starts its pauses over)."""
        ...


def run_sync(procedure: Procedure[T], url: str | None = None, outage: Outage | None = None) -> T:
    """Drive a procedure with blocking I/O, on the shared driver of ``url`` (default: the
    configured server); a call refused for an outage is held by ``outage`` (None: raised)."""
    driver: SyncDriverProtocol = configured.sync_driver(url)
    try:
        step = next(procedure)
        while True:
            try:
                reply = driver.run_many(step) if isinstance(step, list) else driver.run(step)
            except ServerUnavailable as exc:
                if outage is None:
                    raise
                time.sleep(outage.pause(exc))  # (then the same call again)
                continue
            if outage is not None:
                outage.passed()
            step = procedure.send(reply)
    except StopIteration as done:
        value: T = done.value
        return value


async def run_async(
    procedure: Procedure[T], url: str | None = None, outage: Outage | None = None
) -> T:
    """Drive a procedure on the running event loop, on its shared driver of ``url``."""
    return await run_on(procedure, await configured.async_driver(url), outage)


async def run_on(
    procedure: Procedure[T], driver: AsyncDriverProtocol, outage: Outage | None = None
) -> T:
    """Drive a procedure on the running event loop, on ``driver`` (a runner's own)."""
    try:
        step = next(procedure)
        while True:
            try:
                if isinstance(step, list):
                    reply = await driver.run_many(step)
                else:
                    reply = await driver.run(step)
            except ServerUnavailable as exc:
                if outage is None:
                    raise
                await asyncio.sleep(outage.pause(exc))
                continue
            if outage is not None:
                outage.passed()
            step = procedure.send(reply)
    except StopIteration as done:
        value: T = done.value
        return value
