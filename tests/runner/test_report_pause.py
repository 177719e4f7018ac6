"""The reporter pauses (its back-off) only before it sends outcomes again whose report
failed: an outcome that came while a batch was on the wire goes right after it. (It used
to wait the back-off's 50 ms, which a workflow's downstream waited too: its upstream's
end reaches the releaser with the report.)"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import redis

import culex
from culex import config
from culex._redis import claims
from culex._redis.calls import Call
from culex._redis.drivers import AsyncDriverProtocol
from culex._redis.keys import queue_keys
from culex.runner.backoff import Backoff
from culex.runner.lease import LeaseKeeper
from culex.runner.outbox import Outbox
from culex.runner.outcome import Outcome
from culex.runner.reporter import Reporter
from culex.server import configured


class PauseJob(culex.QueuedJob):
    queue = "pause"
    n: int

    async def perform(self) -> int:
        return self.n


class CountingBackoff(Backoff):
    """A back-off that counts the pauses asked of it."""

    def __init__(self) -> None:
        super().__init__(0.05, 2.0)
        self.pauses = 0

    def failed(self) -> float:
        self.pauses += 1
        return super().failed()


class ArrivingDriver:
    """The real driver; while the first batch is on the wire, ``late`` joins the outbox,
    as an attempt that ends then."""

    def __init__(self, driver: AsyncDriverProtocol, outbox: Outbox, late: Outcome) -> None:
        self.driver, self.outbox, self.late = driver, outbox, late
        self.batches = 0

    async def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        self.batches += 1
        if self.batches == 1:
            self.outbox.put(self.late)
        return await self.driver.run_many(calls)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.driver, name)


async def test_an_outcome_that_comes_during_a_report_is_sent_without_a_pause(
    r: redis.Redis,
) -> None:
    keys = queue_keys("culex", "pause")
    tasks = [await PauseJob(n=n).aenqueue() for n in (1, 2)]
    driver = await configured.async_driver()
    held = await driver.run(
        claims.claim(keys, limit=2, lease_ms=60_000, promote_limit=0, dead_ttl_ms=1000)
    )
    first, second = (Outcome(claimed, str(n)) for n, claimed in enumerate(held.tasks, 1))
    settings = config.settings()
    outbox = Outbox([first])
    arriving = ArrivingDriver(driver, outbox, second)
    reporter = Reporter(
        settings,
        arriving,
        LeaseKeeper(settings, settings.redis_url or ""),
        outbox,
    )
    reporter.backoff = backoff = CountingBackoff()
    await reporter.flush()
    assert arriving.batches == 2 and not outbox.outcomes
    assert backoff.pauses == 0  # (it was 1: 50 ms before the second batch)
    assert [await task.aresult(timeout=1) for task in tasks] == [1, 2]
