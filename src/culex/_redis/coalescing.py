"""Calls made at once, sent together: a driver shared by many producers coalesces them.

While a call is on the wire, the calls other coroutines (or threads) make meanwhile wait
and go out together, in one ``run_many`` of the driver beneath: one write and one round
trip for all of them, each still getting its own reply or its own error. A lone call goes
out at once, as it would without this (no added latency), and a call that blocks on
purpose (a wait for work) is never held with others.

- **Coroutines** (:class:`AsyncCoalescer`): a call made while another is on the wire
  joins the next batch, which is sent at the end of the event loop's current turn
  (``call_soon``): every call the loop's other coroutines make in that turn rides along.
  A coroutine cancelled before its batch was sent is left out of it; one cancelled after
  gets nothing, and the reply meant for it is dropped (the others' replies are theirs).
- **Threads** (:class:`SyncCoalescer`): a thread that finds the driver busy leaves its call
  in a queue and waits its turn; the next thread in carries every call waiting, its own
  among them (flat combining), and hands each reply back. A thread whose call another
  carried only collects its reply.

Each caller's own calls keep their order (a caller sends its next call once the last one
answered), and a failed write fails exactly the calls it carried: those waiting for the
next write are sent on. ioredis calls this auto-pipelining; here it spans threads too.

On a cluster nothing is coalesced: each call goes on its own (the driver beneath sends it
to its node). A batch ends with its slowest node, and a node out of reach (a master that
died, until its replica takes over: seconds) would hold up every call that rode with one
of its calls, whatever queue and node they were for.
"""

from __future__ import annotations

import asyncio
import os
import threading
import weakref
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from typing import Any, TypeVar

from ..errors import ServerError, ServerUnavailable
from .calls import Call
from .drivers import AsyncDriver, AsyncDriverProtocol, Pending, SyncDriverProtocol

T = TypeVar("T")


def _failed(exc: BaseException) -> BaseException:
    """The error a caller gets when the batch that carried its call failed as a whole: an
    instance of its own (one exception raised in many places would share a traceback). An
    interruption of the carrier (KeyboardInterrupt, a cancelled carrier) is the carrier's:
    the others are told their call may or may not have run."""
    if isinstance(exc, ServerError):
        own = type(exc)(*exc.args)
    else:
        own = ServerUnavailable(
            f"the call was sent with others in a write that did not end ({type(exc).__name__}):"
            " it may or may not have run"
        )
    own.__cause__ = exc
    return own


class AsyncCoalescer:
    """An asyncio driver that coalesces the calls its coroutines make at once (see the
    module's docstring); ``driver`` does the sending."""

    __slots__ = ("_next", "_now", "_on_wire", "cluster", "driver", "where")

    def __init__(self, driver: AsyncDriverProtocol) -> None:
        self.driver = driver
        self.cluster = driver.cluster
        self.where = driver.where
        self._on_wire = 0  # calls and batches sent and not yet answered
        self._next: list[tuple[Call[Any], asyncio.Future[Any]]] | None = None
        # (culex's own driver can send a lone call without a turn of the loop, with a spin)
        own = driver if isinstance(driver, AsyncDriver) and driver.busy_poll > 0 else None
        self._now = None if own is None else own.run_now

    def run_now(self, call: Call[T], loop: asyncio.AbstractEventLoop) -> T | Pending[T] | None:
        """A lone call sent without a turn of the loop, when nothing else is on the wire
        (AsyncDriver.run_now: its value, a Pending to await, or None: nothing sent, await
        :meth:`run`). While a Pending's reply is out, calls made meanwhile go together
        after it, as they do behind :meth:`run`'s."""
        if self._now is None or self._on_wire or self._next is not None:
            return None
        got = self._now(call, loop)
        if type(got) is Pending:
            self._on_wire += 1  # (until its reply is in: _counted)
            return Pending(self._counted(got.wait))
        return got

    async def _counted(self, wait: Coroutine[Any, Any, T]) -> T:
        try:
            return await wait
        finally:
            self._on_wire -= 1

    async def run(self, call: Call[T]) -> T:
        if call.blocks or self.cluster:  # (see the module's docstring)
            return await self.driver.run(call)
        if not self._on_wire and self._next is None:  # alone: it goes now
            self._on_wire += 1
            try:
                return await self.driver.run(call)
            finally:
                self._on_wire -= 1
        loop = asyncio.get_running_loop()
        batch = self._next
        if batch is None:
            batch = self._next = []
            loop.call_soon(self._send, loop)
        future: asyncio.Future[T] = loop.create_future()
        batch.append((call, future))
        return await future

    async def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """A batch of the caller's own goes as it is (it is one write already)."""
        self._on_wire += 1
        try:
            return await self.driver.run_many(calls)
        finally:
            self._on_wire -= 1

    def _send(self, loop: asyncio.AbstractEventLoop) -> None:
        batch, self._next = self._next or [], None
        batch = [(call, future) for call, future in batch if not future.done()]
        if batch:
            self._on_wire += 1
            loop.create_task(self._carry(batch))

    async def _carry(self, batch: list[tuple[Call[Any], asyncio.Future[Any]]]) -> None:
        try:
            replies = await self.driver.run_many([call for call, _ in batch])
        except BaseException as exc:  # the write failed: exactly its calls fail
            for _, future in batch:
                if not future.done():
                    future.set_exception(_failed(exc))
            if not isinstance(exc, Exception):
                raise
            return
        finally:
            self._on_wire -= 1
        for (_, future), reply in zip(batch, replies, strict=True):
            if future.done():  # its caller was cancelled meanwhile
                continue
            if isinstance(reply, ServerError):
                future.set_exception(reply)
            else:
                future.set_result(reply)

    async def close(self) -> None:
        await self.driver.close()


def _after_fork(coalescer: weakref.ref[SyncCoalescer]) -> Callable[[], None]:
    def forked() -> None:
        if (alive := coalescer()) is not None:
            alive._forked()

    return forked


class _Waiting:
    """A thread's call, left for the thread that carries the next batch. ``woken`` is
    released when its reply is in, or when its own thread is to carry the next batch."""

    __slots__ = ("call", "carry", "error", "reply", "woken")

    def __init__(self, call: Call[Any]) -> None:
        self.call = call
        self.carry = False
        self.reply: Any = None
        self.error: BaseException | None = None
        self.woken = threading.Lock()  # (acquired as it starts waiting)


class SyncCoalescer:
    """A blocking driver that coalesces the calls its threads make at once (see the
    module's docstring); ``driver`` does the sending."""

    def __init__(self, driver: SyncDriverProtocol) -> None:
        self.driver = driver
        self.cluster = driver.cluster
        self.where = driver.where
        self._forked()
        os.register_at_fork(after_in_child=_after_fork(weakref.ref(self)))

    def _forked(self) -> None:
        """Nothing waiting and no carrier (a forked child starts so: the carrier may be a
        thread that the fork did not copy)."""
        self._mutex = threading.Lock()  # held only to look at or change the two below
        self._waiting: deque[_Waiting] = deque()
        self._carrying = False

    def run(self, call: Call[T]) -> T:
        if call.blocks or self.cluster:  # (see the module's docstring)
            return self.driver.run(call)
        with self._mutex:
            alone = not self._carrying
            if alone:
                self._carrying = True
            else:  # a batch is on the wire: wait for the next one
                waiting = _Waiting(call)
                waiting.woken.acquire()
                self._waiting.append(waiting)
        if alone:  # it goes now, as a call of its own
            try:
                return self.driver.run(call)
            finally:
                self._hand_on()
        waiting.woken.acquire()  # until its reply is in, or its turn to carry
        if waiting.carry:
            self._carry(waiting)
        if waiting.error is not None:
            raise waiting.error
        reply: T = waiting.reply
        return reply

    def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """A batch of the caller's own goes as it is (it is one write already)."""
        return self.driver.run_many(calls)

    def _carry(self, own: _Waiting) -> None:
        """Send ``own`` call and every call waiting, in one batch; then hand the carrying
        on to the first call that came meanwhile, if one did."""
        with self._mutex:
            batch = [own, *self._waiting]
            self._waiting.clear()
        try:
            replies = self.driver.run_many([waiting.call for waiting in batch])
        except BaseException as exc:  # the write failed: exactly its calls fail
            for waiting in batch:
                waiting.error = exc if waiting is own else _failed(exc)
            if not isinstance(exc, Exception):
                raise
        else:
            for waiting, reply in zip(batch, replies, strict=True):
                if isinstance(reply, ServerError):
                    waiting.error = reply
                else:
                    waiting.reply = reply
        finally:
            self._settle(batch[1:])

    def _settle(self, others: list[_Waiting]) -> None:
        """Wake the callers of a batch, and pass the carrying on."""
        for waiting in others:
            waiting.woken.release()
        self._hand_on()

    def _hand_on(self) -> None:
        """The carrying goes to the first call that came meanwhile, if one did."""
        with self._mutex:
            if self._waiting:
                first = self._waiting.popleft()
                first.carry = True
                first.woken.release()
            else:
                self._carrying = False

    def close(self) -> None:
        self.driver.close()
