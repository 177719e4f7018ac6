"""The periodic scheduler: a runner's loop that enqueues each due slot of its periodic jobs.

Any number of runners may run it: schedule.lua decides each slot once, with the server's
clock, so a slot is enqueued exactly once however many runners ask (docs/design.md#periodic-jobs).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

from .. import config
from .._redis import commands, enqueuing
from .._redis.calls import Call
from .._redis.drivers import AsyncDriverProtocol
from .._redis.enqueuing import Scheduled
from .._redis.keys import periodic_jobs_key, queue_keys, queues_key
from ..errors import ServerError
from ..jobs.periodic import PeriodicJob, described, format_slot, record_expiry, registry_entry
from .backoff import Backoff

logger = logging.getLogger("culex")

MAX_SLEEP = 60.0  # the scheduler looks at the server's clock again at least this often
MIN_SLEEP = 0.001
ERROR_PAUSE = (0.05, 5.0)  # back-off bounds after a server error


class Scheduler:
    """Enqueues the due slots of periodic jobs. Every runner runs one; Redis decides."""

    def __init__(
        self,
        jobs: Iterable[type[PeriodicJob]],
        settings: config.Settings,
        driver: AsyncDriverProtocol,
    ) -> None:
        self.jobs = list(jobs)
        self.settings = settings
        self.driver = driver
        self._next: dict[type[PeriodicJob], int | None] = {}  # when to look again, per job
        self._started: set[type[PeriodicJob]] = set()  # jobs whose start call went through

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop`` is set: sleep until the earliest next slot, enqueue what is due."""
        backoff = Backoff(*ERROR_PAUSE)
        while not stop.is_set():
            try:
                pause = await self.tick()
                backoff.failures = 0
            except Exception as exc:
                pause = backoff.failed()
                if isinstance(exc, ServerError):
                    logger.warning("periodic jobs: %s", exc)
                else:
                    logger.exception("periodic jobs: the scheduler failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), pause)

    async def tick(self) -> float:
        """Enqueue each due slot (once across runners); returns the seconds to the next."""
        now = await self.driver.run(commands.server_time())
        due = [job for job in self.jobs if self._is_due(job, now)]
        slots: list[tuple[type[PeriodicJob], int]] = []
        for job in due:
            current, self._next[job] = job.schedule_.around(now)
            if current is None:  # a cron expression with no slot in the past 50 years
                self._started.add(job)
            else:
                slots.append((job, current))
        firsts = [
            commands.register_queue(queues_key(self.settings.prefix), queue)
            for queue in dict.fromkeys(job.queue for job, _ in slots if job not in self._started)
        ]
        calls = [self._call(job, slot) for job, slot in slots]
        listed = self._listing(slots, now) if calls else []
        results = await self.driver.run_many([*firsts, *listed, *calls]) if calls else []
        for result in results[len(firsts) : len(firsts) + len(listed)]:
            if isinstance(result, ServerError):  # bookkeeping: the slots still go ahead
                logger.warning("periodic jobs: the registry was not updated: %s", result)
        failed: ServerError | None = None
        for (job, slot), result in zip(slots, results[len(firsts) + len(listed) :], strict=True):
            if isinstance(result, ServerError):
                self._next[job], failed = now, result  # due again after the back-off
            else:
                self._started.add(job)
                _log(job, slot, result)
        if failed is not None:
            raise failed
        pending = [slot for slot in self._next.values() if slot is not None]
        if not pending:
            return MAX_SLEEP
        return min(MAX_SLEEP, max(MIN_SLEEP, (min(pending) - now) / 1000))

    def _is_due(self, job: type[PeriodicJob], now: int) -> bool:
        if job not in self._started:
            return True
        slot = self._next.get(job)
        return slot is not None and slot <= now

    def _listing(self, slots: list[tuple[type[PeriodicJob], int]], now: int) -> list[Call[int]]:
        """The registry entries of the jobs scheduled now, in the same round trip: each
        lapses with its record (schedule.lua), unless a scheduler renews it."""
        key = periodic_jobs_key(self.settings.prefix)
        entries = [
            (registry_entry(job.queue, job.type_), record_expiry(self._next[job], now))
            for job, _ in slots
        ]
        last = max(until for _, until in entries)
        return [
            commands.register_periodic(key, entries),
            commands.drop_lapsed(key, now),
            commands.expire_at(key, last),
        ]

    def _call(self, job: type[PeriodicJob], slot: int) -> Call[Scheduled]:
        task_id = job.slot_id(slot)
        try:  # (the middleware's on_enqueue; one that raises costs the slot its headers)
            headers = job.headers_for(task_id, config.settings())
        except Exception:
            logger.exception("periodic job %s: the middleware's on_enqueue raised", job.type_)
            headers = ""
        return enqueuing.schedule(
            queue_keys(self.settings.prefix, job.queue),
            job.type_,
            task_id,
            slot_ms=slot,
            next_slot_ms=self._next[job],
            overlap=job.overlap,
            run_new=job.run_on_start and job not in self._started,
            max_retries=job.max_retries,
            record=described(job),
            events=self.settings.events,
            headers=headers,
        )


def _log(job: type[PeriodicJob], slot: int, result: Scheduled) -> None:
    name, when = job.type_, format_slot(job, slot)
    if result.outcome == "enqueued":
        logger.info("periodic job %s: slot %s enqueued as task %s", name, when, result.task_id)
    elif result.outcome == "overlap":
        logger.warning(
            "periodic job %s: slot %s skipped, the previous run is unfinished (overlap = False)",
            name,
            when,
        )
    elif result.outcome == "new":
        logger.info("periodic job %s is new: it first runs at its next slot", name)
    elif result.outcome == "paused":
        logger.debug("periodic job %s: slot %s not enqueued, the job is paused", name, when)
    else:  # "done" (another runner was first) or "early"
        logger.debug("periodic job %s: slot %s %s", name, when, result.outcome)
