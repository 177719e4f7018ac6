"""The jobs of the tests of ``culex workflow`` and of the dashboard's run page: types of
their own (two job classes of one type cannot be loaded in one process: tests/workflows/
jobs.py's FlakyJob has culex.demo's type), on two queues of their own."""

from __future__ import annotations

import asyncio
from typing import ClassVar

import culex

QUEUES = ("wf-shown-a", "wf-shown-b")


class ShownStepJob(culex.QueuedJob):
    """Succeeds with its number."""

    queue = "wf-shown-a"
    started: ClassVar[set[str]] = set()  # the ids of the tasks of this module that started
    n: int

    def perform(self) -> int:
        ShownStepJob.started.add(self.task_id)
        return self.n


class ShownMergeJob(culex.QueuedJob):
    """Sums its upstreams' results, on the other queue."""

    queue = "wf-shown-b"

    def perform(self) -> int:
        ShownStepJob.started.add(self.task_id)
        return sum(u.result for u in self.upstream().values() if isinstance(u.result, int))


class ShownBrokenJob(culex.QueuedJob):
    """Dies at once (no retry) while ``failing`` is set."""

    queue = "wf-shown-a"
    failing: ClassVar[bool] = True

    def perform(self) -> str:
        ShownStepJob.started.add(self.task_id)
        if ShownBrokenJob.failing:
            self.fail("out of paper", retry=False)
        return "printed"


class ShownForeverJob(culex.QueuedJob):
    """Runs until cancelled."""

    queue = "wf-shown-a"

    async def perform(self) -> None:
        ShownStepJob.started.add(self.task_id)
        await asyncio.Event().wait()


def reset() -> None:
    ShownStepJob.started.clear()
    ShownBrokenJob.failing = True
