"""Job classes of the culex.testing tests, each on a queue of its own."""

from __future__ import annotations

import asyncio
from datetime import timedelta
from typing import ClassVar

import culex

HOUR = timedelta(hours=1)


class SumJob(culex.QueuedJob):
    queue = "testing_add"
    a: int
    b: int = 0

    def perform(self) -> int:
        return self.a + self.b


class LeasedJob(culex.QueuedJob):
    """Takes a lease of its own from what it stored (``lease``), as the runner's tests'
    RenamedParamJob does: the lease is read once the job object is made."""

    queue = "testing_add"
    n: int = 0

    @classmethod
    def from_params(cls, raw: object) -> culex.Job:
        lease = raw.pop("lease", None) if isinstance(raw, dict) else None
        job = super().from_params(raw)
        if lease is not None:
            setattr(job, "lease", lease)  # noqa: B010
        return job

    def perform(self) -> int:
        return self.n


class Broken(Exception):
    """What ShakyJob raises."""


class ShakyJob(culex.QueuedJob):
    """Fails until its attempt reaches ``succeed_on``; each retry waits an hour."""

    queue = "testing_flaky"
    succeed_on: int = 0  # 0: never

    def perform(self) -> str:
        if self.attempt != self.succeed_on:
            raise Broken(f"attempt {self.attempt} broke")
        return "fine"

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return HOUR


class LinkJob(culex.QueuedJob):
    """Enqueues the next link of the chain, forever."""

    queue = "testing_chain"
    link: int = 0

    def perform(self) -> None:
        LinkJob(link=self.link + 1).enqueue()


class StuckJob(culex.QueuedJob):
    """Waits on an event that is never set (until the drain's timeout cancels it)."""

    queue = "testing_hang"

    async def perform(self) -> None:
        await asyncio.Event().wait()


class DoubleJob(culex.QueuedJob):
    queue = "testing_async"
    n: int

    async def perform(self) -> int:
        await asyncio.sleep(0)
        return 2 * self.n


class Point:
    def __init__(self, x: int, y: int) -> None:
        self.x, self.y = x, y

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)

    def __hash__(self) -> int:
        return hash((self.x, self.y))


class PlotJob(culex.QueuedJob):
    """Its hooks do not agree: a Point stored as a list is read back as a dict."""

    queue = "testing_plot"
    point: Point
    calls: ClassVar[list[str]] = []

    @staticmethod
    def serialize_point(point: Point) -> list[int]:
        return [point.x, point.y]

    @staticmethod
    def deserialize_point(raw: dict[str, int]) -> Point:
        return Point(raw["x"], raw["y"])

    def perform(self) -> None:
        PlotJob.calls.append("perform")


class HookedJob(culex.QueuedJob):
    """Records its hooks and the task fields a runner sets."""

    queue = "testing_hooked"
    word: str
    calls: ClassVar[list[str]] = []

    def before_perform(self) -> None:
        HookedJob.calls.append(f"before {self.attempt}")

    def perform(self) -> str:
        HookedJob.calls.append("perform")
        return self.word.upper()

    def after_perform(self) -> None:
        HookedJob.calls.append("after")


class UnstorableJob(culex.QueuedJob):
    """Returns a value that does not fit its return annotation."""

    queue = "testing_set"

    def perform(self) -> int:
        return "not an int"  # type: ignore[return-value]


class EveryHourJob(culex.PeriodicJob):
    queue = "testing_tick"
    run_every = HOUR
    ran: ClassVar[int] = 0

    def perform(self) -> int:
        EveryHourJob.ran += 1
        return EveryHourJob.ran


class ForkedJob(culex.QueuedJob):
    """Runs in a child process; fails when asked to."""

    queue = "testing_child"
    broken: bool = False
    isolation = "process"

    def perform(self) -> int:
        if self.broken:
            raise Broken("in the child")
        return 7


class SlowApiJob(culex.QueuedJob):
    """Fails with a TimeoutError of its own (an API that did not answer)."""

    queue = "testing_slow_api"
    max_retries = 0

    def perform(self) -> None:
        raise TimeoutError("the API did not answer")
