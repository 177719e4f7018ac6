"""A producer that stores a large run for longer than the staging deadline keeps its run:
each of its round trips pushes the deadline back, so a runner's pass that comes while it
stores leaves the run be (culex.workflows.enqueueing)."""

from __future__ import annotations

import time

import pytest
import redis

import culex
from culex._redis import scripts
from culex.server import configured
from culex.server.procedures import run_sync
from culex.workflows import enqueueing, release

from .jobs import WfPriceJob as PriceJob

STAGE_MS = 1_000
PAUSE = 0.35  # after each round trip that stores nodes: the stores take 2 s in all


def test_a_producer_storing_past_the_first_deadline_keeps_its_run(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(enqueueing, "STAGE_MS", STAGE_MS)
    monkeypatch.setattr(enqueueing, "CHUNK", 1)  # a call a node: 6 trips of adds, 6 of stores
    wf = culex.Workflow()
    first = wf.add(PriceJob(cents=1))
    for _ in range(47):
        wf.add(PriceJob(cents=1), after=[first])
    driver = configured.sync_driver(None)
    steps = wf._procedure()
    step = next(steps)
    passes = 0
    with pytest.raises(StopIteration) as done:
        while True:
            calls = step if isinstance(step, list) else [step]
            reply = driver.run_many(calls) if isinstance(step, list) else driver.run(step)
            if any(call.script is scripts.WORKFLOW_ENQUEUE for call in calls):
                time.sleep(PAUSE)  # a slow store; meanwhile, a runner's pass:
                passes += run_sync(release.finish_unfinished("culex"))
            step = steps.send(reply)
    run = done.value.value
    assert passes >= 1, "no runner's pass looked at the run while it was stored"
    assert run.state() == "running"
    assert first.state() == culex.TaskState.WAITING
