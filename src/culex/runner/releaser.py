"""The releaser: applies the ends of workflow nodes to their downstreams and runs.

The script that ends a node writes its end to its queue's outbox (include/workflow.lua);
this loop drains the outboxes of the runner's queues (culex.workflows.release): at once
when the reporter reports a node's end, and once a pass otherwise (an end written by a
reclaim, a cancel or a runner that died before it applied it), when it also finishes the
cross-slot operations a producer left half-done. A pass with nothing to do costs one
round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Iterable

from .. import config
from .._redis.drivers import AsyncDriverProtocol
from ..errors import ServerError
from ..server.procedures import run_on
from ..workflows.release import Held, drain, finish_unfinished

logger = logging.getLogger("culex")

RELEASE_EVERY = 2.0  # seconds between passes without a reported node end


class Releaser:
    """Drains the runner's queues' outboxes when woken (``wake()``) and every pass."""

    def __init__(
        self, settings: config.Settings, driver: AsyncDriverProtocol, queues: Iterable[str]
    ) -> None:
        self.settings = settings
        self.driver = driver
        self.queues = list(queues)
        self._woken = asyncio.Event()
        self.held = Held()  # (entries taken whose calls were refused: applied next pass)

    def wake(self) -> None:
        """A node's end was reported: drain now."""
        self._woken.set()

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop`` is set: drain when woken, and every RELEASE_EVERY seconds."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._woken.wait(), RELEASE_EVERY)
            woken = self._woken.is_set()
            self._woken.clear()
            await self.release(unfinished=not woken)

    async def release(self, *, unfinished: bool = True) -> None:
        """One drain of the queues' outboxes (and, with ``unfinished``, of the operations
        left half-done). A failure is logged: the entries wait for the next pass."""
        prefix = self.settings.prefix
        try:
            draining = drain(
                prefix,
                self.queues,
                self.settings.failed_job_ttl_ms,
                self.settings.events,
                held=self.held,
            )
            await run_on(draining, self.driver)
            if unfinished:
                await run_on(finish_unfinished(prefix), self.driver)
        except (ServerError, OSError, ValueError) as exc:
            logger.warning("applying the ends of workflow nodes failed: %s", exc)
