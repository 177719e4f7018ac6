"""The reclaimer: sends tasks whose lease expired (a stall) back to waiting, or to dead past
max_stalls.

Every runner runs one over its own queues; reclaim.lua decides, with the server's clock,
which leases have expired, so two runners reclaiming the same queue do no harm. The same
call trims dead by age (so an id whose hash expired leaves it within a pass) and, about
once a lease per queue, sets right the counts that admission trusts (reclaim.lua's heal_ms:
a group's running count left wrong by a runner of an older culex is logged).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable, Mapping

from .. import config
from .._redis import claims, commands
from .._redis.drivers import AsyncDriverProtocol
from .._redis.keys import queue_keys
from ..errors import ServerError, ServerUnavailable
from . import wrapping
from .outage import Outage

logger = logging.getLogger("culex")

RECLAIM_LIMIT = 100  # expired leases reclaimed per queue per pass
RECLAIM_EVERY = 2.0  # seconds between reclaim passes (at most; less with a short lease)
STALLED = "lease expired (runner lost)"  # on_dead's reason when the record cannot be read
RECLAIMING = "reclaiming expired leases"


class Reclaimer:
    """Every RECLAIM_EVERY seconds (or lease/3, if shorter), one reclaim call per queue,
    all in one round trip. A pass that fails is not repeated: the next one comes anyway."""

    def __init__(
        self,
        settings: config.Settings,
        driver: AsyncDriverProtocol,
        queues: Iterable[str],
        own_stalls: Mapping[str, Mapping[str, int]] | None = None,
        outage: Outage | None = None,
    ) -> None:
        self.settings = settings
        self.outage = outage or Outage()  # (told of a pass that cannot reach the server)
        self.driver = driver
        self.queues = list(queues)
        # By queue: the job types whose classes set their own max_stalls, with it.
        self.own_stalls = own_stalls or {}

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop`` is set: wait a pass's interval, then reclaim."""
        every = min(RECLAIM_EVERY, self.settings.lease / 3)
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), every)
            if stop.is_set():
                return
            await self.reclaim()

    async def reclaim(self) -> None:
        """One pass over every queue; logs each task whose runner was lost."""
        calls = [
            claims.reclaim(
                queue_keys(self.settings.prefix, q),
                limit=RECLAIM_LIMIT,
                dead_ttl_ms=self.settings.failed_job_ttl_ms,
                dead_max=self.settings.dead_max,
                heal_ms=self.settings.lease_ms,  # (counts set right within about a lease)
                max_stalls=self.settings.max_stalls,
                own_stalls=self.own_stalls.get(q),
                events=self.settings.events,
            )
            for q in self.queues
        ]
        try:
            results = await self.driver.run_many(calls)
        except ServerUnavailable as exc:
            self.outage.failed(RECLAIMING, exc)
            return
        except ServerError as exc:
            logger.warning("%s failed: %s", RECLAIMING, exc)
            return
        self.outage.worked(RECLAIMING)
        for queue, reclaimed in zip(self.queues, results, strict=True):
            if isinstance(reclaimed, ServerUnavailable):  # (this queue's; the others went on)
                self.outage.failed(f"{RECLAIMING} of {queue}", reclaimed)
                continue
            if isinstance(reclaimed, ServerError):
                logger.warning("queue %s: %s failed: %s", queue, RECLAIMING, reclaimed)
                continue
            if self.outage.failing:
                self.outage.worked(f"{RECLAIMING} of {queue}")
            for group, said, now in getattr(reclaimed, "healed", ()):
                logger.warning(
                    "queue %s: group %r's running count said %d, %d of its tasks run: set "
                    "right (a runner of an older culex ends grouped tasks without counting "
                    "them; culex runners lists the versions)",
                    *(queue, group, said, now),
                )
            if isinstance(reclaimed, list):
                for task_id, state in reclaimed:
                    logger.warning(
                        "task %s<%s> stalled (its lease expired: runner lost), now %s",
                        queue,
                        task_id,
                        state,
                    )
                dead = [task_id for task_id, state in reclaimed if state == "dead"]
                if dead and wrapping.configured() is not None:
                    await self._tell_dead(queue, dead)

    async def _tell_dead(self, queue: str, dead: list[str]) -> None:
        """The middleware's on_dead for each task this pass buried (past max_stalls, or
        broken), with the reason its record says (one read, in one round trip)."""
        keys = queue_keys(self.settings.prefix, queue)
        try:
            records = await self.driver.run_many([commands.read_task(keys, i) for i in dead])
        except ServerError:
            records = []
        reasons = [
            record.get("last_error") if isinstance(record, dict) else None for record in records
        ]
        reasons += [None] * (len(dead) - len(reasons))
        await wrapping.tell_buried(
            queue, [(task_id, why or STALLED) for task_id, why in zip(dead, reasons, strict=True)]
        )
