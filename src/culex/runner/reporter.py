"""The reporter: sends finished outcomes, fenced by attempt, in one pipelined round trip.

Successes of one queue go in one complete call, each failure in a fail call (with its
traceback, which the task's errors keep: culex.jobs.failures), each
push-back (culex.RetryLater) in a retry_later call; a report the server refuses (the lease
was lost and the task handed out again) is logged and dropped; a batch that could not be
sent is sent again after a back-off, and while one server cannot take it (out of memory,
out of reach: ServerUnavailable) the outbox's ``landed`` is clear, so the claimer takes no
more tasks until the reports are in (culex.runner.outbox). (Not on a cluster: a master
that cannot take reports cannot take claims either, and the claimer skips its queues; the
other masters' queues go on.) A hand-back on stop is a report too: the task goes back to
waiting, fenced the same way.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from .. import config
from .._redis import reports
from .._redis.calls import Call
from .._redis.claims import Claimed
from .._redis.drivers import AsyncDriverProtocol
from .._redis.keys import queue_keys
from .._redis.scripts import MOST
from ..errors import ConfigurationError, ServerError, ServerUnavailable
from ..jobs import failures
from .backoff import NODE_OUT_OF_REACH, SERVER_ERROR, Backoff
from .lease import LeaseKeeper
from .outage import Outage
from .outbox import Outbox
from .outcome import Outcome, task_name

logger = logging.getLogger("culex")

UNSENT = object()  # the result of a call in a batch that could not be sent
REFUSALS = 5  # times a report the server refuses (not: cannot be reached) is sent at most
REPORTING = "reporting outcomes"


class Reporter:
    """Empties ``outbox`` (filled by the runner) into reports.

    Once a report lands, or a task is handed back, the ``keeper`` stops renewing its lease.
    A landed report of a workflow node's attempt calls ``nodes_ended``. A report that
    cannot reach the server is told to ``outage`` (logged once for the whole outage).
    """

    def __init__(
        self,
        settings: config.Settings,
        driver: AsyncDriverProtocol,
        keeper: LeaseKeeper,
        outbox: Outbox,
        nodes_ended: Callable[[], None] = lambda: None,
        outage: Outage | None = None,
    ) -> None:
        self.outage = outage or Outage()
        self.settings = settings
        self.nodes_ended = nodes_ended  # a workflow node's report landed (runner.releaser)
        self.driver = driver
        self.keeper = keeper
        self.outbox = outbox
        self.backoff = Backoff(*(NODE_OUT_OF_REACH if driver.cluster else SERVER_ERROR))
        self._closing = False
        self._flushing = asyncio.Lock()
        self._refusals: dict[tuple[str, str, int], int] = {}  # (queue, id, attempt): times

    async def run(self) -> None:
        """Report as outcomes come in, until :meth:`close` (the runner then calls
        :meth:`flush` for what is left after the grace period)."""
        while not self._closing:
            await self.outbox.ready.wait()
            self.outbox.ready.clear()
            try:
                await self.flush()
            except Exception:  # (a bug here must not end reporting for good: log, go on)
                logger.exception("reporting outcomes failed")
                await asyncio.sleep(self.backoff.failed())

    def close(self) -> None:
        self._closing = True
        self.outbox.ready.set()

    def _refused(self, outcomes: list[Outcome], error: ServerError) -> list[Outcome]:
        """The outcomes of a call the server refused (not one it could not be reached for)
        that are to be sent again: each at most REFUSALS times. One refused that often (its
        task key holds another type, say) is dropped with its lease, which runs out: the
        reclaimer then takes the task, and no lease is renewed for ever."""
        kept = []
        for outcome in outcomes:
            key = (outcome.claimed.queue, outcome.claimed.id, outcome.claimed.attempt)
            self._refusals[key] = self._refusals.get(key, 0) + 1
            if self._refusals[key] < REFUSALS:
                kept.append(outcome)
                continue
            del self._refusals[key]
            logger.error(
                "report for task %s (attempt %d) refused %d times, dropped (its lease runs "
                "out and the reclaimer takes the task): %s",
                *(task_name(outcome.claimed), outcome.claimed.attempt, REFUSALS, error),
            )
            self.keeper.drop(outcome.claimed)
        return kept

    async def flush(self) -> None:
        """Send every outcome in the outbox; a batch that failed is sent again after a pause.
        One flush at a time: the runner's last flush at stop waits for one under way."""
        async with self._flushing:
            await self._flush()

    async def _flush(self) -> None:
        landed = self.outbox.landed
        while self.outbox.outcomes:
            batch = self.outbox.take()
            again = False  # some of the batch go again: pause first (not for new ones)
            calls, owners = self._calls(batch)
            lines = self._lines(batch)  # (before the reports: log.lua fences by attempt)
            results = await self.send([*lines, *calls], REPORTING)
            _lines_kept(batch, results[: len(lines)])
            results = results[len(lines) :]
            # (on a cluster, claims go on: a node that cannot take reports cannot take
            # claims either, and the claimer skips its queues; the other nodes' queues go on)
            unlanded = next(
                (r for r in results if r is UNSENT or isinstance(r, ServerUnavailable)), None
            )
            if unlanded is None:
                self.outage.worked(REPORTING)
            elif isinstance(unlanded, ServerUnavailable):  # (send told it of an unsent one)
                self.outage.failed(REPORTING, unlanded)
            if unlanded is not None and not self.driver.cluster:
                if landed.is_set():
                    logger.warning("no more tasks are claimed until the outcomes are reported")
                landed.clear()
            elif not landed.is_set():
                logger.warning("the outcomes are reported: claiming again")
                landed.set()
            for outcomes, result in zip(owners, results, strict=True):
                if isinstance(result, ServerError) and not isinstance(result, ServerUnavailable):
                    outcomes = self._refused(outcomes, result)
                if isinstance(result, ServerError) or result is UNSENT:
                    self.outbox.extend(outcomes)  # sent again after the pause
                    again = again or bool(outcomes)
                    continue
                # (id, attempt): a batch may hold two attempts of one task
                refused = set(result) if isinstance(result, list) else set()
                if result is None or result is False:  # a refused fail or retry_later
                    refused = {(outcomes[0].claimed.id, outcomes[0].claimed.attempt)}
                for outcome in outcomes:
                    if (outcome.claimed.id, outcome.claimed.attempt) in refused:
                        logger.warning(
                            "report for task %s (attempt %d) refused: its lease was lost and "
                            "it was handed out again",
                            task_name(outcome.claimed),
                            outcome.claimed.attempt,
                        )
                    self.keeper.drop(outcome.claimed)
                    if outcome.claimed.run:
                        self.nodes_ended()
            if again:  # (outcomes that came while the batch was sent go at once)
                await asyncio.sleep(self.backoff.failed())

    async def hand_back(self, held: list[Claimed], delay_ms: int = 0) -> list[Any]:
        """Put ``held`` back in waiting (each fenced by its attempt; with ``delay_ms``, in
        scheduled, due that much later); True for each that went back. The caller drops
        their leases: a task still running keeps its lease until then."""
        calls = [
            reports.release(queue_keys(self.settings.prefix, c.queue), c.id, c.attempt, delay_ms)
            for c in held
        ]
        return await self.send(calls, "handing tasks back")

    async def send(self, calls: list[Call[Any]], what: str) -> list[Any]:
        """Run ``calls`` in one round trip; :data:`UNSENT` for each when that failed."""
        try:
            results = await self.driver.run_many(calls)
        except ServerUnavailable as exc:
            self.outage.failed(what, exc)
            return [UNSENT] * len(calls)
        except ServerError as exc:
            logger.warning("%s failed: %s", what, exc)
            return [UNSENT] * len(calls)
        self.backoff.failures = 0
        return results

    def _calls(self, batch: list[Outcome]) -> tuple[list[Call[Any]], list[list[Outcome]]]:
        """One complete call per queue for the successes, one fail call per failure, one
        retry_later call per push-back."""
        successes: dict[str, list[Outcome]] = {}
        calls: list[Call[Any]] = []
        owners: list[list[Outcome]] = []
        for outcome in batch:
            claimed = outcome.claimed
            if outcome.over:  # (an attempt with nothing to report: only its log lines go)
                continue
            if outcome.later_ms is not None:
                keys = queue_keys(self.settings.prefix, claimed.queue)
                calls.append(
                    reports.retry_later(
                        keys,
                        claimed.id,
                        claimed.attempt,
                        outcome.later_ms,
                        dead_ttl_ms=self.settings.failed_job_ttl_ms,
                        dead_max=self.settings.dead_max,
                        events=self.settings.events,
                    )
                )
                owners.append([outcome])
                continue
            if outcome.error is None:
                successes.setdefault(claimed.queue, []).append(outcome)
                continue
            calls.append(
                reports.fail(
                    queue_keys(self.settings.prefix, claimed.queue),
                    claimed.id,
                    claimed.attempt,
                    outcome.error,
                    retry_delay_ms=outcome.retry_delay_ms,
                    dead_ttl_ms=self.settings.failed_job_ttl_ms,
                    dead_max=self.settings.dead_max,
                    traceback=outcome.traceback,
                    errors_kept=failures.KEPT,
                    events=self.settings.events,
                )
            )
            owners.append([outcome])
        for queue, outcomes in successes.items():
            done = [
                (o.claimed.id, o.claimed.attempt, o.result_json, self._kept_ms(o)) for o in outcomes
            ]
            keys = queue_keys(self.settings.prefix, queue)
            calls.append(reports.complete(keys, done, events=self.settings.events))
            owners.append(outcomes)
        return calls, owners

    def _lines(self, batch: list[Outcome]) -> list[Call[Any]]:
        """A log call for each outcome whose attempt left log lines not sent yet."""
        return [
            reports.log(
                queue_keys(self.settings.prefix, o.claimed.queue), o.claimed.id,
                o.claimed.attempt, o.lines,
            )
            for o in batch
            if o.lines
        ]  # fmt: skip

    def _kept_ms(self, outcome: Outcome) -> int:
        """How long a succeeded task's hash is kept: result_ttl (the job's, else the
        setting) when perform returned a value; successful_job_ttl for None, or when
        result_ttl is 0."""
        ttl = outcome.result_ttl
        try:
            seconds = self.settings.result_ttl if ttl is None else config.seconds(ttl, "result_ttl")
        except ConfigurationError as exc:  # (a result_ttl perform set on itself: the setting)
            logger.warning("%s: result_ttl of the setting used instead", exc)
            seconds = self.settings.result_ttl
        if outcome.result_json == "null" or seconds == 0:
            return self.settings.successful_job_ttl_ms
        return min(MOST, max(1, round(seconds * 1000)))  # (the longest complete.lua takes)


def _lines_kept(batch: list[Outcome], results: list[Any]) -> None:
    """The log lines that landed are sent no more; those that did not go again with their
    outcome's report (log.lua keeps a line sent twice once)."""
    replies = iter(results)
    for outcome in batch:
        if outcome.lines:
            reply = next(replies)
            if reply is not UNSENT and not isinstance(reply, Exception):
                outcome.lines = []
