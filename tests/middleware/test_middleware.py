"""Middleware: headers stored with the task and read in perform, on_enqueue on each enqueue
path, around_perform's order (sync and async), on_failure / on_dead, and a middleware that
raises; through the runner's own path (culex.testing.drain and a culex.Runner)."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

import culex
from culex.testing import drain

from ..conftest import await_until, running, wait_until
from .jobs import (
    MwAsyncJob,
    MwFlakyJob,
    MwHeadersJob,
    MwProcessJob,
    MwStuckJob,
    MwWaitingJob,
    Recording,
    seen,
)


def test_headers_are_stored_with_the_task_and_read_in_perform(r: redis.Redis) -> None:
    culex.configure(middleware=[Recording("audit", header="by")])
    task = MwHeadersJob(n=1).enqueue()
    stored = r.hget(f"culex:{{mw_headers}}:task:{task.id}", "headers")
    assert stored is not None and json.loads(stored) == {"by": "audit"}
    (attempt,) = drain("mw_headers")
    assert attempt.result == {"by": "audit"}
    assert ("perform", 1, {"by": "audit"}) in seen


def test_a_task_without_headers_stores_no_field_and_reads_an_empty_dict(
    r: redis.Redis,
) -> None:
    task = MwHeadersJob(n=2).enqueue()  # (no middleware)
    assert r.hget(f"culex:{{mw_headers}}:task:{task.id}", "headers") is None
    culex.configure(middleware=[Recording("quiet")])  # writes no header
    other = MwHeadersJob(n=3).enqueue()
    assert r.hget(f"culex:{{mw_headers}}:task:{other.id}", "headers") is None
    assert [a.result for a in drain("mw_headers")] == [{}, {}]
    assert MwHeadersJob().headers == {}  # (outside a runner)


def test_on_enqueue_runs_on_every_enqueue_path(r: redis.Redis) -> None:
    culex.configure(middleware=[Recording("audit", header="by")])
    MwHeadersJob(n=1).enqueue()
    MwHeadersJob(n=2).enqueue(delay=0.001, priority=3, id="mw-given")
    culex.enqueue_many([MwHeadersJob(n=3), MwHeadersJob(n=4)])

    async def both() -> None:
        await MwHeadersJob(n=5).aenqueue()
        await culex.aenqueue_many([MwHeadersJob(n=6)])

    import asyncio

    asyncio.run(both())
    assert seen.count(("audit", "on_enqueue", "MwHeadersJob")) == 6
    ran = sorted(a.result["by"] for a in drain("mw_headers"))
    assert ran == ["audit"] * 6


def test_around_perform_nests_in_list_order_for_sync_and_async_jobs(r: redis.Redis) -> None:
    culex.configure(middleware=[Recording("outer"), Recording("inner")])
    MwHeadersJob(n=7).enqueue()
    MwAsyncJob().enqueue()
    seen.clear()
    drain("mw_headers")
    assert seen == [("outer", "before"), ("inner", "before"), ("perform", 7, {}),
                    ("inner", "after"), ("outer", "after")]  # fmt: skip
    seen.clear()
    drain("mw_async")
    assert seen == [("outer", "abefore"), ("inner", "abefore"), ("perform", {}),
                    ("inner", "aafter"), ("outer", "aafter")]  # fmt: skip


def test_on_failure_says_will_retry_then_not_and_on_dead_follows(r: redis.Redis) -> None:
    culex.configure(middleware=[Recording("audit")])
    task = MwFlakyJob().enqueue()
    drain("mw_flaky", fail_fast=False)
    told = [entry for entry in seen if entry[1] in ("on_failure", "on_dead")]
    assert told == [
        ("audit", "on_failure", "MwFlakyJob", "attempt 1 broke", True),
        ("audit", "on_failure", "MwFlakyJob", "attempt 2 broke", False),
        ("audit", "on_dead", "MwFlakyJob", "attempt 2 broke"),
    ]
    assert task.state() is culex.TaskState.DEAD


def test_a_task_the_runner_cannot_build_is_told_to_on_dead_without_a_job(
    r: redis.Redis,
) -> None:
    culex.configure(middleware=[Recording("audit")])
    task = MwHeadersJob(n=1).enqueue()
    r.hset(f"culex:{{mw_headers}}:task:{task.id}", "params", '{"n": "not a number"}')
    drain("mw_headers", fail_fast=False)
    ((_, _, job, error),) = [entry for entry in seen if entry[1] == "on_dead"]
    assert job is None and "broken task" in error
    assert task.state() is culex.TaskState.DEAD


class Raising(culex.Middleware):
    """Raises in the hook named ``where``."""

    def __init__(self, where: str) -> None:
        self.where = where

    def _maybe(self, hook: str) -> None:
        if hook == self.where:
            raise RuntimeError(f"{hook} broke")

    def on_enqueue(self, job: culex.Job, headers: dict[str, str]) -> None:
        self._maybe("on_enqueue")

    def around_perform(self, job: culex.Job, call_next: Any) -> Any:
        self._maybe("around_perform")
        return call_next()

    def on_failure(self, job: culex.Job, error: BaseException, will_retry: bool) -> None:
        self._maybe("on_failure")

    def on_dead(self, job: culex.Job | None, error: BaseException) -> None:
        self._maybe("on_dead")


def test_a_raising_on_enqueue_stores_nothing(r: redis.Redis) -> None:
    culex.configure(middleware=[Raising("on_enqueue")])
    with pytest.raises(RuntimeError, match="on_enqueue broke"):
        MwHeadersJob().enqueue()
    assert r.keys("culex:{mw_headers}:task:*") == []


async def test_a_raising_middleware_fails_the_attempt_not_the_runner(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # around_perform raising before call_next: the attempt's failure (perform never ran);
    # on_failure and on_dead raising: logged, and the runner goes on with the next task.
    culex.configure(
        middleware=[
            Raising("around_perform"),
            Raising("on_failure"),
            Raising("on_dead"),
            Recording("audit"),
        ]
    )
    first = MwFlakyJob().enqueue()
    runner = culex.Runner(run_from=["mw_flaky", "mw_headers"], concurrency=1)
    async with running(runner):
        await _dead(first)
        culex.configure(middleware=[Raising("on_dead")])
        second = MwHeadersJob(n=9).enqueue()
        assert await second.aresult(timeout=20) == {}
    assert "around_perform broke" in first.info()["last_error"]
    assert ("perform", 9, {}) in seen and not any("attempt" in str(e) for e in seen)
    assert "middleware" in caplog.text and "on_failure broke" in caplog.text
    assert "on_dead broke" in caplog.text


async def _dead(task: culex.Task) -> None:
    await await_until(lambda: task.state() is culex.TaskState.DEAD, what="the task's death")


def test_a_process_job_runs_around_perform_in_its_child(r: redis.Redis) -> None:
    culex.configure(middleware=[Recording("audit", header="by")])
    MwProcessJob().enqueue()
    (attempt,) = drain("mw_process")
    import os

    pid, headers, _ = attempt.result
    assert pid != os.getpid() and headers == {"by": "audit"}
    # (the child's hooks wrote into its own copy of `seen`: the parent saw none of them)
    assert ("audit", "before") not in seen


def test_bad_middleware_and_headers_are_refused_before_anything_is_stored(
    r: redis.Redis,
) -> None:
    with pytest.raises(culex.ConfigurationError, match=r"culex\.Middleware objects"):
        culex.configure(middleware=[object()])
    with pytest.raises(culex.ConfigurationError, match=r"a list of culex\.Middleware"):
        culex.configure(middleware="audit")

    class BadHeader(culex.Middleware):
        def __init__(self, value: Any) -> None:
            self.value = value

        def on_enqueue(self, job: culex.Job, headers: dict[str, Any]) -> None:
            headers["x"] = self.value

    culex.configure(middleware=[BadHeader(3)])
    with pytest.raises(TypeError, match="a header is str to str"):
        MwHeadersJob().enqueue()
    culex.configure(middleware=[BadHeader("x" * 20_000)])
    with pytest.raises(ValueError, match="headers take more than"):
        MwHeadersJob().enqueue()
    assert r.keys("culex:{mw_headers}:*") == []
    wait_until(lambda: True)


def test_headers_a_runner_cannot_read_send_the_task_to_dead(r: redis.Redis) -> None:
    # (another producer wrote them: a list, not a JSON object of strings)
    culex.configure(middleware=[Recording("audit", header="by")])
    task = MwHeadersJob(n=4).enqueue()
    r.hset(f"culex:{{mw_headers}}:task:{task.id}", "headers", '["by", 1]')
    drain("mw_headers", fail_fast=False)
    assert task.state() is culex.TaskState.DEAD
    assert "headers are not a JSON object of strings" in task.info()["last_error"]


def test_a_time_limit_is_told_to_on_failure_and_on_dead(r: redis.Redis) -> None:
    culex.configure(middleware=[Recording("audit")])
    task = MwStuckJob().enqueue()
    drain("mw_stuck", fail_fast=False)
    told = [entry for entry in seen if entry[1] in ("on_failure", "on_dead")]
    assert told == [
        ("audit", "on_failure", "MwStuckJob", "timed out after 0.05 s", False),
        ("audit", "on_dead", "MwStuckJob", "timed out after 0.05 s"),
    ]
    assert ("audit", "abefore") in seen and ("audit", "aafter") in seen
    assert task.state() is culex.TaskState.DEAD


async def test_a_cancel_of_a_running_task_is_told_to_on_failure_and_on_dead(
    r: redis.Redis,
) -> None:
    culex.configure(middleware=[Recording("audit")])
    async with running(culex.Runner(run_from=["mw_waiting"])):
        task = await MwWaitingJob().aenqueue()
        await await_until(lambda: ("perform", "started") in seen, what="the perform starts")
        assert await task.acancel("not wanted") is True
        await _dead(task)
    told = [entry for entry in seen if entry[1] in ("on_failure", "on_dead")]
    reason = str(culex.TaskFailed(task.id, "cancelled"))
    assert told == [
        ("audit", "on_failure", "MwWaitingJob", reason, False),
        ("audit", "on_dead", "MwWaitingJob", reason),
    ]


def _told_dead() -> list[tuple[Any, ...]]:
    return [entry for entry in seen if entry[1] == "on_dead"]


async def test_a_task_that_expired_before_it_started_is_told_to_on_dead_once(
    r: redis.Redis,
) -> None:
    culex.configure(middleware=[Recording("audit")])
    task = await MwHeadersJob(n=1).aenqueue(expires=3600)
    r.hset(f"culex:{{mw_headers}}:task:{task.id}", "expires_at", 1)  # (its time has passed)
    async with running(culex.Runner(run_from=["mw_headers"])):
        await _dead(task)
        await await_until(lambda: bool(_told_dead()), what="on_dead")
    assert _told_dead() == [("audit", "on_dead", None, str(culex.TaskFailed(task.id, "expired")))]
    assert ("perform", 1, {}) not in seen


async def test_a_task_reclaimed_past_max_stalls_is_told_to_on_dead_once(r: redis.Redis) -> None:
    from culex._redis import claims
    from culex._redis.keys import queue_keys

    from ..conftest import driver_of

    culex.configure(middleware=[Recording("audit")], max_stalls=0, lease=3)
    task = await MwHeadersJob(n=1).aenqueue()
    keys = queue_keys("culex", "mw_headers")
    # A runner that took it and was lost: its lease ends at once.
    driver_of(r).run(claims.claim(keys, limit=1, lease_ms=1, promote_limit=0, dead_ttl_ms=60_000))
    async with running(culex.Runner(run_from=["mw_headers"])):
        await _dead(task)
        await await_until(lambda: bool(_told_dead()), what="on_dead")
    ((_, _, job, error),) = _told_dead()
    assert job is None and error.startswith(f"task {task.id} is dead: lease expired")
    assert "past max_stalls (0)" in error


def test_a_drain_tells_on_dead_of_a_task_that_expired(r: redis.Redis) -> None:
    culex.configure(middleware=[Recording("audit")])
    task = MwHeadersJob(n=1).enqueue(expires=3600)
    r.hset(f"culex:{{mw_headers}}:task:{task.id}", "expires_at", 1)
    assert drain("mw_headers") == []
    assert _told_dead() == [("audit", "on_dead", None, str(culex.TaskFailed(task.id, "expired")))]
