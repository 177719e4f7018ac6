"""Task events of workflow nodes: a node released by its upstreams is enqueued, one its
policy ends is dead without having started (workflow_resolve.lua's events key)."""

from __future__ import annotations

import pytest
import redis

import culex

from ..conftest import running
from .jobs import QUEUES, Journal, WfBrokenJob, WfPriceJob, WfSumJob


@pytest.fixture
def on(r: redis.Redis) -> None:
    Journal.clear()
    WfBrokenJob.failing = True
    culex.configure(events=True)


@pytest.mark.usefixtures("on")
async def test_nodes_released_and_ended_by_their_policy_write_their_events() -> None:
    wf = culex.Workflow()
    ok = wf.add(WfPriceJob(cents=1), name="ok")
    bad = wf.add(WfBrokenJob(), name="bad")
    merge = wf.add(WfSumJob(), after=[ok, bad], name="merge")
    report = wf.add(WfSumJob(), after=[ok], name="report")
    async with running(culex.Runner(run_from=list(QUEUES))):
        run = wf.enqueue()
        assert await run.await_(timeout=30) == "failed"
    found = list(culex.events(list(QUEUES), since="0", follow=False))

    def kinds(task: culex.Task) -> list[str]:
        return [e.kind for e in found if e.task_id == task.id]

    assert kinds(ok) == ["enqueued", "started", "succeeded"]
    assert kinds(bad) == ["enqueued", "started", "dead"]
    assert kinds(merge) == ["dead"]  # (ended by its policy: it never ran)
    assert kinds(report) == ["enqueued", "started", "succeeded"]
    assert {e.job for e in found if e.task_id == merge.id} == {"WfSumJob"}
