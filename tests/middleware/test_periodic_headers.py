"""Periodic jobs: the middleware's on_enqueue runs for a runner's slot (schedule.lua stores
the headers on the task, not on the job's record) and for a trigger; the attempt goes
through around_perform as any other."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import timedelta
from typing import cast

import pytest
import redis

import culex
from culex._redis.keys import queue_keys

from ..conftest import await_until, running
from .jobs import Recording, seen


@pytest.fixture
def periodic() -> Iterator[type[culex.PeriodicJob]]:
    class MwPeriodicJob(culex.PeriodicJob):
        queue = "mw_periodic"
        run_every = timedelta(hours=1)
        run_on_start = True

        def perform(self) -> dict[str, str]:
            return self.headers

    yield MwPeriodicJob
    culex.registry.remove(MwPeriodicJob)


async def test_a_slot_and_a_trigger_carry_the_headers(
    r: redis.Redis, periodic: type[culex.PeriodicJob]
) -> None:
    culex.configure(middleware=[Recording("audit", header="by")], successful_job_ttl=60)
    keys = queue_keys("culex", "mw_periodic")
    async with running(culex.Runner(run_from=["mw_periodic"])):

        def slot_ids() -> list[str]:
            found = cast(list[bytes], r.keys(keys.task("*")))
            return [key.decode().rsplit(":task:", 1)[1] for key in found]

        (slot,) = await await_until(slot_ids, what="the slot's task (run_on_start)")
        assert await culex.Task(slot, "mw_periodic").aresult(timeout=20) == {"by": "audit"}
        triggered = culex.periodic.trigger(periodic)
        assert await triggered.aresult(timeout=20) == {"by": "audit"}
    record = r.hgetall(keys.periodic("MwPeriodicJob"))
    assert b"headers" not in record and record[b"job"] == b"MwPeriodicJob"
    assert seen.count(("audit", "on_enqueue", "MwPeriodicJob")) >= 2
    assert ("audit", "before") in seen
