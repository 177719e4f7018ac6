"""The cancel watcher: stops the running attempts whose task's cancel was requested.

``task.cancel()`` on a running task asks (cancel.lua): the id goes into its queue's
cancels set. A runner learns it here: about once a second, and only while it runs tasks,
one read per queue it runs tasks of, all in one round trip (the driver splits it by node
on a cluster). Nothing is sent per task, and an idle runner sends nothing. The heartbeat
comes only every lease/3, too seldom for "stops within a second or so".

The request is told to the attempt's job (``Job.request_cancel_``): an async perform is
cancelled, a perform in a child process is killed, a sync perform in a thread sees
``job.cancelled`` and returns early; either way the attempt ends as cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

from .. import config
from .._redis import commands
from .._redis.drivers import AsyncDriverProtocol
from .._redis.keys import queue_keys
from ..errors import ServerError
from ..jobs.job import Job
from . import isolation
from .slots import Slots

logger = logging.getLogger("culex")

CHECK_EVERY = 1.0  # seconds between two reads of the cancel requests
CANCEL_REQUESTED = "culex: the task's cancel was requested"  # the message of that cancel


class CancelWatcher:
    """Every CHECK_EVERY seconds while attempts run in ``slots``, reads the cancel
    requests of their queues and cancels each attempt asked for. A read that fails is not
    repeated: the next one comes anyway."""

    def __init__(
        self, settings: config.Settings, driver: AsyncDriverProtocol, slots: Slots
    ) -> None:
        self.settings = settings
        self.driver = driver
        self.slots = slots

    async def run(self, stop: asyncio.Event) -> None:
        """Until ``stop`` is set: wait CHECK_EVERY, then check, if any task runs."""
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), CHECK_EVERY)
            if stop.is_set():
                return
            held = set(self.slots.held())
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

    def cancel(self, queue: str, task_id: str) -> None:
        """The task's cancel was requested: stop its attempt. Python cannot stop a thread:
        a sync perform sees ``job.cancelled`` and returns early."""
        found = self.slots.find(queue, task_id)
        if found is None:
            return
        run, job = found
        if job.isolation == "process" and not job.async_perform_:
            # Asked again at each check while it runs: a child forked just after a kill
            # found none is killed at the next.
            job.request_cancel_()
            asyncio.get_running_loop().run_in_executor(None, isolation.kill, [task_id])
            return
        if job.request_cancel_() and job.async_perform_:
            run.cancel(CANCEL_REQUESTED)


def check_cancel_requested(job: Job, exc: asyncio.CancelledError) -> None:
    """An attempt's task was cancelled: by CancelWatcher.cancel (its cancel was requested:
    the attempt ends, as cancelled), or by a stop of the runner, which goes on as a stop
    (the task is handed back): ``exc`` is raised again then."""
    # (the field, not the property: a job class may have a `cancelled` of its own)
    if not job._cancel_requested or exc.args != (CANCEL_REQUESTED,):
        raise exc
    current = asyncio.current_task()
    if current is not None and current.uncancel():  # (a stop asked as well)
        raise exc
