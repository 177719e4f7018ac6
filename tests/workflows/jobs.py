"""The jobs the workflow tests run: each records when it started and ended, outside Redis."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta
from decimal import Decimal
from typing import ClassVar

import culex

QUEUES = ("wf-a", "wf-b")


class Journal:
    """What ran, when (monotonic): node task id -> (start, end)."""

    starts: ClassVar[dict[str, float]] = {}
    ends: ClassVar[dict[str, float]] = {}
    seen: ClassVar[dict[str, dict[str, culex.Upstream]]] = {}

    @classmethod
    def clear(cls) -> None:
        cls.starts.clear()
        cls.ends.clear()
        cls.seen.clear()


class WfPriceJob(culex.QueuedJob):
    """Succeeds with a Decimal (a typed result its downstreams read back typed)."""

    queue = "wf-a"
    cents: int

    def perform(self) -> Decimal:
        Journal.starts[self.task_id] = time.monotonic()
        time.sleep(0.01)
        Journal.ends[self.task_id] = time.monotonic()
        return Decimal(self.cents) / 100


class WfSumJob(culex.QueuedJob):
    """Sums its upstreams' results; records what it saw of them."""

    queue = "wf-b"

    def perform(self) -> Decimal:
        Journal.starts[self.task_id] = time.monotonic()
        up = self.upstream()
        Journal.seen[self.task_id] = up
        Journal.ends[self.task_id] = time.monotonic()
        return sum((u.result for u in up.values() if isinstance(u.result, Decimal)), Decimal(0))


class WfAsyncSumJob(culex.QueuedJob):
    """WfSumJob's async twin, on the other queue."""

    queue = "wf-a"

    async def perform(self) -> Decimal:
        Journal.starts[self.task_id] = time.monotonic()
        up = await self.aupstream()
        Journal.seen[self.task_id] = up
        Journal.ends[self.task_id] = time.monotonic()
        return sum((u.result for u in up.values() if isinstance(u.result, Decimal)), Decimal(0))


class WfBrokenJob(culex.QueuedJob):
    """Dies at once (no retry) while ``failing`` is set."""

    queue = "wf-a"
    failing: ClassVar[bool] = True

    def perform(self) -> str:
        Journal.starts[self.task_id] = time.monotonic()
        Journal.ends[self.task_id] = time.monotonic()
        if WfBrokenJob.failing:
            self.fail("out of paper", retry=False)
        return "printed"


class WfFlakyJob(culex.QueuedJob):
    """Fails its first ``failures`` attempts, then succeeds; retries come 10 ms apart."""

    queue = "wf-b"
    max_retries = 3
    failures: int = 2

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(milliseconds=10)

    def perform(self) -> int:
        Journal.starts.setdefault(self.task_id, time.monotonic())
        if self.attempt <= self.failures:
            raise RuntimeError(f"attempt {self.attempt} fails")
        Journal.ends[self.task_id] = time.monotonic()
        return self.attempt


class WfForeverJob(culex.QueuedJob):
    """Runs until cancelled."""

    queue = "wf-a"

    async def perform(self) -> None:
        Journal.starts[self.task_id] = time.monotonic()
        await asyncio.Event().wait()


class WorkflowTextJob(culex.QueuedJob):
    """Returns its text."""

    queue = "wf-a"
    text: str

    def perform(self) -> str:
        return self.text


def chain() -> tuple[culex.Workflow, culex.Task, culex.Task]:
    """A run of two nodes, ``first`` (5 cents, on wf-a) then ``second`` (their sum, wf-b)."""
    wf = culex.Workflow()
    first = wf.add(WfPriceJob(cents=5), name="first")
    second = wf.add(WfSumJob(), after=[first], name="second")
    return wf, first, second


def a_runner() -> culex.Runner:
    """A runner of both queues, with the journal cleared."""
    Journal.clear()
    return culex.Runner(run_from=list(QUEUES))
