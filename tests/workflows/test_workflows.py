"""Workflows against a real server and real runners: the API, each failure policy,
cancel, retry, and the runs that end although their producer or drainer stopped."""

from __future__ import annotations

from decimal import Decimal

import pytest
import redis

import culex
from culex._redis import claims, reports, workflows
from culex._redis.keys import queue_keys, run_keys
from culex.server.procedures import run_sync
from culex.workflows import enqueueing, release

from ..conftest import driver_of, running
from .jobs import (
    QUEUES,
    Journal,
    WfBrokenJob,
    WfFlakyJob,
    WfForeverJob,
    WfPriceJob,
    WfSumJob,
    WorkflowTextJob,
)

pytestmark = pytest.mark.usefixtures("fresh")


@pytest.fixture
def fresh(r: redis.Redis) -> None:
    Journal.clear()
    WfBrokenJob.failing = True


def runner() -> culex.Runner:
    return culex.Runner(run_from=list(QUEUES))


def assert_started_after_upstreams(run: culex.WorkflowRun) -> None:
    """No node started before each of its upstreams had ended (recorded outside Redis)."""
    views = {view.name: view for view in run.nodes()}
    for view in views.values():
        if view.task.id not in Journal.starts:
            continue
        for name in view.after:
            upstream = views[name].task.id
            if upstream in Journal.ends:
                assert Journal.ends[upstream] <= Journal.starts[view.task.id], (name, view.name)


async def test_a_diamond_runs_in_order_and_its_merge_reads_typed_results() -> None:
    wf = culex.Workflow(name="nightly-report")
    a = wf.add(WfPriceJob(cents=150), name="fetch1")
    b = wf.add(WfPriceJob(cents=275), name="fetch2")
    m = wf.add(WfSumJob(), after=[a, b], name="merge")
    n = wf.add(WfSumJob(), after=[m], name="notify", if_upstream_fails="run")
    async with running(runner()):
        run = await wf.aenqueue()
        assert await run.await_(timeout=30) == "succeeded"
    assert run.state() == "succeeded"
    assert run.tasks() == {"fetch1": a, "fetch2": b, "merge": m, "notify": n}
    assert Journal.seen[m.id] == {
        "fetch1": culex.Upstream("succeeded", Decimal("1.5"), None),
        "fetch2": culex.Upstream("succeeded", Decimal("2.75"), None),
    }
    assert m.result(timeout=1) == Decimal("4.25")
    assert Journal.seen[n.id]["merge"].result == Decimal("4.25")
    assert_started_after_upstreams(run)


async def test_a_dead_upstream_ends_its_downstreams_dead_unless_they_run_anyway() -> None:
    wf = culex.Workflow()
    ok = wf.add(WfPriceJob(cents=1), name="ok")
    bad = wf.add(WfBrokenJob(), name="bad")
    merge = wf.add(WfSumJob(), after=[ok, bad], name="merge")
    after_merge = wf.add(WfSumJob(), after=[merge], name="after-merge")
    report = wf.add(WfSumJob(), after=[merge], name="report", if_upstream_fails="run")
    async with running(runner()):
        run = wf.enqueue()
        assert await run.await_(timeout=30) == "failed"
    for task in (merge, after_merge):
        assert task.id not in Journal.starts  # never ran
        assert task.state() == culex.TaskState.DEAD
    assert merge.info()["last_error"] == f"upstream bad ({bad.id}) ended dead: out of paper"
    assert after_merge.info()["last_error"].startswith(f"upstream merge ({merge.id}) ended dead")
    seen = Journal.seen[report.id]["merge"]
    assert seen.state == "dead" and seen.result is None and "bad" in str(seen.error)
    assert report.state() == culex.TaskState.SUCCEEDED


async def test_an_upstreams_retries_are_waited_through() -> None:
    flaky = WfFlakyJob(failures=2)
    run_id = ""
    async with running(runner()):
        run = culex.chain(flaky, WfSumJob()).enqueue()
        run_id = run.id
        assert await run.await_(timeout=30) == "succeeded"
    views = {view.name: view for view in culex.WorkflowRun(run_id).nodes()}
    first, second = sorted(views.values(), key=lambda v: v.after)
    assert first.task.result(timeout=1) == 3  # its third attempt
    assert Journal.seen[second.task.id][first.name].result == 3


async def test_a_chord_runs_its_body_after_every_member() -> None:
    async with running(runner()):
        run = culex.group(*(WfPriceJob(cents=c) for c in (1, 2, 3))).then(WfSumJob()).enqueue()
        assert await run.await_(timeout=30) == "succeeded"
    body = next(v for v in run.nodes() if v.after)
    assert body.task.result(timeout=1) == Decimal("0.06")
    assert len(body.after) == 3
    assert_started_after_upstreams(run)


async def test_cancel_ends_the_run_cancelled_and_no_blocked_node_runs() -> None:
    wf = culex.Workflow()
    forever = wf.add(WfForeverJob(), name="forever")
    later = wf.add(WfSumJob(), after=[forever], name="later", if_upstream_fails="run")
    async with running(runner()):
        run = await wf.aenqueue()
        while forever.id not in Journal.starts:
            await forever.astate()  # (a round trip a turn, until it runs)
        assert await run.acancel() is True
        assert await run.await_(timeout=30) == "cancelled"
    assert later.id not in Journal.starts
    assert later.info()["last_error"] == "cancelled: its workflow run was cancelled"
    assert forever.state() == culex.TaskState.DEAD
    assert run.cancel() is False  # (it has ended)


async def test_retry_runs_the_dead_nodes_and_those_that_ended_because_of_them() -> None:
    wf = culex.Workflow()
    bad = wf.add(WfBrokenJob(), name="bad")
    merge = wf.add(WfSumJob(), after=[bad], name="merge")
    async with running(runner()):
        run = wf.enqueue()
        assert await run.await_(timeout=30) == "failed"
        with pytest.raises(culex.WorkflowError):
            culex.Workflow().add(WfSumJob(), after=[bad])
        WfBrokenJob.failing = False
        assert bad.retry() is False  # (a node runs again with its run, never alone)
        assert bad.state() == culex.TaskState.DEAD
        assert await run.aretry() == 2
        assert await run.await_(timeout=30) == "succeeded"
    assert bad.result(timeout=1) == "printed"
    assert merge.state() == culex.TaskState.SUCCEEDED


def test_bad_workflows_are_refused_before_anything_is_stored(r: redis.Redis) -> None:
    wf = culex.Workflow()
    a = wf.add(WfPriceJob(cents=1), name="a")
    other = culex.Workflow()
    foreign = other.add(WfPriceJob(cents=2))
    with pytest.raises(culex.WorkflowError, match="not a node of this workflow"):
        wf.add(WfSumJob(), after=[foreign])
    with pytest.raises(culex.WorkflowError, match="used twice"):
        wf.add(WfSumJob(), name="a")
    with pytest.raises(TypeError, match="QueuedJob instance"):
        wf.add(WfSumJob)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="list of tasks"):
        wf.add(WfSumJob(), after=a)  # type: ignore[arg-type]
    with pytest.raises(culex.WorkflowError, match='"dead" or "run"'):
        wf.add(WfSumJob(), after=[a], if_upstream_fails="maybe")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_payload_bytes"):
        wf.add(WorkflowTextJob(text="x" * 600_000))  # (more than the default 512 KiB)
    with pytest.raises(culex.WorkflowError, match="at least one node"):
        culex.Workflow().enqueue()
    assert r.dbsize() == 0  # nothing stored by any of them
    wf.enqueue()
    with pytest.raises(culex.WorkflowError, match="enqueued already"):
        wf.add(WfSumJob(), after=[a])
    with pytest.raises(culex.WorkflowError, match="enqueued already"):
        wf.enqueue()


async def test_an_end_whose_drainer_died_is_applied_by_another_runner(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node ended (its report landed, its outbox entry written), and the runner that
    took the entry died before applying it: when the entry's lease runs out, the next
    runner's pass applies it, and the run ends."""
    monkeypatch.setattr(release, "LEASE_MS", 300)
    wf = culex.Workflow()
    first = wf.add(WfPriceJob(cents=5), name="first")
    second = wf.add(WfSumJob(), after=[first], name="second")
    run = wf.enqueue()
    d = driver_of(r)
    keys = queue_keys("culex", "wf-a")
    claimed = d.run(
        claims.claim(keys, limit=1, lease_ms=30_000, promote_limit=10, dead_ttl_ms=60_000)
    ).tasks
    assert [c.id for c in claimed] == [first.id] and claimed[0].run == run.id
    assert d.run(reports.complete(keys, [(first.id, 1, '"0.05"', 60_000)])) == []
    taken = d.run(workflows.take(keys, limit=10, lease_ms=300))  # ... and its taker dies
    assert [entry.task_id for entry in taken] == [first.id]
    assert second.state() == culex.TaskState.BLOCKED
    async with running(runner()):
        assert await run.await_(timeout=30) == "succeeded"
    assert Journal.seen[second.id]["first"].result == Decimal("0.05")
    assert r.zcard(keys.outbox) == 0


def test_a_producer_that_stops_before_the_commit_leaves_nothing_that_runs(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(enqueueing, "STAGE_MS", 200)
    wf = culex.Workflow()
    a = wf.add(WfPriceJob(cents=1))
    b = wf.add(WfSumJob(), after=[a])
    steps = wf._procedure()
    run_keys_seen = _drive_until(steps, lambda call: call.args[:1] == ("commit",))
    assert r.hget(queue_keys("culex", "wf-b").task(b.id), "state") == b"blocked"
    pytest.importorskip("time").sleep(0.3)
    assert run_sync(release.finish_unfinished("culex")) == 1
    for task in (a, b):
        assert not r.exists(queue_keys("culex", task.queue).task(task.id))
    assert r.hget(run_keys_seen.record, "state") == b"discarded"


async def test_a_producer_that_stops_after_the_commit_leaves_a_run_that_ends(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(enqueueing, "STAGE_MS", 200)
    wf = culex.Workflow()
    a = wf.add(WfPriceJob(cents=1))
    wf.add(WfSumJob(), after=[a])
    steps = wf._procedure()
    keys = _drive_until(steps, lambda call: call.args[:1] == ("commit",), include=True)
    assert r.hget(keys.record, "state") == b"running"  # committed, nothing started
    assert r.hget(queue_keys("culex", "wf-a").task(a.id), "state") == b"blocked"
    async with running(runner()):
        assert await culex.WorkflowRun(keys.id).await_(timeout=30) == "succeeded"


def _drive_until(steps, stop, include=False):  # type: ignore[no-untyped-def]
    """Drive a procedure on the configured server until the call ``stop`` names; then drop
    it, as a producer that died there. The run's keys."""
    from culex.server import configured

    driver = configured.sync_driver(None)
    seen = None
    step = next(steps)
    while True:
        calls = step if isinstance(step, list) else [step]
        for call in calls:
            if call.args[:1] == ("begin",):
                seen = run_keys("culex", str(call.args[1]))
        if any(stop(call) for call in calls) and not include:
            return seen
        reply = driver.run_many(calls) if isinstance(step, list) else driver.run(step)
        if any(stop(call) for call in calls):
            return seen
        step = steps.send(reply)
