"""Expiry: a task not started by its ``expires`` ends dead, last_error "expired", counted
dead, never run (enqueue.lua stores expires_at from the server's clock; claim.lua buries)."""

from __future__ import annotations

from datetime import timedelta

import pytest
import redis

import culex
from culex.errors import ConfigurationError
from culex.jobs.task import TaskState
from culex.operations import stats

from ..conftest import await_until, field, running, server_ms, snapshot, wait_until

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)

ran: list[str] = []


class ExpiringReportJob(culex.QueuedJob):
    queue = "expiring"

    def perform(self) -> str:
        ran.append(self.task_id)
        return "ran"


class ExpiringByClassJob(culex.QueuedJob):
    queue = "expiring"
    expires = timedelta(milliseconds=1)

    def perform(self) -> str:
        ran.append(self.task_id)
        return "ran"


def expires_at(r: redis.Redis, task: culex.Task) -> int:
    return int(field(r, f"culex:{{{task.queue}}}:task:{task.id}", "expires_at"))


def passed(r: redis.Redis, *tasks: culex.Task) -> None:
    """Wait until the server's clock is past each task's expires_at (no timing threshold)."""
    latest = max(expires_at(r, task) for task in tasks)
    wait_until(lambda: server_ms(r) > latest, what="the tasks' expiry to pass", every=0.001)


async def test_a_task_not_started_by_its_expiry_ends_dead_expired_and_never_runs(
    r: redis.Redis,
) -> None:
    ran.clear()
    late = await ExpiringReportJob().aenqueue(expires=0.001)
    by_class = ExpiringByClassJob().enqueue()
    in_time = ExpiringReportJob().enqueue(expires=timedelta(hours=1))
    passed(r, late, by_class)
    async with running(culex.Runner(run_from=["expiring"])):
        assert await in_time.aresult(timeout=20) == "ran"
        for task in (late, by_class):
            with pytest.raises(culex.TaskFailed) as failed:
                await task.aresult(timeout=20)
            assert failed.value.reason == "expired"
    assert ran == [in_time.id]
    for task in (late, by_class):
        info = await task.ainfo()
        assert (info["state"], info["last_error"], info["attempt"]) == ("dead", "expired", "0")
    counted = stats.job_summary(queues=["expiring"])
    assert counted[("expiring", "ExpiringReportJob")].dead == 1
    assert counted[("expiring", "ExpiringByClassJob")].dead == 1
    assert counted[("expiring", "ExpiringReportJob")].succeeded == 1


def test_expires_at_is_the_enqueue_time_plus_the_expiry_and_absent_without_one(
    r: redis.Redis,
) -> None:
    task = ExpiringReportJob().enqueue(expires=90)
    key = f"culex:{{expiring}}:task:{task.id}"
    assert expires_at(r, task) == int(field(r, key, "enqueue_time")) + 90_000
    plain = ExpiringReportJob().enqueue(delay=3600)
    assert not r.hexists(f"culex:{{expiring}}:task:{plain.id}", "expires_at")
    overridden = ExpiringByClassJob().enqueue(expires=timedelta(minutes=5))
    key = f"culex:{{expiring}}:task:{overridden.id}"
    assert expires_at(r, overridden) == int(field(r, key, "enqueue_time")) + 300_000


async def test_enqueue_many_takes_an_expiry_for_every_task(r: redis.Redis) -> None:
    tasks = culex.enqueue_many([ExpiringReportJob(), ExpiringByClassJob()], expires=60)
    more = await culex.aenqueue_many([ExpiringReportJob()], expires=timedelta(seconds=30))
    for task in tasks:
        key = f"culex:{{expiring}}:task:{task.id}"
        assert expires_at(r, task) == int(field(r, key, "enqueue_time")) + 60_000
    [task] = more
    key = f"culex:{{expiring}}:task:{task.id}"
    assert expires_at(r, task) == int(field(r, key, "enqueue_time")) + 30_000
    by_class = culex.enqueue_many([ExpiringByClassJob()])  # the class's own, 1 ms
    assert r.hexists(f"culex:{{expiring}}:task:{by_class[0].id}", "expires_at")


async def test_a_retry_due_after_the_expiry_ends_expired_too(r: redis.Redis) -> None:
    """The expiry holds for every attempt: a retry taken after it is not run."""
    task = await FlakyExpiringJob().aenqueue(expires=timedelta(hours=1))
    async with running(culex.Runner(run_from=["expiring_flaky"])):
        await wait_until_scheduled(task)
    # The retry waits an hour; its expiry is moved before now, as if an hour had passed.
    key = f"culex:{{expiring_flaky}}:task:{task.id}"
    r.hset(key, "expires_at", server_ms(r) - 1)
    r.zadd("culex:{expiring_flaky}:scheduled", {task.id: server_ms(r) - 1})
    async with running(culex.Runner(run_from=["expiring_flaky"])):
        with pytest.raises(culex.TaskFailed, match="expired"):
            await task.aresult(timeout=20)
    assert field(r, key, "attempt") == b"1"  # not run again


class FlakyExpiringJob(culex.QueuedJob):
    queue = "expiring_flaky"

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(hours=1)

    def perform(self) -> None:
        raise ConnectionError("down")


async def wait_until_scheduled(task: culex.Task) -> None:
    async def scheduled() -> bool:
        return await task.astate() == TaskState.SCHEDULED

    await await_until(scheduled, what="the retry to be scheduled")


def test_a_bad_expiry_is_refused_before_any_write(r: redis.Redis) -> None:
    ExpiringReportJob().enqueue()  # (the queue is known: no registry write below)
    before = snapshot(r)
    for bad in (0, -1, float("nan"), float("inf"), "soon", True):
        with pytest.raises((ConfigurationError, TypeError)):
            ExpiringReportJob().enqueue(expires=bad)  # type: ignore[arg-type]
    assert snapshot(r) == before
    with pytest.raises(ConfigurationError, match=r"BadExpiryJob\.expires"):

        class BadExpiryJob(culex.QueuedJob):
            expires = "soon"  # type: ignore[assignment]

            def perform(self) -> None:
                pass

    with pytest.raises(TypeError, match="periodic job's tasks do not expire"):

        class ExpiringPeriodicJob(culex.PeriodicJob):
            run_every = 60
            expires = 30

            def perform(self) -> None:
                pass
