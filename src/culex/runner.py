"""The runner: takes tasks from queues, runs them, and reports each outcome, fenced.

One asyncio loop holds a claim loop (wakes on a per-queue signal, not by polling), a
reporter (sends finished outcomes in one pipelined round trip) and a reclaimer (turns
expired leases of lost runners into failed attempts). A thread renews the leases of every
held task (culex.lease), so a task that blocks the loop does not lose its lease.

A stop hands back what is still running when the grace period ends. Python cannot end a
thread, so a sync perform still running then would go on beside the run another runner
starts: :meth:`Runner.run` (which owns the process) hands its task back and ends the
process at once; :meth:`Runner.arun` on a loop of the application's own does not hand
such a task back but waits for it (docs/reliability.md, "Graceful stop").
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections import deque
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NoReturn

from . import config, connection, isolation, logs
from ._redis import commands, operations
from ._redis.drivers import AsyncDriverProtocol
from ._redis.keys import QueueKeys, queue_keys
from ._redis.operations import Call, Claimed, ClaimReply
from ._redis.spin import loop_factory
from .errors import ConfigurationError, ServerError, ServerUnavailable
from .execution import Outcome, attempt, decode, task_name
from .job import Job
from .job_registry import JobRegistry, registry
from .lease import LeaseKeeper
from .periodic import Scheduler, periodic_jobs

logger = logging.getLogger("culex")

PROMOTE_LIMIT = 1000  # due scheduled tasks promoted per claim
RECLAIM_LIMIT = 100  # expired leases reclaimed per queue per pass
RECLAIM_EVERY = 2.0  # seconds between reclaim passes (at most; less with a short lease)
RETRY_PAUSE = (0.05, 2.0)  # back-off bounds after a server error
SHORT_SLEEP = 0.005  # a task due sooner than this is waited for without a blocking call
# The loop's timers wake up to 1 ms late (epoll takes whole ms): a wait for a due task
# ends this much early on the loop's timer, and the rest is slept precisely.
TIMER_GRAIN = 0.001
HELPER_STOP_TIMEOUT = 5.0  # seconds a helper loop may take to stop
# A stopping runner waits this long at most for its blocking wait to end (idle_wait, plus
# the server's timer grain); past it, the wait is cut, and a task its claim took comes back
# when the lease ends.
SETTLE_LIMIT = 1.0


class Runner:
    """Runs the tasks of the given queues (default: every registered job's queue)."""

    def __init__(
        self,
        run_from: Iterable[str] | None = None,
        concurrency: int | None = None,
        *,
        redis_url: str | None = None,
        jobs: JobRegistry = registry,
    ) -> None:
        flags: dict[str, object] = {}
        if run_from is not None:
            flags["run_from"] = list(run_from) if not isinstance(run_from, str) else run_from
        if concurrency is not None:
            flags["concurrency"] = concurrency
        if redis_url is not None:
            flags["redis_url"] = redis_url
        self.settings = config.settings(**flags)
        self.jobs = jobs
        self.queues = list(self.settings.run_from) or jobs.queues()
        if not self.queues:
            raise ConfigurationError(
                "nothing to run: no job class is registered and run_from names no queue"
            )
        self._stopping = asyncio.Event()
        self._running: dict[asyncio.Task[None], Claimed] = {}
        self._reports: list[Outcome] = []
        self._report_ready = asyncio.Event()
        self._slot_freed = asyncio.Event()
        self._reserved = 0  # slots held for a claim pipelined behind the blocking wait
        self._driver: AsyncDriverProtocol | None = None
        self._keeper: LeaseKeeper | None = None
        self._pool = _Pool(self.settings.concurrency)
        self._threaded: set[Claimed] = set()  # running tasks whose perform runs in a thread
        self._owns_process = False  # run(), not arun() on an application's loop
        self._signals = 0
        self._waiter: asyncio.Future[list[Any]] | None = None  # the blocking wait for a signal
        self._stopped: asyncio.Future[Any] | None = None  # done once a stop is asked
        self._closing = False  # set once the claim loop and grace period are over
        self._failures = 0
        # Queues whose keys the server refused (e.g. WRONGTYPE): skipped until this time.
        self._unhealthy: dict[str, tuple[float, int]] = {}

    # -- starting and stopping ------------------------------------------------------

    def run(self) -> None:
        """Run until SIGINT/SIGTERM (or :meth:`stop`), then stop gracefully.

        This owns the process: when a sync perform still runs in a thread once the grace
        period is over, its task is handed back and the process ends at once (exit code
        0, the log written out, no exit handlers), so that it never runs beside another
        runner's run of the task; run() does not return then.

        The loop's selector polls briefly before it sleeps (``busy_poll``,
        culex._redis.spin), unless an event loop policy of the application's own is set.
        """
        self._owns_process = True
        with asyncio.Runner(loop_factory=loop_factory(self.settings.busy_poll)) as runner:
            runner.run(self.arun(handle_signals=True))
        if self._pool.busy:  # e.g. a perform that timed out and runs on in its thread
            logger.warning(
                "%d sync perform(s) still run in threads; ending the process rather than "
                "waiting for them",
                self._pool.busy,
            )
            _exit_now(0)

    def stop(self) -> None:
        """Ask the runner to stop: no more claims; running tasks finish or go back."""
        self._stopping.set()

    async def arun(self, *, handle_signals: bool = False) -> None:
        """Run on the current event loop until :meth:`stop` is called.

        It never ends the process: a task whose sync perform still runs in a thread when
        the grace period is over is not handed back; arun() waits for it to end."""
        loop = asyncio.get_running_loop()
        if handle_signals:
            for sig in (signal.SIGINT, signal.SIGTERM):
                loop.add_signal_handler(sig, self._on_signal, sig)
        url = connection.resolve_url(self.settings.redis_url)
        self._driver = connection.new_async_driver(url, socket_timeout=self.settings.socket_timeout)
        try:
            await self._check_server()
        except BaseException:
            await self._driver.close()
            raise
        self._keeper = LeaseKeeper(self.settings, url)
        self._keeper.start()
        logger.info("culex is buzzing...")
        logger.info("Queues: %s", ", ".join(self.queues))
        helpers = [
            asyncio.create_task(self._report_loop(), name="culex-reporter"),
            asyncio.create_task(self._reclaim_loop(), name="culex-reclaim"),
        ]
        periodic = periodic_jobs(self.jobs, self.queues)
        if self.settings.run_cron_scheduler and periodic:
            schedule = Scheduler(periodic, self.settings, self._driver).run(self._stopping)
            helpers.append(asyncio.create_task(schedule, name="culex-periodic"))
        try:
            await self._claim_loop()
            await self._settle_waiter()
            await self._finish()
        finally:
            for future in (self._waiter, self._stopped):
                if future is not None:
                    future.cancel()
                    await asyncio.gather(future, return_exceptions=True)
            self._stopping.set()
            self._closing = True
            self._report_ready.set()
            await self._stop_helpers(helpers)
            self._keeper.stop()
            await self._driver.close()
            self._pool.shutdown(wait=False, cancel_futures=True)
            if handle_signals:
                for sig in (signal.SIGINT, signal.SIGTERM):
                    loop.remove_signal_handler(sig)
            logger.info("culex stopped")

    async def _stop_helpers(self, helpers: list[asyncio.Task[Any]]) -> None:
        """Stop the helper loops. Each also ends on its own once stopping is set, so a
        cancellation lost inside a client library cannot keep the runner from exiting."""
        for helper in helpers:
            helper.cancel()
        _, stuck = await asyncio.wait(helpers, timeout=HELPER_STOP_TIMEOUT)
        for helper in stuck:
            logger.warning("%s did not stop in time; leaving it", helper.get_name())
        for helper in helpers:
            if helper.done() and not helper.cancelled() and helper.exception() is not None:
                logger.error("%s failed", helper.get_name(), exc_info=helper.exception())

    async def _check_server(self) -> None:
        """Refuse a server that may evict keys: eviction silently deletes queue state."""
        assert self._driver is not None
        try:
            reply = await self._driver.run(commands.config_get("maxmemory-policy"))
        except ServerUnavailable:
            raise
        except ServerError as exc:  # CONFIG is often disabled on managed servers
            logger.warning("cannot read maxmemory-policy (%s); make sure it is noeviction", exc)
            return
        if reply in (None, "noeviction"):
            return
        message = (
            f"the server's maxmemory-policy is {reply!r}: it may evict queue keys and lose "
            "tasks. Set it to noeviction (CONFIG SET maxmemory-policy noeviction)"
        )
        if not self.settings.allow_eviction:
            raise ConfigurationError(f"{message}, or set allow_eviction=True to run anyway")
        logger.warning("DANGER: %s; running anyway because allow_eviction is set", message)

    def _on_signal(self, sig: int) -> None:
        self._signals += 1
        if self._signals == 1:
            logger.info(
                "%s: stopping; running tasks have %.0f s to finish (signal again to stop at once)",
                signal.Signals(sig).name,
                self.settings.grace_period,
            )
            self.stop()
        else:
            logger.warning("stopping at once; running tasks come back when their lease ends")
            isolation.kill()
            _exit_now(1)

    async def _finish(self) -> None:
        """Graceful stop: wait up to grace_period, then hand unfinished tasks back.

        No task is handed back while its perform still runs in this process: a child
        process is killed first; a thread cannot be, so run() ends the process just after
        the hand-back, and arun() keeps such a task and waits for it instead."""
        if self._running:
            _, unfinished = await asyncio.wait(
                list(self._running), timeout=self.settings.grace_period
            )
            held = {task: self._running[task] for task in unfinished}
            isolation.kill(claimed.id for claimed in held.values())
            threads = [task for task, claimed in held.items() if claimed in self._threaded]
            for task in threads if not self._owns_process else ():
                logger.warning(
                    "task %s runs on in a thread after the grace period; a thread cannot be "
                    "stopped, so it is not handed back: waiting for it to end",
                    task_name(held.pop(task)),
                )
            for task in held:
                task.cancel()
            if threads and self._owns_process:
                await self._flush_reports()
                await self._release_and_exit(list(held.values()))
            if held:
                await self._release(list(held.values()))
            if threads:
                await asyncio.wait(threads)
        await self._flush_reports()

    async def _release_and_exit(self, held: list[Claimed]) -> NoReturn:
        """Hand ``held`` back and end the process at once, with the threads that still run
        their performs: nothing of this process runs them once another runner can."""
        logger.warning(
            "the grace period is over; handing back to waiting %s, and ending the process "
            "with the threads that still run them",
            ", ".join(task_name(claimed) for claimed in held),
        )
        logs.flush_all()  # before the hand-back: from then on, not a moment is lost
        calls = [self._call_release(claimed) for claimed in held]
        results = await self._run_many(calls, "handing tasks back")
        failed = [claimed for claimed, done in zip(held, results, strict=True) if done is not True]
        for claimed in failed:
            logger.warning(
                "task %s could not be handed back: it comes back when its lease ends",
                task_name(claimed),
            )
        _exit_now(0)

    async def _release(self, held: list[Claimed]) -> None:
        calls = [self._call_release(claimed) for claimed in held]
        handed = await self._run_many(calls, "handing tasks back")
        for claimed, result in zip(held, handed, strict=True):
            if result is True:
                logger.info("task %s handed back to waiting", task_name(claimed))
            self._drop(claimed)

    def _call_release(self, claimed: Claimed) -> Call[bool]:
        return operations.release(self._keys(claimed.queue), claimed.id, claimed.attempt)

    # -- claiming -----------------------------------------------------------------------

    async def _claim_loop(self) -> None:
        keys = [queue_keys(self.settings.prefix, q) for q in self.queues]
        signals = [k.signal for k in keys]
        turn = 0
        while not self._stopping.is_set():
            free = self._free()
            if free <= 0:
                self._slot_freed.clear()
                await self._until(self._slot_freed.wait())
                continue
            # Rotate the first queue asked, so one busy queue cannot starve the others.
            order = keys[turn:] + keys[:turn]
            turn = (turn + 1) % len(keys)
            claimed, due_in = await self._claim(order, free)
            if claimed:
                await asyncio.sleep(0)  # the tasks just started run before the next claim
            # Fewer than asked: every queue was emptied, so claiming again at once would
            # only cost a round trip. A task enqueued since leaves a wake-up token.
            if claimed < free and not self._stopping.is_set():
                await self._wait_for_work(signals, order[0], due_in)

    def _free(self) -> int:
        """Slots for more tasks: neither running nor held for a claim behind the wait."""
        return self.settings.concurrency - len(self._running) - self._reserved

    async def _claim(self, order: list[QueueKeys], free: int) -> tuple[int, float | None]:
        """Claim up to ``free`` tasks; returns how many, and when the next task is due (s)."""
        due_in: float | None = None
        total = 0
        now = time.monotonic()
        for keys in order:
            if keys.name in self._unhealthy and self._unhealthy[keys.name][0] > now:
                continue
            try:
                reply = await self._driver_run(self._claim_call(keys, free - total))
            except ServerUnavailable as exc:
                logger.warning("%s", exc)
                return 0, self._pause()
            except ServerError as exc:
                self._sick(keys.name, exc)
                continue
            self._unhealthy.pop(keys.name, None)
            due = reply.next_due_in
            if due is not None:
                due_in = due if due_in is None else min(due_in, due)
            for claimed in reply.tasks:
                self._start(claimed)
            total += len(reply.tasks)
            if total >= free:
                break
        return total, due_in

    def _claim_call(self, keys: QueueKeys, limit: int) -> Call[ClaimReply]:
        return operations.claim(
            keys,
            limit=limit,
            lease_ms=self.settings.lease_ms,
            promote_limit=PROMOTE_LIMIT,
            dead_ttl_ms=self.settings.failed_job_ttl_ms,
        )

    def _sick(self, queue: str, exc: ServerError) -> None:
        """A queue whose keys the server refuses is skipped with back-off, never deleted."""
        _, strikes = self._unhealthy.get(queue, (0.0, 0))
        pause = min(60.0, 0.5 * 2**strikes)
        self._unhealthy[queue] = (time.monotonic() + pause, strikes + 1)
        logger.error("queue %s is unhealthy (%s); trying it again in %.1f s", queue, exc, pause)

    async def _driver_run(self, call: Call[Any]) -> Any:
        assert self._driver is not None
        result = await self._driver.run(call)
        self._failures = 0
        return result

    async def _wait_for_work(
        self, signals: list[str], first: QueueKeys, due_in: float | None
    ) -> None:
        """Block until a queue is signalled, idle_wait passes, or a scheduled task is due.

        The blocking wait stays in flight when a due task wakes the runner first, and the
        next wait takes it up again: no connection is dropped and made anew for a timer.
        (The server times blocked clients out only at its hz, every 100 ms at hz 10: too
        coarse for a task due soon, so that timer is ours.)
        """
        assert self._driver is not None
        deadline = None if due_in is None else time.monotonic() + due_in
        if due_in is not None and due_in <= SHORT_SLEEP:  # sooner than a round trip is worth
            await self._until(asyncio.sleep(max(0.0, due_in - TIMER_GRAIN)))
            _sleep_until(deadline)
            return
        if self._waiter is None:
            self._waiter = self._new_waiter(signals, first)
        waiter = self._waiter
        if self._stopped is None:  # one future for the whole run, not one per wait
            self._stopped = asyncio.ensure_future(self._stopping.wait())
        timeout = None if due_in is None else due_in - TIMER_GRAIN
        await asyncio.wait((waiter, self._stopped), timeout=timeout, return_when="FIRST_COMPLETED")
        if self._stopping.is_set():
            return
        if not waiter.done():
            _sleep_until(deadline)
            return  # a scheduled task is due; the wait goes on in the background
        self._waiter = None
        exc = waiter.exception() or waiter.result()[0]
        if isinstance(exc, ServerError):
            logger.warning("waiting for work failed: %s", exc)
            await asyncio.sleep(self._pause())
        elif isinstance(exc, BaseException):
            raise exc

    def _new_waiter(self, signals: list[str], first: QueueKeys) -> asyncio.Future[list[Any]]:
        """The blocking wait, with a claim of one task of ``first`` pipelined behind it.

        The server runs the claim the moment the wait ends (a blocked client's next
        command waits in its buffer), so a task enqueued for an idle runner is claimed
        without a second round trip. The claim's slot is reserved while the wait is in
        flight, and only when two are free: a due task may need one meanwhile.
        """
        assert self._driver is not None
        calls: list[Call[Any]] = [commands.wait_signal(signals, self.settings.idle_wait)]
        if self._free() < 2 or first.name in self._unhealthy:
            return asyncio.ensure_future(self._driver.run_many(calls))
        calls.append(self._claim_call(first, 1))
        self._reserved += 1
        return asyncio.ensure_future(self._wait_and_claim(calls, first.name))

    async def _wait_and_claim(self, calls: list[Call[Any]], queue: str) -> list[Any]:
        """Start what the claim behind the wait took as soon as its reply is in: in the
        step of the loop that reads it, not in a done callback one step later."""
        assert self._driver is not None
        try:
            replies = await self._driver.run_many(calls)
        finally:
            self._reserved -= 1
            self._slot_freed.set()
        reply = replies[1]
        if isinstance(reply, ServerUnavailable):
            logger.warning("%s", reply)
        elif isinstance(reply, ServerError):
            self._sick(queue, reply)
        else:
            self._unhealthy.pop(queue, None)
            for claimed in reply.tasks:
                self._start(claimed)
        return replies

    async def _settle_waiter(self) -> None:
        """On stop, let a wait in flight end (at idle_wait) rather than close its
        connection: the claim behind it may have taken a task, which then runs or is
        handed back with the others instead of waiting out its lease."""
        if self._waiter is not None and not self._waiter.done():
            await asyncio.wait([self._waiter], timeout=SETTLE_LIMIT)

    async def _until(self, awaitable: Any) -> None:
        """Await ``awaitable``, but give up on it as soon as a stop is asked."""
        work = asyncio.ensure_future(awaitable)
        stop = asyncio.ensure_future(self._stopping.wait())
        await asyncio.wait((work, stop), return_when=asyncio.FIRST_COMPLETED)
        for future in (work, stop):
            if not future.done():
                future.cancel()
        await asyncio.gather(work, stop, return_exceptions=True)

    # -- running ----------------------------------------------------------------------

    def _start(self, claimed: Claimed) -> None:
        if logger.isEnabledFor(logging.INFO):
            logs.task_line(logger, "Running task %s from %s", task_name(claimed), claimed.queue)
        assert self._keeper is not None
        self._keeper.hold(claimed, self.settings.lease_ms)
        task = asyncio.create_task(self._execute(claimed))
        self._running[task] = claimed
        task.add_done_callback(self._done)

    async def _execute(self, claimed: Claimed) -> None:
        job = decode(claimed, self.jobs, self.settings.max_payload_bytes)
        if isinstance(job, Outcome):
            outcome = job
        else:
            lease_ms = self._lease_ms(job)
            if lease_ms != self.settings.lease_ms:
                assert self._keeper is not None
                self._keeper.hold(claimed, lease_ms)
            if not job.async_perform_ and job.isolation == "thread":
                self._threaded.add(claimed)
            outcome = await attempt(job, claimed, self._pool)
        if self._keeper is not None:
            self._keeper.finish(claimed)
        self._reports.append(outcome)
        self._report_ready.set()

    def _lease_ms(self, job: Job) -> int:
        if job.lease is None:
            return self.settings.lease_ms
        return round(config.seconds(job.lease, "lease") * 1000)

    def _drop(self, claimed: Claimed) -> None:
        if self._keeper is not None:
            self._keeper.drop(claimed)

    def _done(self, task: asyncio.Task[None]) -> None:
        claimed = self._running.pop(task, None)
        if claimed is not None:
            self._threaded.discard(claimed)
        self._slot_freed.set()
        if not task.cancelled() and task.exception() is not None:
            logger.error("a task's execution raised", exc_info=task.exception())

    # -- reporting ----------------------------------------------------------------------

    async def _report_loop(self) -> None:
        # Runs through the grace period; _finish sends what is left after it.
        while not self._closing:
            await self._report_ready.wait()
            self._report_ready.clear()
            await self._flush_reports()

    async def _flush_reports(self) -> None:
        while self._reports:
            batch, self._reports = self._reports, []
            calls, owners = self._report_calls(batch)
            results = await self._run_many(calls, "reporting outcomes")
            for outcomes, result in zip(owners, results, strict=True):
                if isinstance(result, ServerError) or result is _UNSENT:
                    self._reports += outcomes  # sent again after the pause
                    continue
                refused = set(result) if isinstance(result, list) else set()
                if result is None:  # a refused fail
                    refused = {outcomes[0].claimed.id}
                for outcome in outcomes:
                    if outcome.claimed.id in refused:
                        logger.warning(
                            "report for task %s (attempt %d) refused: its lease was lost and "
                            "it was handed out again",
                            task_name(outcome.claimed),
                            outcome.claimed.attempt,
                        )
                    self._drop(outcome.claimed)
            if self._reports:
                await asyncio.sleep(self._pause())

    def _report_calls(self, batch: list[Outcome]) -> tuple[list[Call[Any]], list[list[Outcome]]]:
        """One complete call per queue for the successes, one fail call per failure."""
        successes: dict[str, list[Outcome]] = {}
        calls: list[Call[Any]] = []
        owners: list[list[Outcome]] = []
        for outcome in batch:
            claimed = outcome.claimed
            if outcome.error is None:
                successes.setdefault(claimed.queue, []).append(outcome)
                continue
            calls.append(
                operations.fail(
                    self._keys(claimed.queue),
                    claimed.id,
                    claimed.attempt,
                    outcome.error,
                    retry_delay_ms=outcome.retry_delay_ms,
                    dead_ttl_ms=self.settings.failed_job_ttl_ms,
                    dead_max=self.settings.dead_max,
                )
            )
            owners.append([outcome])
        for queue, outcomes in successes.items():
            done = [
                (o.claimed.id, o.claimed.attempt, o.result_json, self._kept_ms(o)) for o in outcomes
            ]
            calls.append(operations.complete(self._keys(queue), done))
            owners.append(outcomes)
        return calls, owners

    def _kept_ms(self, outcome: Outcome) -> int:
        """How long a succeeded task's hash is kept: result_ttl (the job's, else the
        setting) when perform returned a value; successful_job_ttl for None, or when
        result_ttl is 0."""
        ttl = outcome.result_ttl
        seconds = self.settings.result_ttl if ttl is None else config.seconds(ttl, "result_ttl")
        if outcome.result_json == "null" or seconds == 0:
            return self.settings.successful_job_ttl_ms
        return max(1, round(seconds * 1000))

    # -- leases of lost runners --------------------------------------------------------

    async def _reclaim_loop(self) -> None:
        every = min(RECLAIM_EVERY, self.settings.lease / 3)
        while not self._stopping.is_set():
            await self._until(asyncio.sleep(every))
            if self._stopping.is_set():
                return
            calls = [
                operations.reclaim(
                    self._keys(q),
                    limit=RECLAIM_LIMIT,
                    dead_ttl_ms=self.settings.failed_job_ttl_ms,
                    dead_max=self.settings.dead_max,
                )
                for q in self.queues
            ]
            results = await self._run_many(calls, "reclaiming expired leases")
            for queue, reclaimed in zip(self.queues, results, strict=True):
                if isinstance(reclaimed, list):
                    for task_id, state in reclaimed:
                        logger.warning(
                            "task %s<%s> lost its runner (lease expired), now %s",
                            queue,
                            task_id,
                            state,
                        )

    # -- talking to the server ------------------------------------------------------------

    def _keys(self, queue: str) -> QueueKeys:
        return queue_keys(self.settings.prefix, queue)

    async def _run_many(self, calls: list[Call[Any]], what: str) -> list[Any]:
        assert self._driver is not None
        try:
            results = await self._driver.run_many(calls)
        except ServerError as exc:
            logger.warning("%s failed: %s", what, exc)
            return [_UNSENT] * len(calls)
        self._failures = 0
        return results

    def _pause(self) -> float:
        """Exponential back-off after consecutive server errors."""
        self._failures += 1
        low, high = RETRY_PAUSE
        return float(min(high, low * 2 ** (self._failures - 1)))


_UNSENT = object()


class _Pool(ThreadPoolExecutor):
    """The threads of sync performs, counting the calls they run now."""

    def __init__(self, workers: int) -> None:
        super().__init__(workers, thread_name_prefix="culex")
        # One item per call running: a deque's append and pop are atomic, so no lock.
        self._calls: deque[None] = deque()

    @property
    def busy(self) -> int:
        return len(self._calls)

    def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
        return super().submit(self._counted, fn, *args, **kwargs)

    def _counted(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        self._calls.append(None)
        try:
            return fn(*args, **kwargs)
        finally:
            self._calls.pop()


def _exit_now(code: int) -> NoReturn:
    """End the process with its threads, skipping exit handlers (which would wait for
    them), once the log is written out."""
    logs.flush_all()
    os._exit(code)


def _sleep_until(deadline: float | None) -> None:
    """Block for what is left to ``deadline`` when that is under a millisecond: the only
    way to be on time to the sub-ms; it holds the loop at most TIMER_GRAIN."""
    if deadline is None:
        return
    rest = deadline - time.monotonic()
    if 0 < rest <= TIMER_GRAIN:
        time.sleep(rest)
