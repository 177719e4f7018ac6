"""Cancelling a running task: a runner learns the request (runner/cancels.py) and stops the
attempt (an async perform is cancelled, a sync one sees ``self.cancelled``, a child process
is killed); the task ends dead "cancelled", never retried; a runner that is gone leaves it
to reclaim, which buries it the same way."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from pathlib import Path
from typing import ClassVar

import pytest
import redis

import culex
from culex._redis import claims
from culex._redis.keys import queue_keys

from ..conftest import await_until, driver_of, running

QUEUE = "stoppable"
K = queue_keys("culex", QUEUE)
DAY_MS = 86_400_000


class ForeverAsyncJob(culex.QueuedJob):
    """Awaits something that never happens."""

    queue = QUEUE
    started: ClassVar[set[str]] = set()
    cancelled_seen: ClassVar[set[str]] = set()

    async def perform(self) -> None:
        ForeverAsyncJob.started.add(self.task_id)
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            ForeverAsyncJob.cancelled_seen.add(self.task_id)
            raise


class PollingSyncJob(culex.QueuedJob):
    """A sync perform that polls ``self.cancelled`` and returns early when it is set."""

    queue = QUEUE
    started: ClassVar[threading.Event] = threading.Event()
    saw_cancelled: ClassVar[threading.Event] = threading.Event()

    def perform(self) -> str:
        PollingSyncJob.started.set()
        while not self.cancelled:
            time.sleep(0.01)  # (the work, a piece at a time)
        PollingSyncJob.saw_cancelled.set()
        return "stopped early"


class SleepingChildJob(culex.QueuedJob):
    """Sleeps for ever in a child process, which writes its pid to ``pid_file`` first."""

    queue = QUEUE
    isolation = "process"
    pid_file: str

    def perform(self) -> None:
        Path(self.pid_file).write_text(str(os.getpid()))
        while True:
            time.sleep(1)


class PushedBackJob(culex.QueuedJob):
    """Once its cancel is requested, asks to run again at once (culex.RetryLater): the
    push-back reaches the server before the runner's next read of the requests."""

    queue = QUEUE
    started: ClassVar[threading.Event] = threading.Event()
    runs: ClassVar[int] = 0

    def perform(self) -> str:
        PushedBackJob.runs += 1
        if self.attempt > 1:
            return "ran again"
        PushedBackJob.started.set()
        with redis.Redis.from_url(os.environ["CULEX_REDIS_URL"]) as r:
            while not r.hexists(K.task(self.task_id), "cancel_requested"):
                time.sleep(0.005)
        raise culex.RetryLater(0)


class QuickJob(culex.QueuedJob):
    queue = QUEUE

    async def perform(self) -> str:
        return "quick"


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def assert_ended_cancelled(task: culex.Task, reason: str) -> None:
    with pytest.raises(culex.TaskFailed) as failed:
        await task.aresult(timeout=30)
    assert failed.value.reason == reason
    info = await task.ainfo()
    assert info["state"] == "dead" and info["attempt"] == "1"  # never retried
    assert "cancel_requested" not in info


async def test_a_running_async_perform_is_cancelled_and_the_runner_goes_on(
    r: redis.Redis,
) -> None:
    async with running(culex.Runner(run_from=[QUEUE])):
        task = await ForeverAsyncJob().aenqueue()
        await await_until(lambda: task.id in ForeverAsyncJob.started, what="the perform starts")
        assert await task.acancel("no longer wanted") is True
        await assert_ended_cancelled(task, "cancelled: no longer wanted")
        assert task.id in ForeverAsyncJob.cancelled_seen  # asyncio cancellation reached it
        quick = await QuickJob().aenqueue()
        assert await quick.aresult(timeout=30) == "quick"
    assert r.exists(K.cancels) == 0
    assert await task.acancel() is False  # a stale cancel: dead already, nothing changes
    assert (await task.ainfo())["last_error"] == "cancelled: no longer wanted"


async def test_a_sync_perform_sees_cancelled_and_its_early_return_is_not_a_success(
    r: redis.Redis,
) -> None:
    PollingSyncJob.started.clear()
    PollingSyncJob.saw_cancelled.clear()
    async with running(culex.Runner(run_from=[QUEUE])):
        task = await PollingSyncJob().aenqueue()
        await await_until(PollingSyncJob.started.is_set, what="the perform starts")
        assert await task.astate() is culex.TaskState.PENDING
        assert await task.acancel() is True
        await assert_ended_cancelled(task, "cancelled")
        assert PollingSyncJob.saw_cancelled.is_set()
    assert (await task.ainfo()).get("result") is None


async def test_a_process_isolated_perform_is_killed(r: redis.Redis, tmp_path: Path) -> None:
    pid_file = tmp_path / "child.pid"
    async with running(culex.Runner(run_from=[QUEUE])):
        task = await SleepingChildJob(pid_file=str(pid_file)).aenqueue()
        pid = await await_until(lambda: pid_file.exists() and int(pid_file.read_text() or 0))
        assert alive(pid)
        assert await task.acancel() is True
        await assert_ended_cancelled(task, "cancelled")
        assert not alive(pid)  # killed, and reaped


async def test_a_task_whose_runner_is_gone_ends_dead_cancelled_not_retried(
    r: redis.Redis,
) -> None:
    d = driver_of(r)
    task = await QuickJob().aenqueue()
    claim = claims.claim(K, limit=1, lease_ms=0, promote_limit=10, dead_ttl_ms=DAY_MS)
    [lost] = d.run(claim).tasks  # a runner took it and died: its lease has run out
    assert lost.id == task.id
    assert await task.acancel("its runner died") is True
    async with running(culex.Runner(run_from=[QUEUE])):  # its reclaimer finds the lease
        await assert_ended_cancelled(task, "cancelled: its runner died")
    assert r.exists(K.cancels) == 0


async def test_a_push_back_that_lands_before_the_runner_reads_the_request_ends_cancelled(
    r: redis.Redis,
) -> None:
    PushedBackJob.started.clear()
    PushedBackJob.runs = 0
    async with running(culex.Runner(run_from=[QUEUE])):
        task = await PushedBackJob().aenqueue()
        await await_until(PushedBackJob.started.is_set, what="the perform starts")
        assert await task.acancel("user left") is True
        await assert_ended_cancelled(task, "cancelled: user left")
    assert PushedBackJob.runs == 1 and r.exists(K.cancels) == 0
