"""The claim loop: claims as many tasks as the runner has free slots, then waits for work.

It wakes on a per-queue signal, not by polling, with a claim pipelined behind the
blocking wait, so that an idle runner takes a new task in the round trip that wakes it.
On one server a single wait covers every queue; on a cluster, where one command may only
name keys of one slot, there is one wait per queue, all in flight at once (each holds a
connection to its queue's node). A queue whose keys the server refuses is skipped with a
back-off of its own.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from .. import config
from .._redis import claims, commands
from .._redis.calls import Call
from .._redis.claims import Claimed, ClaimReply
from .._redis.drivers import AsyncDriverProtocol
from .._redis.keys import QueueKeys, queue_keys
from ..errors import ServerError, ServerUnavailable
from ..jobs.limits import QueueLimits
from . import queue_order
from .backoff import SERVER_ERROR, Backoff
from .outage import Outage
from .queue_skips import QueueSkips
from .slots import Slots
from .wrapping import tell_buried

logger = logging.getLogger("culex")

PROMOTE_LIMIT = 1000  # due scheduled tasks promoted per claim

# What the outage is told failed (on a cluster, claims are told per queue).
CLAIMING, WAITING = "claiming tasks", "waiting for work"

SHORT_SLEEP = 0.005  # a task due sooner than this is waited for without a blocking call
# The loop's timers wake up to 1 ms late (epoll takes whole ms): a wait for a due task
# ends this much early on the loop's timer, and the rest is slept precisely.
TIMER_GRAIN = 0.001
# A stopping runner waits this long at most for its blocking wait to end (idle_wait, plus
# the server's timer grain); past it, the wait is cut, and a task its claim took comes back
# when the lease ends.
SETTLE_LIMIT = 1.0


class Claimer:
    """Claims tasks of ``queues`` into the runner's free slots until ``stopping`` is set.

    The queues are asked in turns (culex.runner.queue_order): in rotation, in their
    order (``strict_queues``), or by their ``weights``. It is given the runner's
    ``slots`` (it counts the free ones, and waits for one to free), and ``start``, which
    starts one claimed task in a slot. While ``claiming`` is clear (a quiet runner) it
    claims nothing, and a blocking wait carries no claim behind it. ``allowance``, when
    given, says how many more tasks the runner may take in all (None: no limit).
    """

    def __init__(
        self,
        settings: config.Settings,
        driver: AsyncDriverProtocol,
        queues: Iterable[str],
        *,
        limits: Mapping[str, QueueLimits] | None = None,
        weights: Mapping[str, int] | None = None,
        start: Callable[[Claimed], None],
        slots: Slots,
        stopping: asyncio.Event,
        reports_landed: asyncio.Event | None = None,
        claiming: asyncio.Event | None = None,
        allowance: Callable[[], int | None] | None = None,
        outage: Outage | None = None,
    ) -> None:
        self.settings = settings
        self.outage = outage or Outage()  # (told what fails for want of the server)
        self.driver = driver
        self.keys = [queue_keys(settings.prefix, q) for q in queues]
        self.queue_of = {keys.signal: keys.name for keys in self.keys}  # by signal key
        self.order = queue_order.choose(self.keys, weights or {}, settings.strict_queues)
        # What each queue's job classes declare (culex.limit's changes are read by the claim).
        self.limit_args = {
            keys.name: (limits or {}).get(keys.name, QueueLimits()).claim_args()
            for keys in self.keys
        }
        self.start = start
        self.slots = slots
        self.stopping = stopping
        # Clear while the reporter holds outcomes the server could not take (out of memory,
        # out of reach): no task is claimed then, so none piles up behind them.
        self.reports_landed = reports_landed
        # Clear while the runner is quiet (SIGTSTP): it claims nothing until it is set again.
        self.claiming = claiming
        # How many more tasks the runner may take in all (None: no limit): a recycled
        # runner's (culex.runner.supervised) claims no task past its limit.
        self.allowance = allowance
        self.backoff = Backoff(*SERVER_ERROR)
        self.reserved = 0  # slots held for a claim pipelined behind the blocking wait
        # The blocking waits for a signal in flight, by the signal keys each waits on.
        self.waiters: dict[tuple[str, ...], asyncio.Future[list[Any]]] = {}
        self._stopped: asyncio.Future[Any] | None = None  # done once a stop is asked
        self.skips = QueueSkips(driver.cluster)  # queues refused or held back, for now
        self._telling: set[asyncio.Future[None]] = set()  # on_dead of tasks claims buried

    async def run(self) -> None:
        """Claim and wait, in turns, until a stop is asked."""
        signals = [k.signal for k in self.keys]
        # One wait over every queue, or one per queue where keys are spread over slots.
        groups: list[tuple[str, ...]] = (
            [(s,) for s in signals] if self.driver.cluster else [tuple(signals)]
        )
        plan = self.order.plan
        while not self.stopping.is_set():
            if self.claiming is not None and not self.claiming.is_set():
                await self._until(self.claiming.wait())
                continue
            if self.reports_landed is not None and not self.reports_landed.is_set():
                await self._until(self.reports_landed.wait())
                continue
            free = self.free()
            if free <= 0:
                self.slots.freed.clear()
                await self._until(self.slots.freed.wait())
                continue
            order, shares = plan(free)
            claimed, due_in, filled = await self._claim(order, shares)
            if claimed:
                await asyncio.sleep(0)  # the tasks just started run before the next claim
            # No queue gave all that was asked of it: every queue was emptied, so claiming
            # again at once would only cost a round trip. A task enqueued since leaves a
            # wake-up token. (A queue that gave all it was asked may hold more: the next
            # turn asks it again.)
            if not filled and not self.stopping.is_set():
                await self._wait_for_work(groups, order[0], due_in)

    def free(self) -> int:
        """Slots for more tasks: neither running nor held for a claim behind the wait, and
        no more than the runner's allowance lets it take."""
        free = self.slots.free()
        left = None if self.allowance is None else self.allowance()
        return (free if left is None else min(free, left)) - self.reserved

    async def settle(self) -> None:
        """On stop, let a wait in flight end (at idle_wait) rather than close its
        connection: the claim behind it may have taken a task, which then runs or is
        handed back with the others instead of waiting out its lease."""
        waiting = [waiter for waiter in self.waiters.values() if not waiter.done()]
        if waiting:
            await asyncio.wait(waiting, timeout=SETTLE_LIMIT)
        await asyncio.gather(*self._telling)  # (on_dead told of what the claims buried)

    async def close(self) -> None:
        """Cut what still waits: the blocking waits, and the wait for a stop."""
        for future in (*self.waiters.values(), self._stopped):
            if future is not None:
                future.cancel()
                await asyncio.gather(future, return_exceptions=True)

    async def _claim(
        self, order: list[QueueKeys], shares: Sequence[int]
    ) -> tuple[int, float | None, bool]:
        """Ask each queue of ``order`` once, for its share of the free slots plus what the
        queues before it left; returns how many were claimed, when the next task is due
        (s), and whether some queue gave all that was asked of it."""
        due_in: float | None = None
        total = wanted = 0
        filled = False
        now = time.monotonic()
        for i, keys in enumerate(order):
            if i < len(shares):
                wanted += shares[i]
            ask = wanted - total
            if ask <= 0:  # the shares never grow along the order: none is left to ask
                break
            if self.skips.skipped(keys.name, now):
                continue
            try:
                reply = await self.driver.run(self._claim_call(keys, ask))
            except ServerUnavailable as exc:
                if self.driver.cluster:  # one node out of reach: the others' queues go on
                    self._sick(keys.name, exc)
                    continue
                self.outage.failed(CLAIMING, exc)
                return 0, self.backoff.failed(), False
            except ServerError as exc:
                self._sick(keys.name, exc)
                continue
            self.backoff.failures = 0
            due = reply.next_due_in
            if due is not None:
                due_in = due if due_in is None else min(due_in, due)
            self._took(keys.name, reply)
            total += len(reply.tasks)
            filled = filled or len(reply.tasks) >= ask
        return total, due_in, filled

    def _took(self, queue: str, reply: ClaimReply) -> None:
        """A claim of ``queue`` worked: start what it took, tell on_dead of what it buried,
        and pass the queue over while its rate limit holds tasks back."""
        self._healthy(queue)
        self.skips.hold(queue, reply.held_for)
        for claimed in reply.tasks:
            self.start(claimed)
        if reply.dead:
            _tell_dead(self._telling, queue, reply.dead)

    def _claim_call(self, keys: QueueKeys, limit: int) -> Call[ClaimReply]:
        return claims.claim(
            keys,
            limit=limit,
            lease_ms=self.settings.lease_ms,
            promote_limit=PROMOTE_LIMIT,
            dead_ttl_ms=self.settings.failed_job_ttl_ms,
            events=self.settings.events,
            **self.limit_args[keys.name],
        )

    def _sick(self, queue: str, exc: ServerError) -> None:
        """A queue whose keys the server refuses (or, on a cluster, whose node is out of
        reach: told to the outage) is skipped with back-off, never deleted."""
        pause = self.skips.sick(queue, _unreached(exc))
        if _unreached(exc):
            self.outage.failed(f"claiming from {queue}", exc)
        else:
            logger.error("queue %s is unhealthy (%s); trying it again in %.1f s", queue, exc, pause)

    def _healthy(self, queue: str) -> None:
        """A claim of ``queue`` worked."""
        self.skips.healthy(queue)
        if self.outage.failing:
            self.outage.worked(f"claiming from {queue}", CLAIMING)

    async def _wait_for_work(
        self, groups: list[tuple[str, ...]], first: QueueKeys, due_in: float | None
    ) -> None:
        """Block until a queue is signalled, idle_wait passes, or a scheduled task is due.

        A blocking wait stays in flight when a due task (or another queue's wait) wakes the
        runner first, and the next wait takes it up again: no connection is dropped and
        made anew for a timer.
        (The server times blocked clients out only at its hz, every 100 ms at hz 10: too
        coarse for a task due soon, so that timer is ours.)
        """
        deadline = None if due_in is None else time.monotonic() + due_in
        if due_in is not None and due_in <= SHORT_SLEEP:  # sooner than a round trip is worth
            await self._until(asyncio.sleep(max(0.0, due_in - TIMER_GRAIN)))
            _sleep_until(deadline)
            return
        now = time.monotonic()
        for group in groups:
            queues = [self.queue_of[signal] for signal in group]
            if group not in self.waiters and not self.skips.out_of_reach(queues, now):
                self.waiters[group] = self._new_waiter(group, first)
        if self._stopped is None:  # one future for the whole run, not one per wait
            self._stopped = asyncio.ensure_future(self.stopping.wait())
        timeout = None if due_in is None else due_in - TIMER_GRAIN
        back = self.skips.back_in(now)  # (on a cluster: look again when a node may be back)
        if back is not None:
            timeout = back if timeout is None else min(timeout, back)
        await asyncio.wait(
            (*self.waiters.values(), self._stopped), timeout=timeout, return_when="FIRST_COMPLETED"
        )
        if self.stopping.is_set():
            return
        ended = [group for group, waiter in self.waiters.items() if waiter.done()]
        if not ended:
            _sleep_until(deadline)
            return  # a scheduled task is due; the waits go on in the background
        failed: ServerError | None = None
        for group in ended:
            waiter = self.waiters.pop(group)
            exc = waiter.exception() or waiter.result()[0]
            if self.driver.cluster and isinstance(exc, ServerUnavailable):
                for signal in group:  # its node is out of reach: the other queues go on
                    self._sick(self.queue_of[signal], exc)
            elif isinstance(exc, ServerError):
                failed = exc
            elif isinstance(exc, BaseException):
                raise exc
            else:
                self.outage.worked(WAITING)
        if isinstance(failed, ServerUnavailable):
            self.outage.failed(WAITING, failed)
        elif failed is not None:
            logger.warning("%s failed: %s", WAITING, failed)
        if failed is not None:
            await asyncio.sleep(self.backoff.failed())

    def _new_waiter(self, signals: tuple[str, ...], first: QueueKeys) -> asyncio.Future[list[Any]]:
        """The blocking wait, with a claim of one task of ``first`` pipelined behind it.

        The server runs the claim the moment the wait ends (a blocked client's next
        command waits in its buffer), so a task enqueued for an idle runner is claimed
        without a second round trip. The claim's slot is reserved while the wait is in
        flight, and only when two are free: a due task may need one meanwhile. (On a
        cluster, only the wait on ``first``'s own signal carries it: one slot.)
        """
        calls: list[Call[Any]] = [commands.wait_signal(signals, self.settings.idle_wait)]
        held = self.skips.held.get(first.name, 0.0) > time.monotonic()
        if self.reports_landed is not None and not self.reports_landed.is_set():
            held = True
        if self.claiming is not None and not self.claiming.is_set():
            held = True
        sick = first.name in self.skips.unhealthy
        if self.free() < 2 or sick or held or first.signal not in signals:
            return asyncio.ensure_future(self.driver.run_many(calls))
        calls.append(self._claim_call(first, 1))
        self.reserved += 1
        return asyncio.ensure_future(self._wait_and_claim(calls, first.name))

    async def _wait_and_claim(self, calls: list[Call[Any]], queue: str) -> list[Any]:
        """Start what the claim behind the wait took as soon as its reply is in: in the
        step of the loop that reads it, not in a done callback one step later."""
        try:
            replies = await self.driver.run_many(calls)
        finally:
            self.reserved -= 1
            self.slots.freed.set()
        reply = replies[1]
        if isinstance(reply, ServerUnavailable):
            self.outage.failed(f"claiming from {queue}" if self.driver.cluster else CLAIMING, reply)
        elif isinstance(reply, ServerError):
            self._sick(queue, reply)
        else:
            self._took(queue, reply)
        return replies

    async def _until(self, awaitable: Any) -> None:
        """Await ``awaitable``, but give up on it as soon as a stop is asked."""
        work = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self.stopping.wait())
        await asyncio.wait((work, stop), return_when=asyncio.FIRST_COMPLETED)
        for future in (work, stop):
            if not future.done():
                future.cancel()
        await asyncio.gather(work, stop, return_exceptions=True)


def _tell_dead(
    telling: set[asyncio.Future[None]], queue: str, dead: Iterable[tuple[str, str, str]]
) -> None:
    """The middleware's on_dead for each task a claim buried (culex.runner.wrapping), on a
    task of its own, kept in ``telling``: the claim loop goes on meanwhile."""
    told = tell_buried(queue, [(task_id, why) for task_id, _, why in dead])
    telling.add(task := asyncio.ensure_future(told))
    task.add_done_callback(telling.discard)


def _unreached(exc: ServerError) -> bool:
    return isinstance(exc, ServerUnavailable)


def _sleep_until(deadline: float | None) -> None:
    """Block for what is left to ``deadline`` when that is under a millisecond: the only
    way to be on time to the sub-ms; it holds the loop at most TIMER_GRAIN."""
    if deadline is None:
        return
    rest = deadline - time.monotonic()
    if 0 < rest <= TIMER_GRAIN:
        time.sleep(rest)
