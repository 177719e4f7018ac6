"""The cancel watcher: stops the running attempts whose task's cancel was requested.

``task.cancel()`` on a running task asks (cancel.lua): the id goes into its queue's
cancels set. A runner learns it here: about once a second, and only while it runs tasks,
one read per queue it runs tasks of, all in one round trip (the driver splits it by node
on a cluster). Nothing is sent per task, and an idle runner sends nothing. The heartbeat
comes only every lease/3, too seldom for "stops within a second or so".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from .. import config
from .._redis import commands
from .._redis.drivers import AsyncDriverProtocol
from .._redis.keys import queue_keys
from ..errors import ServerError

logger = logging.getLogger("culex")

CHECK_EVERY = 1.0  # seconds between two reads of the cancel requests


class CancelWatcher:
    """Every CHECK_EVERY seconds while ``running()`` names tasks (queue, id), reads the
    cancel requests of their queues and calls ``cancel(queue, id)`` for each one held. A
    read that fails is not repeated: the next one comes anyway."""

    def __init__(
        self,
        settings: config.Settings,
        driver: AsyncDriverProtocol,
        running: Callable[[], Iterable[tuple[str, str]]],
        cancel: Callable[[str, str], None],
    ) -> None:
        self.settings = settings
        self.driver = driver
        self.running = running
        self.cancel = cancel

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop`` is set: wait CHECK_EVERY, then check, if any task runs."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), CHECK_EVERY)
            if stop.is_set():
                return
            held = set(self.running())
            if held:
                await self.check(held)

    async def check(self, held: set[tuple[str, str]]) -> None:
        """One read of the cancel requests of the queues of ``held``."""
        queues = sorted({queue for queue, _ in held})
        calls = [commands.cancel_requests(queue_keys(self.settings.prefix, q)) for q in queues]
        try:
            results = await self.driver.run_many(calls)
        except ServerError as exc:
            logger.warning("reading cancel requests failed: %s", exc)
            return
        for queue, requested in zip(queues, results, strict=True):
            if isinstance(requested, ServerError):
                logger.warning("reading the cancel requests of %s failed: %s", queue, requested)
                continue
            for task_id in requested:
                if (queue, task_id) in held:
                    self.cancel(queue, task_id)
