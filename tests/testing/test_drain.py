"""drain and adrain against the real server: the runner's own scripts, in this process."""

from __future__ import annotations

import asyncio
import traceback
from collections.abc import Iterator

import pytest
import redis

import culex
from culex._redis import scripts
from culex.server.embedded import EmbeddedServer
from culex.testing import Attempt, AttemptFailed, DrainTimeout, adrain, drain, enqueued

from ..conftest import members
from .jobs import (
    HOUR,
    Broken,
    DoubleJob,
    ForkedJob,
    LeasedJob,
    LinkJob,
    ShakyJob,
    SlowApiJob,
    StuckJob,
    SumJob,
)


@pytest.fixture
def client(culex_server: EmbeddedServer) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(culex_server.url) as connected:
        yield connected


def test_drain_runs_a_ready_task_and_returns_its_attempt(client: redis.Redis) -> None:
    task = SumJob(a=2, b=3).enqueue()
    assert drain(["testing_add"]) == [
        Attempt("testing_add", task.id, "SumJob", {"a": 2, "b": 3}, 1, "succeeded", 5)
    ]
    assert task.state() is culex.TaskState.SUCCEEDED  # reported by complete.lua
    assert task.result(timeout=1) == 5
    assert drain(["testing_add"]) == []  # nothing left


def test_fail_fast_reraises_the_jobs_own_exception_once_the_failure_is_reported(
    client: redis.Redis,
) -> None:
    task = ShakyJob().enqueue()
    with pytest.raises(Broken, match="attempt 1 broke") as raised:
        drain("testing_flaky")
    frames = [frame.name for frame in traceback.extract_tb(raised.value.__traceback__)]
    assert "perform" in frames  # the job's own traceback
    assert task.state() is culex.TaskState.SCHEDULED  # its retry, an hour away
    assert members(client, "culex:{testing_flaky}:scheduled") == [task.id]


def test_without_fail_fast_every_attempt_is_collected_and_an_hours_backoff_is_skipped(
    client: redis.Redis,
) -> None:
    task = ShakyJob().enqueue()
    ran = drain("testing_flaky", fail_fast=False)
    assert [(r.attempt, r.outcome) for r in ran] == [
        (1, "failed"), (2, "failed"), (3, "failed"), (4, "failed"), (5, "dead"),
    ]  # fmt: skip
    assert {r.task_id for r in ran} == {task.id}
    assert ran[-1].error == "Broken: attempt 5 broke"
    assert isinstance(ran[-1].exception, Broken)
    assert task.state() is culex.TaskState.DEAD
    with pytest.raises(culex.TaskFailed, match="attempt 5 broke"):
        task.result(timeout=1)


def test_a_retry_that_succeeds_is_drained_with_its_failures(client: redis.Redis) -> None:
    task = ShakyJob(succeed_on=3).enqueue()
    ran = drain("testing_flaky", fail_fast=False)
    assert [(r.attempt, r.outcome, r.result) for r in ran] == [
        (1, "failed", None), (2, "failed", None), (3, "succeeded", "fine"),
    ]  # fmt: skip
    assert task.result(timeout=1) == "fine"


def test_a_task_enqueued_for_an_hour_later_is_drained_now(client: redis.Redis) -> None:
    task = SumJob(a=1).enqueue(delay=HOUR)
    assert task.state() is culex.TaskState.SCHEDULED
    assert drain(["testing_add"], run_scheduled=False) == []  # not due: left scheduled
    assert enqueued(SumJob) == [task]
    [ran] = drain(["testing_add"])
    assert (ran.task_id, ran.outcome, ran.result) == (task.id, "succeeded", 1)
    assert task.state() is culex.TaskState.SUCCEEDED


def test_a_drain_runs_a_scheduled_task_when_the_server_lost_the_hasten_script(
    client: redis.Redis,
) -> None:
    """The hasten goes out before the claim, in one batch: a server that lost its script
    (a restart, SCRIPT FLUSH) runs it after the claim, when it is sent again. The drain
    then claims once more, rather than end with the task left waiting."""
    task = SumJob(a=4).enqueue(delay=HOUR)
    assert drain(["testing_add"], run_scheduled=False) == []  # (claim.lua is loaded now)
    client.script_flush()
    client.script_load(scripts.CLAIM.source)  # (only hasten.lua is lost)
    [ran] = drain(["testing_add"])
    assert (ran.task_id, ran.outcome) == (task.id, "succeeded")


def test_tasks_enqueued_by_a_perform_are_drained_too(client: redis.Redis) -> None:
    first = LinkJob().enqueue()
    with pytest.raises(DrainTimeout) as raised:
        drain("testing_chain", timeout=0.5)
    # the chain never ends: the error says what is left (the link that was next: waiting,
    # or claimed when the time was up)
    assert "drain: 0.5 s passed before the queues were empty; left: testing_chain: 1 " in str(
        raised.value
    )
    assert sum(raised.value.left["testing_chain"].values()) >= 1
    assert first.state() is culex.TaskState.SUCCEEDED
    assert len(culex.dead_tasks("testing_chain")) == 0


async def test_the_timeout_names_the_tasks_still_running(client: redis.Redis) -> None:
    task = await StuckJob().aenqueue()
    await SumJob(a=1).aenqueue(delay=HOUR)
    with pytest.raises(DrainTimeout) as raised:
        await adrain(["testing_hang", "testing_add"], timeout=1, run_scheduled=False)
    message = str(raised.value)
    assert f"still running: StuckJob testing_hang<{task.id}>" in message
    assert "testing_hang: 1 pending" in message
    assert "testing_add: 1 scheduled" in message


async def test_adrain_runs_async_and_sync_performs(client: redis.Redis) -> None:
    doubled = await DoubleJob(n=21).aenqueue()
    added = await SumJob(a=4).aenqueue()
    ran = await adrain(["testing_async", "testing_add"])
    assert {(r.task_id, r.result) for r in ran} == {(doubled.id, 42), (added.id, 4)}


def test_a_broken_task_fails_fast_with_its_reason(client: redis.Redis) -> None:
    client.hset("culex:{testing_add}:task:bad", mapping={"id": "bad", "type": "SumJob",
                "params": '{"a": "x"}', "attempt": 0, "state": "waiting"})  # fmt: skip
    client.zadd("culex:{testing_add}:waiting", {"bad": 1})
    with pytest.raises(AttemptFailed, match=r"SumJob task testing_add<bad> \(attempt 1\) went to"):
        drain("testing_add")
    assert members(client, "culex:{testing_add}:dead") == ["bad"]


def test_a_task_prepared_as_a_runner_prepares_it(client: redis.Redis) -> None:
    """A lease of the task's own that is no duration makes it broken in a drain as in a
    runner (one preparation: culex.runner.attempt); a good one runs."""
    bad, good = LeasedJob(n=1).enqueue(), LeasedJob(n=2).enqueue()
    client.hset(f"culex:{{testing_add}}:task:{bad.id}", "params", '{"n": 1, "lease": "soon"}')
    client.hset(f"culex:{{testing_add}}:task:{good.id}", "params", '{"n": 2, "lease": 60}')
    ran = {r.task_id: r for r in drain("testing_add", fail_fast=False)}
    assert (ran[bad.id].outcome, ran[bad.id].error) == (
        "dead",
        "broken task: ConfigurationError: lease must be a timedelta or a number of seconds, "
        "got 'soon'",
    )
    assert (ran[good.id].outcome, ran[good.id].result) == ("succeeded", 2)


async def test_drain_refuses_to_block_a_running_loop(client: redis.Redis) -> None:
    with pytest.raises(RuntimeError, match="adrain"):
        drain()


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"queues": ["no_such_queue"]}, ValueError, "no registered job runs on queue"),
        ({"queues": ["bad queue"]}, ValueError, "queue name"),
        ({"queues": [7]}, TypeError, "queue name must be a str"),
        ({"timeout": 0}, culex.ConfigurationError, "timeout"),
        ({"timeout": "soon"}, culex.ConfigurationError, "timeout"),
        ({"fail_fast": "yes"}, TypeError, "fail_fast"),
    ],
)
def test_drain_checks_its_arguments(
    culex_server: EmbeddedServer, kwargs: dict[str, object], error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        drain(**kwargs)  # type: ignore[arg-type]


def test_the_running_loop_is_left_usable(client: redis.Redis) -> None:
    """drain() runs its own loop and closes it; a later asyncio.run works."""
    SumJob(a=1).enqueue()
    drain(["testing_add"])
    assert asyncio.run(asyncio.sleep(0, "ok")) == "ok"


def test_a_perform_in_a_child_process_is_drained_and_its_failure_reported(
    client: redis.Redis,
) -> None:
    ok = ForkedJob().enqueue()
    [ran] = drain("testing_child")
    assert (ran.task_id, ran.result) == (ok.id, 7)
    ForkedJob(broken=True).enqueue()
    # the child's exception stays in the child: its text comes back
    with pytest.raises(AttemptFailed, match=r"\(attempt 1\) failed: Broken: in the child"):
        drain("testing_child")


def test_a_jobs_own_timeout_error_is_raised_as_it_is(client: redis.Redis) -> None:
    SlowApiJob().enqueue()
    with pytest.raises(TimeoutError, match="the API did not answer") as raised:
        drain("testing_slow_api")
    assert not isinstance(raised.value, DrainTimeout)


def test_drain_runs_a_workflow_to_its_end(client: redis.Redis) -> None:
    """A drain applies the ends of workflow nodes, as a runner's releaser does: a node's
    downstreams run in the same drain, and the run ends."""
    wf = culex.Workflow()
    first = wf.add(SumJob(a=1, b=2))
    second = wf.add(DoubleJob(n=21), after=[first])
    run = wf.enqueue()
    ran = drain(["testing_add", "testing_async"])
    assert [attempt.task_id for attempt in ran] == [first.id, second.id]
    assert run.wait(timeout=5) == "succeeded"
    assert second.result(timeout=1) == 42
