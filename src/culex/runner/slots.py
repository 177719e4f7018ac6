"""The runner's slots: the attempts running now, one asyncio task each, and how many more fit.

The Runner owns them: it takes a slot for each claimed task it starts, and the slot frees
when that task's asyncio task ends. The claimer counts the free slots and waits on
``freed`` when there are none; the cancel watcher finds a running attempt's job here
(culex.runner.cancels); a stop waits for what still runs and hands it back
(culex.runner.stopping).
"""

from __future__ import annotations

import asyncio
import logging

from .._redis.claims import Claimed
from ..jobs.job import Job

logger = logging.getLogger("culex")


class Slots:
    """``capacity`` slots (the runner's concurrency), with what runs in each one taken."""

    __slots__ = ("capacity", "freed", "jobs", "running", "threaded")

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        # The slots taken: each attempt's asyncio task, and the claimed task it runs.
        self.running: dict[asyncio.Task[None], Claimed] = {}
        # The job object of each attempt whose perform runs now (a cancel stops it).
        self.jobs: dict[Claimed, Job] = {}
        # The running tasks whose sync perform runs in a thread (a stop cannot end those).
        self.threaded: set[Claimed] = set()
        self.freed = asyncio.Event()  # set as a slot frees

    def free(self) -> int:
        """How many more attempts fit."""
        return self.capacity - len(self.running)

    def take(self, task: asyncio.Task[None], claimed: Claimed) -> None:
        """A slot for ``task``, which runs ``claimed``, until it ends."""
        self.running[task] = claimed
        task.add_done_callback(self.release)

    def release(self, task: asyncio.Task[None]) -> None:
        """Free the slot of ``task``, which ended (its done callback)."""
        claimed = self.running.pop(task, None)
        if claimed is not None:
            self.threaded.discard(claimed)
        self.freed.set()
        if not task.cancelled() and task.exception() is not None:
            logger.error("a task's execution raised", exc_info=task.exception())

    def held(self) -> list[tuple[str, str]]:
        """The (queue, id) of each attempt whose perform runs now."""
        return [(claimed.queue, claimed.id) for claimed in self.jobs]

    def find(self, queue: str, task_id: str) -> tuple[asyncio.Task[None], Job] | None:
        """The asyncio task and the job of the attempt running task ``task_id`` of
        ``queue``, if one runs here now."""
        held = next((c for c in self.jobs if c.id == task_id and c.queue == queue), None)
        if held is None:
            return None
        run = next(task for task, claimed in self.running.items() if claimed is held)
        return run, self.jobs[held]
