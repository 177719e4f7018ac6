"""Durable tasks on a real server and a real runner: steps replayed after a failure, sleeps
and waits for signals that free the runner, signals before and after the wait, timeouts,
the order check, the limits, and fencing."""

from __future__ import annotations

from decimal import Decimal

import pytest
import redis

import culex
from culex import config
from culex._redis import claims, steps
from culex._redis.keys import queue_keys
from culex.jobs import steps as job_steps

from ..conftest import await_until, driver_of, running
from ..topology import Cluster
from . import durable_jobs as jobs

K = queue_keys("culex", jobs.QUEUE)


@pytest.fixture(autouse=True)
def fresh(r: redis.Redis) -> None:
    jobs.ran.clear()
    jobs.DurableRenamedJob.names[:] = ["draft"]


def runner() -> culex.Runner:
    return culex.Runner(run_from=[jobs.QUEUE])


async def test_a_recorded_step_is_not_run_again_by_a_retry() -> None:
    async with running(runner()):
        task = await jobs.DurableChargeJob(cents=1999).aenqueue()
        assert await task.aresult(timeout=30) == "charged 19.99"
    assert jobs.ran[f"{task.id}:charge"] == 1  # the retry got the recorded result back
    assert jobs.ran[f"{task.id}:mail"] == 1
    info = task.info()
    assert info["attempt"] == "2" and info["retry_count"] == "1" and info["steps"] == "2"


async def test_a_sleep_frees_the_runner_and_resumes_after_it() -> None:
    async with running(runner()):
        task = await jobs.DurableSleepJob(seconds=0.3).aenqueue()
        await await_until(lambda: task.state() == culex.TaskState.SCHEDULED, what="the sleep")
        assert task.info()["retry_count"] == "0"  # a sleep is no failure
        assert await task.aresult(timeout=30) == 2  # the second attempt resumed it
    assert (jobs.ran[f"{task.id}:before"], jobs.ran[f"{task.id}:after"]) == (1, 1)
    assert task.info()["retry_count"] == "0"


async def test_a_signal_sent_before_receive_is_returned_at_once() -> None:
    task = jobs.DurableApprovalJob().enqueue()
    assert task.signal("approved", {"by": "ops"}) == "kept"
    async with running(runner()):
        assert await task.aresult(timeout=30) == "approved by ops"
    assert task.info()["attempt"] == "1"  # never suspended


async def test_receive_waits_holding_no_runner_until_the_signal_comes() -> None:
    async with running(runner()):
        task = await jobs.DurableApprovalJob().aenqueue()
        await await_until(lambda: task.info().get("awaiting") == "approved", what="the wait")
        assert task.state() == culex.TaskState.SCHEDULED
        assert await task.asignal("approved", {"by": "ana"}) == "delivered"
        assert await task.aresult(timeout=30) == "approved by ana"
    assert jobs.ran[f"{task.id}:asked"] == 1
    assert task.signal("approved", {}) == "ended"


async def test_receive_times_out_by_the_servers_clock() -> None:
    async with running(runner()):
        task = await jobs.DurableApprovalJob(wait_s=0.2).aenqueue()
        assert await task.aresult(timeout=30) == "timed out"
    assert "awaiting" not in task.info()


async def test_the_async_twins() -> None:
    async with running(runner()):
        task = await jobs.DurableAsyncJob().aenqueue()
        await await_until(lambda: task.info().get("awaiting") == "go", what="the wait")
        await task.asignal("go", "now")
        assert await task.aresult(timeout=30) == "first now second"
    assert (jobs.ran[f"{task.id}:first"], jobs.ran[f"{task.id}:second"]) == (1, 1)


async def test_steps_and_sleeps_in_a_child_process() -> None:
    async with running(runner()):
        task = await jobs.DurableChildJob().aenqueue()
        assert await task.aresult(timeout=30) == "done"
    assert task.info()["attempt"] == "2" and task.info()["steps"] == "2"


async def test_steps_that_changed_under_a_running_task_end_it_dead_naming_both() -> None:
    async with running(runner()):
        task = await jobs.DurableRenamedJob().aenqueue()
        await await_until(lambda: task.info().get("steps") == "1", what="the first step")
        jobs.DurableRenamedJob.names[0] = "final"  # (the code changes before the retry)
        with pytest.raises(culex.TaskFailed) as failed:
            await task.aresult(timeout=30)
    assert "recorded step 'draft'" in failed.value.reason
    assert "reaches step 'final'" in failed.value.reason
    # (the other way a name changes: one made of a random value, new on each attempt)
    assert "a place's name must be the same on every attempt" in failed.value.reason
    assert task.info()["attempt"] == "2"  # dead at once: no third attempt


async def test_a_task_past_the_step_limit_ends_dead_with_the_limit_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(job_steps, "MAX_STEPS", 3)
    async with running(runner()):
        task = await jobs.DurableManyStepsJob(steps=4).aenqueue()
        with pytest.raises(culex.TaskFailed, match="at most 3 steps"):
            await task.aresult(timeout=30)
    assert task.info()["steps"] == "3"


def test_a_stale_attempts_step_is_refused_and_writes_nothing(r: redis.Redis) -> None:
    task = jobs.DurableSleepJob().enqueue()
    d = driver_of(r)
    d.run(claims.claim(K, limit=1, lease_ms=60_000, promote_limit=10, dead_ttl_ms=60_000))
    call = steps.step(K, task.id, 2, 0, "s", "1", max_steps=9, max_step_bytes=9, max_task_bytes=9)
    before = r.hgetall(K.task(task.id))
    assert d.run(call) == ("stale",)  # attempt 2 does not hold it: attempt 1 does
    assert r.hgetall(K.task(task.id)) == before
    ok = steps.step(K, task.id, 1, 0, "s", "1", max_steps=9, max_step_bytes=9, max_task_bytes=9)
    assert d.run(ok) == ("recorded",)
    assert d.run(ok)[0] == "conflict"  # (a place is recorded once)
    big = steps.step(K, task.id, 1, 1, "t", "12345678", max_steps=9, max_step_bytes=9,
                     max_task_bytes=8)  # fmt: skip
    assert d.run(big) == ("limit", "task")


def test_outside_a_runner_a_step_just_runs() -> None:
    from culex.testing import perform_now

    assert perform_now(jobs.DurableChargeJob(cents=5, fail_once=False)) == "charged 0.05"
    assert Decimal("0.05") > 0


async def test_a_durable_node_of_a_workflow_sleeps_and_its_run_ends() -> None:
    wf = culex.Workflow()
    sleeper = wf.add(jobs.DurableSleepJob(seconds=0.1))
    after = wf.add(jobs.DurableApprovalJob(wait_s=0.1), after=[sleeper])
    async with running(runner()):
        run = await wf.aenqueue()
        assert await run.await_(timeout=30) == "succeeded"
    assert sleeper.result(timeout=1) == 2 and after.result(timeout=1) == "timed out"


async def test_on_a_cluster_a_durable_task_steps_sleeps_and_gets_its_signal(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Everything of a durable task lives in its queue's slot: no script crosses slots."""
    monkeypatch.setenv("CULEX_REDIS_URL", cluster.url)
    config.reset()
    try:
        async with running(runner()):
            task = await jobs.DurableAsyncJob().aenqueue()
            await await_until(
                lambda: task.info().get("awaiting") == "go", timeout=30, what="the wait"
            )
            assert await task.asignal("go", "now") == "delivered"
            assert await task.aresult(timeout=30) == "first now second"
    finally:
        monkeypatch.undo()
        config.reset()
