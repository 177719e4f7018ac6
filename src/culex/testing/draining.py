"""drain: run every task of some queues in this process, through the runner's own parts.

A round makes the queues' scheduled tasks due now (hasten.lua, unless ``run_scheduled`` is
off), claims what is ready (claim.lua), prepares and runs each attempt as a runner does
(culex.runner.attempt), and reports the outcomes with the runner's reporter (complete.lua,
fail.lua). Rounds go on until a claim finds nothing: a retry, or a task a perform enqueued,
runs in a later round. No runner loop, no wait for a signal: nothing sleeps.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from .. import config
from .._redis import claims, commands, interventions
from .._redis.calls import Call
from .._redis.claims import Claimed
from .._redis.drivers import AsyncDriverProtocol
from .._redis.keys import check_queue_name, queue_keys
from ..errors import short
from ..jobs.job import Job
from ..jobs.progress import Reporting
from ..jobs.registry import JobRegistry, registry
from ..jobs.serialization import decode_result
from ..middleware.hooks import ParamsUnreadable
from ..runner import isolation
from ..runner.attempt import Preparation, attempt, with_lines
from ..runner.claimer import PROMOTE_LIMIT
from ..runner.lease import LeaseKeeper
from ..runner.outbox import Outbox
from ..runner.outcome import Outcome
from ..runner.reporter import Reporter
from ..runner.wrapping import configured as configured_middleware
from ..runner.wrapping import opened_params, tell_buried, tell_ended
from ..server import configured
from ..server.procedures import run_on
from ..workflows import release
from .attempts import FAILED, Attempt, AttemptFailed, AttemptOutcome, DrainTimeout, params_of

HASTEN_LIMIT = 10_000  # scheduled tasks made due per queue and round


def drain(
    queues: Iterable[str] | str | None = None,
    *,
    timeout: float | timedelta = 10,
    fail_fast: bool = True,
    run_scheduled: bool = True,
) -> list[Attempt]:
    """Run every ready task of ``queues`` (default: every registered job's queue) in this
    process until they are empty, and return one :class:`Attempt` per attempt run.

    Scheduled tasks (a retry's back-off, a delayed enqueue) run at once too, unless
    ``run_scheduled`` is False (then only those already due). With ``fail_fast``, the first
    failed attempt is re-raised (the job's own exception, with its traceback) once the
    round it ran in is reported. Raises :class:`DrainTimeout` when ``timeout`` passes first.
    Inside a running event loop, ``await adrain(...)`` instead.
    """
    draining = adrain(queues, timeout=timeout, fail_fast=fail_fast, run_scheduled=run_scheduled)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(draining)
    draining.close()
    raise RuntimeError("drain() cannot run inside an event loop: use `await adrain(...)`")


async def adrain(
    queues: Iterable[str] | str | None = None,
    *,
    timeout: float | timedelta = 10,
    fail_fast: bool = True,
    run_scheduled: bool = True,
) -> list[Attempt]:
    """The async twin of :func:`drain`; sync performs run in threads, as in a runner."""
    names = checked_queues(queues, registry)
    limit = config.seconds(timeout, "drain() timeout", minimum=0.001)
    if not isinstance(fail_fast, bool) or not isinstance(run_scheduled, bool):
        raise TypeError("drain(): fail_fast and run_scheduled must be True or False")
    settings = config.settings()
    driver = await configured.async_driver(settings.redis_url)
    drainer = _Drainer(
        settings, driver, registry, names, run_scheduled, lease_ms=round(limit * 1000)
    )
    try:
        async with asyncio.timeout(limit):
            failed = await drainer.run(fail_fast)
    except TimeoutError:
        raise DrainTimeout(limit, await drainer.left(), drainer.running_names()) from None
    finally:
        drainer.close()
    if failed is None:
        return drainer.ran
    # (raised out here: a job's own TimeoutError is not the drain's timeout)
    if failed.exception is not None:
        raise failed.exception
    raise AttemptFailed(failed)


def checked_queues(queues: Iterable[str] | str | None, jobs: JobRegistry) -> list[str]:
    """The queues to drain: each a queue of a registered job (a typo would drain nothing)."""
    known = jobs.queues()
    if queues is None:
        return known
    names = [queues] if isinstance(queues, str) else list(queues)
    for name in names:
        check_queue_name(name)
        if name not in known:
            raise ValueError(
                f"no registered job runs on queue {short(name)} (the queues of the registered "
                f"jobs: {', '.join(known) or 'none'})"
            )
    return names


class _Drainer:
    """The rounds of one drain, and what they ran."""

    def __init__(
        self,
        settings: config.Settings,
        driver: AsyncDriverProtocol,
        jobs: JobRegistry,
        queues: list[str],
        run_scheduled: bool,
        *,
        lease_ms: int,
    ) -> None:
        self.settings = settings
        self.driver = driver
        self.keys = [queue_keys(settings.prefix, q) for q in queues]
        self.run_scheduled = run_scheduled
        # The lease outlasts the drain, so no heartbeat is needed while it runs.
        self.lease_ms = max(settings.lease_ms, lease_ms)
        self.ran: list[Attempt] = []
        self.running: list[Claimed] = []
        self.pool = ThreadPoolExecutor(settings.concurrency, thread_name_prefix="culex-drain")
        reporting = {keys.name: Reporting(settings.redis_url, keys) for keys in self.keys}
        # (no hold: the lease outlasts the drain)
        self.preparation = Preparation(jobs, settings.max_payload_bytes, reporting)
        self.outbox = Outbox()
        # The runner's reporter; its keeper only forgets tasks here (no heartbeat thread).
        keeper = LeaseKeeper(settings, "")
        self.reporter = Reporter(settings, driver, keeper, self.outbox)

    async def run(self, fail_fast: bool) -> Attempt | None:
        """Rounds until a claim finds nothing; with ``fail_fast``, until a round has a
        failure, which it returns."""
        while claimed := await self._claim() or await self._released():
            if claimed is True:
                continue  # (ends of workflow nodes were applied: their downstreams may run)
            self.running = claimed
            done = await asyncio.gather(*(self._attempt(c) for c in claimed))
            self.running = []
            self.outbox.extend([o for o, _ in done if not o.over or o.lines])  # (lines only)
            await self.reporter.flush()
            if any(c.run for c in claimed):
                await self._released()
            self.ran += [record for _, record in done]
            failed = next((r for r in self.ran[-len(done) :] if r.outcome in FAILED), None)
            if fail_fast and failed is not None:
                return failed
        return None

    async def _claim(self) -> list[Claimed]:
        """One round trip: hasten and claim each queue."""
        calls: list[Call[Any]] = []
        for keys in self.keys:
            if self.run_scheduled:
                calls.append(interventions.hasten(keys, limit=HASTEN_LIMIT))
            calls.append(
                claims.claim(
                    keys,
                    limit=self.settings.concurrency,
                    lease_ms=self.lease_ms,
                    promote_limit=PROMOTE_LIMIT,
                    dead_ttl_ms=self.settings.failed_job_ttl_ms,
                    events=self.settings.events,
                )
            )
        claimed: list[Claimed] = []
        hastened = 0
        queues = iter(self.keys)  # (each claim's, in their order)
        for reply in await self.driver.run_many(calls):
            if isinstance(reply, Exception):
                raise reply
            if isinstance(reply, claims.ClaimReply):
                claimed += reply.tasks
                queue = next(queues).name
                if reply.dead:  # (expired, cancelled or broken: on_dead, as a runner tells)
                    await tell_buried(queue, [(task_id, why) for task_id, _, why in reply.dead])
            else:
                hastened += reply
        if hastened and not claimed:
            # Tasks made due after the claim looked (a server that had lost the hasten
            # script ran it again behind the claim: reloading.again): claim once more.
            return await self._claim()
        return claimed

    async def _released(self) -> bool:
        """Apply the ends of workflow nodes waiting in the queues' outboxes, as a runner's
        releaser does (culex.workflows.release); True when one was applied."""
        queues = [keys.name for keys in self.keys]
        ttl = self.settings.failed_job_ttl_ms
        draining = release.drain(self.settings.prefix, queues, ttl, self.settings.events)
        return bool(await run_on(draining, self.driver))

    async def _attempt(self, claimed: Claimed) -> tuple[Outcome, Attempt]:
        job = self.preparation.prepare(claimed)
        if isinstance(job, Outcome):
            await tell_ended(job, None)
            return job, _record(claimed, job, None, None)
        raised: list[BaseException] = []
        _catch(job, raised)
        outcome = with_lines(job, await attempt(job, claimed, self.pool))
        if outcome.error is not None:
            await tell_ended(outcome, job)
        return outcome, _record(claimed, outcome, job, raised[0] if raised else None)

    def running_names(self) -> list[str]:
        return [f"{c.type} {c.queue}<{c.id}>" for c in self.running]

    async def left(self) -> dict[str, dict[str, int]]:
        """What each queue still holds (waiting, scheduled, pending)."""
        calls = [call for keys in self.keys for call in commands.count(keys)]
        counts = await self.driver.run_many(calls)
        left: dict[str, dict[str, int]] = {}
        size = commands.COUNT_CALLS
        for index, keys in enumerate(self.keys):
            found = commands.sizes(counts[size * index : size * (index + 1)])
            found.pop("dead")
            left[keys.name] = found
        return left

    def close(self) -> None:
        isolation.kill(c.id for c in self.running)
        self.pool.shutdown(wait=False, cancel_futures=True)


def _record(
    claimed: Claimed, outcome: Outcome, job: Job | None, raised: BaseException | None
) -> Attempt:
    params = params_of(_opened(claimed))
    if outcome.later_ms is not None:  # (culex.RetryLater: no failure, and no result)
        return Attempt(claimed.queue, claimed.id, claimed.type, params, claimed.attempt,
                       "retry_later")  # fmt: skip
    if outcome.error is None:
        codec = job.result_codec_ if job is not None else None
        result = decode_result(outcome.result_json, codec, f"the result of {claimed.type}")
        return Attempt(claimed.queue, claimed.id, claimed.type, params, claimed.attempt,
                       "succeeded", result)  # fmt: skip
    state: AttemptOutcome = "dead" if outcome.retry_delay_ms is None else "failed"
    return Attempt(claimed.queue, claimed.id, claimed.type, params, claimed.attempt, state,
                   error=outcome.error, exception=raised)  # fmt: skip


def _catch(job: Job, raised: list[BaseException]) -> None:
    """Keep the exception the job's hooks or perform raise, to re-raise it as it was (the
    runner's attempt keeps only its text). A perform in a child process keeps none."""
    if job.isolation == "process" and not job.async_perform_:
        return
    for name in ("before_perform", "perform"):
        setattr(job, name, _catching(getattr(job, name), raised))


def _catching(method: Callable[[], Any], raised: list[BaseException]) -> Callable[[], Any]:
    if inspect.iscoroutinefunction(method):

        async def caught_async() -> Any:
            try:
                return await method()
            except Exception as exc:
                raised.append(exc)
                raise

        return caught_async

    def caught() -> Any:
        try:
            return method()
        except Exception as exc:
            raised.append(exc)
            raise

    return caught


def _opened(claimed: Claimed) -> bytes:
    """The task's params as its job read them (EncryptedParams' opened), else as stored."""
    try:
        plan = configured_middleware()
        return opened_params(claimed, plan.openers) if plan and plan.openers else claimed.params
    except ParamsUnreadable:  # (the task went to dead for it: its attempt says why)
        return claimed.params
