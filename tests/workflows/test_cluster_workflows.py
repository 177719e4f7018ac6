"""Workflows on a Redis Cluster (3 masters): a run's nodes on queues in slots of every
master, its record in a slot of its own, run by a real runner. Every step of a run (store,
release, the outbox, the record, cancel, retry) is a call to one slot; the masters' error
counters show that none got CROSSSLOT (nor MOVED or ASK)."""

from __future__ import annotations

import asyncio
import collections
import time
from collections.abc import Iterator
from typing import ClassVar

import pytest

import culex
from culex._redis.keys import queue_keys, run_keys

from ..conftest import running
from ..server.test_cluster import (
    QUEUES,
    error_counts,
    master_of_queue,
    new_errors,
    on_cluster,  # noqa: F401  (the fixture, used by name)
)
from ..topology import Cluster, keyslot

pytestmark = pytest.mark.usefixtures("on_cluster", "fresh")

SLOT_ERRORS = {"CROSSSLOT", "MOVED", "ASK"}


class Stamps:
    """When each node ran (monotonic), outside Redis: task id -> (start, end)."""

    starts: ClassVar[dict[str, float]] = {}
    ends: ClassVar[dict[str, float]] = {}


@pytest.fixture
def fresh() -> Iterator[None]:
    Stamps.starts.clear()
    Stamps.ends.clear()
    BrokenStep.failing = True
    EndlessStep.endless = True
    yield


class Step(culex.QueuedJob):
    """Returns ``n`` plus its upstreams' results."""

    queue = QUEUES[0]
    n: int = 1

    async def perform(self) -> int:
        Stamps.starts[self.task_id] = time.monotonic()
        ups = await self.aupstream()
        total = self.n + sum(u.result for u in ups.values() if isinstance(u.result, int))
        Stamps.ends[self.task_id] = time.monotonic()
        return total


class Step1(Step):
    queue = QUEUES[1]


class Step2(Step):
    queue = QUEUES[2]


class Step3(Step):
    queue = QUEUES[3]


class Step4(Step):
    queue = QUEUES[4]


class Step5(Step):
    queue = QUEUES[5]


STEPS: tuple[type[Step], ...] = (Step, Step1, Step2, Step3, Step4, Step5)


class BrokenStep(culex.QueuedJob):
    """Dies at once (no retry) while ``failing`` is set."""

    queue = QUEUES[3]
    failing: ClassVar[bool] = True

    async def perform(self) -> int:
        Stamps.starts[self.task_id] = time.monotonic()
        Stamps.ends[self.task_id] = time.monotonic()
        if BrokenStep.failing:
            self.fail("out of ink", retry=False)
        return 100


class EndlessStep(culex.QueuedJob):
    """Runs until cancelled while ``endless`` is set, else returns 5."""

    queue = QUEUES[5]
    endless: ClassVar[bool] = True

    async def perform(self) -> int:
        Stamps.starts[self.task_id] = time.monotonic()
        if EndlessStep.endless:
            await asyncio.Event().wait()
        Stamps.ends[self.task_id] = time.monotonic()
        return 5


def runner() -> culex.Runner:
    return culex.Runner(run_from=list(QUEUES), concurrency=8)


def states(run: culex.WorkflowRun) -> dict[str, str]:
    """Node name -> its task's state."""
    return {view.name: view.fields.get("state", "") for view in run.nodes()}


def assert_on_every_master(cluster: Cluster, tasks: list[culex.Task]) -> None:
    masters = {master_of_queue(cluster, task.queue) for task in tasks}
    assert masters == set(cluster.masters())
    for task in tasks:  # each node's hash is on the master of its queue
        key = queue_keys("culex", task.queue).task(task.id)
        assert master_of_queue(cluster, task.queue).client().exists(key) == 1


def assert_in_order(run: culex.WorkflowRun) -> None:
    """No node started before each of its upstreams had ended."""
    views = {view.name: view for view in run.nodes()}
    for view in views.values():
        for name in view.after:
            up, down = views[name].task.id, view.task.id
            if down in Stamps.starts:
                assert Stamps.ends[up] <= Stamps.starts[down], (name, view.name)


async def test_a_diamond_over_three_masters_succeeds_without_crossslot(cluster: Cluster) -> None:
    before = error_counts(cluster)
    wf = culex.Workflow(name="diamond")
    top = wf.add(Step(n=1), name="top")
    left = wf.add(Step2(n=10), after=[top], name="left")
    right = wf.add(Step4(n=100), after=[top], name="right")
    bottom = wf.add(Step1(n=1000), after=[left, right], name="bottom")
    run = await wf.aenqueue()
    assert keyslot(run_keys("culex", run.id).record) != keyslot(queue_keys("culex", "x").waiting)
    assert_on_every_master(cluster, [top, left, right, bottom])
    assert states(run) == dict.fromkeys(["left", "right", "bottom"], "blocked") | {"top": "waiting"}
    async with running(runner()):
        assert await run.await_(timeout=30) == "succeeded"
    assert states(run) == dict.fromkeys(["top", "left", "right", "bottom"], "succeeded")
    assert await bottom.aresult(timeout=1) == 1000 + (10 + 1) + (100 + 1)
    assert_in_order(run)
    assert not new_errors(before, error_counts(cluster)) & SLOT_ERRORS


async def test_a_chord_over_six_queues_succeeds_without_crossslot(cluster: Cluster) -> None:
    before = error_counts(cluster)
    members = [job(n=i) for i, job in enumerate(STEPS * 4)]  # 24 members, 4 a queue
    wf = culex.group(*members, name="chord").then(Step3(n=0))
    run = await wf.aenqueue()
    assert_on_every_master(cluster, [node.task for node in wf.nodes.values()])
    async with running(runner()):
        assert await run.await_(timeout=30) == "succeeded"
    found = states(run)
    assert len(found) == 25 and set(found.values()) == {"succeeded"}
    body = next(view for view in run.nodes() if view.after)
    assert await body.task.aresult(timeout=1) == sum(range(24))
    assert len(body.after) == 24
    assert_in_order(run)
    assert not new_errors(before, error_counts(cluster)) & SLOT_ERRORS


async def test_a_dead_upstream_on_one_master_fails_the_run_on_the_others(
    cluster: Cluster,
) -> None:
    before = error_counts(cluster)
    wf = culex.Workflow()
    ok = wf.add(Step(n=1), name="ok")
    bad = wf.add(BrokenStep(), name="bad")
    merge = wf.add(Step2(), after=[ok, bad], name="merge")
    after_merge = wf.add(Step4(), after=[merge], name="after-merge")
    report = wf.add(Step1(), after=[merge], name="report", if_upstream_fails="run")
    run = await wf.aenqueue()
    assert_on_every_master(cluster, [ok, bad, merge, after_merge, report])
    async with running(runner()):
        assert await run.await_(timeout=30) == "failed"
    assert states(run) == {
        "ok": "succeeded",
        "bad": "dead",
        "merge": "dead",
        "after-merge": "dead",
        "report": "succeeded",
    }
    assert merge.id not in Stamps.starts and after_merge.id not in Stamps.starts
    assert (await merge.ainfo())["last_error"].startswith(f"upstream bad ({bad.id}) ended dead")
    assert await report.aresult(timeout=1) == 1  # its own n: merge died, no result
    assert (await run.ainfo())["state"] == "failed"
    assert not new_errors(before, error_counts(cluster)) & SLOT_ERRORS


async def test_cancel_then_retry_on_the_cluster(cluster: Cluster) -> None:
    before = error_counts(cluster)
    wf = culex.Workflow()
    first = wf.add(Step(n=1), name="first")
    endless = wf.add(EndlessStep(), after=[first], name="endless")
    later = [wf.add(job(n=1), after=[endless], name=f"later{i}") for i, job in enumerate(STEPS)]
    last = wf.add(Step2(n=1), after=later, name="last")
    run = await wf.aenqueue()
    assert_on_every_master(cluster, [first, endless, *later, last])
    async with running(runner()):
        while endless.id not in Stamps.starts:
            await endless.astate()  # (a round trip a turn, until it runs)
        assert await run.acancel() is True
        assert await run.await_(timeout=30) == "cancelled"
        found = states(run)
        assert found.pop("first") == "succeeded"
        assert set(found.values()) == {"dead"}  # the running one stopped, the rest blocked
        assert not any(task.id in Stamps.starts for task in [*later, last])
        for task in [*later, last]:
            assert (await task.ainfo())["last_error"].startswith("cancelled")

        EndlessStep.endless = False  # retried, it ends this time
        assert await run.aretry() == 2 + len(later)
        assert await run.await_(timeout=30) == "succeeded"
    assert set(states(run).values()) == {"succeeded"}
    assert await last.aresult(timeout=1) == 1 + len(later) * (1 + 5)
    assert int((await run.ainfo())["retries"]) == 1
    assert not new_errors(before, error_counts(cluster)) & SLOT_ERRORS


async def test_retry_of_a_failed_run_on_the_cluster(cluster: Cluster) -> None:
    before = error_counts(cluster)
    wf = culex.Workflow()
    bad = wf.add(BrokenStep(), name="bad")
    downs = [wf.add(job(n=2), after=[bad], name=f"down{i}") for i, job in enumerate(STEPS)]
    async with running(runner()):
        run = await wf.aenqueue()
        assert await run.await_(timeout=30) == "failed"
        assert collections.Counter(states(run).values()) == {"dead": 1 + len(downs)}
        BrokenStep.failing = False
        assert await run.aretry() == 1 + len(downs)
        assert await run.await_(timeout=30) == "succeeded"
    assert set(states(run).values()) == {"succeeded"}
    assert [await task.aresult(timeout=1) for task in downs] == [102] * len(downs)
    assert not new_errors(before, error_counts(cluster)) & SLOT_ERRORS
