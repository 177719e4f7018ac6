"""Flow control in a runner against a real server: a job that pushes back (culex.RetryLater)
and a job that reports its progress, in each way a perform runs (async, thread, process)."""

from __future__ import annotations

import asyncio
import logging
import os
import re
import subprocess
import sys
import threading
from datetime import timedelta
from typing import Any, ClassVar

import pytest
import redis

import culex
from culex._redis.keys import queue_keys

from ..conftest import await_until, running

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)


# -- RetryLater -----------------------------------------------------------------------------


def push_back_once(job: culex.QueuedJob) -> str:
    """Attempt 1 fails, attempt 2 pushes back for 300 ms, attempt 3 succeeds (by the attempt
    number: a child process cannot tell its parent what it did)."""
    if job.attempt == 1:
        raise ValueError("the service broke")
    if job.attempt == 2:
        raise culex.RetryLater(timedelta(milliseconds=300))
    return f"done at attempt {job.attempt}"


class AsyncPushBackJob(culex.QueuedJob):
    queue = "push_back_async"

    async def perform(self) -> str:
        return push_back_once(self)

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(0)


class ThreadPushBackJob(culex.QueuedJob):
    queue = "push_back_thread"

    def perform(self) -> str:
        return push_back_once(self)

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(0)


class ProcessPushBackJob(ThreadPushBackJob):
    queue = "push_back_process"
    isolation = "process"


PUSH_BACK = [AsyncPushBackJob, ThreadPushBackJob, ProcessPushBackJob]


@pytest.mark.parametrize("job", PUSH_BACK, ids=["async", "thread", "process"])
async def test_retry_later_runs_the_task_again_after_the_delay_without_spending_a_retry(
    r: redis.Redis, job: type[culex.QueuedJob]
) -> None:
    task = await job().aenqueue()
    async with running(culex.Runner(run_from=[job.queue])):
        assert await task.aresult(timeout=20) == "done at attempt 3"
    info = await task.ainfo()
    # One failure counted (attempt 1); the push-back (attempt 2) counted none and left the
    # failure's last_error as it was.
    assert (info["attempt"], info["retry_count"], info["retry_later_count"]) == ("3", "1", "1")
    assert "ValueError: the service broke" in info["last_error"]
    assert int(info["due_at"]) == int(info["retry_later_at"]) + 300
    assert int(info["started_at"]) >= int(info["due_at"])  # not run before it was due


class BadDelayJob(culex.QueuedJob):
    queue = "bad_delay"
    max_retries = 0
    delay: ClassVar[Any] = -1

    async def perform(self) -> None:
        raise culex.RetryLater(type(self).delay)


class BadDelayThreadJob(BadDelayJob):
    queue = "bad_delay_thread"
    delay: ClassVar[Any] = "soon"

    def perform(self) -> None:  # type: ignore[override]
        raise culex.RetryLater(type(self).delay)


class BadDelayProcessJob(BadDelayThreadJob):
    queue = "bad_delay_process"
    isolation = "process"
    delay: ClassVar[Any] = float("nan")


@pytest.mark.parametrize(
    ("job", "error"),
    [
        (BadDelayJob, "ValueError: RetryLater(delay): the delay must be from 0 to"),
        (BadDelayThreadJob, "TypeError: RetryLater(delay): the delay must be a timedelta"),
        (BadDelayProcessJob, "ValueError: RetryLater(delay): the delay must be from 0 to"),
    ],
    ids=["async-negative", "thread-not-a-number", "process-nan"],
)
async def test_retry_later_with_a_bad_delay_fails_the_attempt_as_any_error(
    r: redis.Redis, job: type[culex.QueuedJob], error: str
) -> None:
    task = await job().aenqueue()
    async with running(culex.Runner(run_from=[job.queue])):
        with pytest.raises(culex.TaskFailed) as failed:
            await task.aresult(timeout=20)
    assert error in failed.value.reason
    info = await task.ainfo()
    assert (info["state"], info["retry_count"]) == ("dead", "1")
    assert "retry_later_count" not in info


# -- progress ------------------------------------------------------------------------------


class ReportingJob(culex.QueuedJob):
    """Reports progress, then waits until the test lets it end."""

    queue = "reporting"
    reported: ClassVar[threading.Event] = threading.Event()
    release: ClassVar[threading.Event] = threading.Event()

    def perform(self) -> bool:
        stored = self.progress(0.4, "rendered 4 of 10 pages")
        type(self).reported.set()
        assert type(self).release.wait(20)
        return stored


async def test_progress_is_seen_by_another_process_while_the_task_runs_and_kept_after(
    r: redis.Redis, url: str
) -> None:
    ReportingJob.reported.clear()
    ReportingJob.release.clear()
    task = await ReportingJob().aenqueue()
    assert await task.aprogress() is None  # none reported yet
    async with running(culex.Runner(run_from=["reporting"])):
        assert await asyncio.to_thread(ReportingJob.reported.wait, 20)
        # another process reads it while the task runs: culex task QUEUE ID
        shown = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "culex", "task", "reporting", task.id, "--redis-url", url],
            capture_output=True, text=True, timeout=60, env={**os.environ},
        )  # fmt: skip
        assert shown.returncode == 0, shown.stderr
        assert re.search(r"^state +pending$", shown.stdout, re.MULTILINE)
        assert re.search(r"^progress +40%: rendered 4 of 10 pages$", shown.stdout, re.MULTILINE)
        # another handle, through the blocking API in a thread
        handle = culex.Task(task.id, "reporting")
        assert await asyncio.to_thread(handle.progress) == (0.4, "rendered 4 of 10 pages")
        ReportingJob.release.set()
        assert await task.aresult(timeout=20) is True
    progress = await task.aprogress()  # kept after the end
    assert progress is not None and progress.fraction == 0.4
    assert progress.message == "rendered 4 of 10 pages"


class AsyncReportingJob(culex.QueuedJob):
    queue = "reporting_async"

    async def perform(self) -> str:
        stored = await self.aprogress(1, None)
        try:
            self.progress(0.5)
        except RuntimeError as exc:
            return f"{stored}: {exc}"
        return "the blocking call went through"


class ProcessReportingJob(culex.QueuedJob):
    queue = "reporting_process"
    isolation = "process"

    def perform(self) -> bool:
        return self.progress(0.75, "from the child, pid " + str(os.getpid()))


async def test_an_async_perform_awaits_aprogress_and_is_told_not_to_block(r: redis.Redis) -> None:
    task = await AsyncReportingJob().aenqueue()
    async with running(culex.Runner(run_from=["reporting_async"])):
        said = await task.aresult(timeout=20)
    assert said.startswith("True: progress() blocks") and "await self.aprogress(...)" in said
    assert await task.aprogress() == (1.0, None)  # no message: None


async def test_a_perform_in_a_child_process_reports_progress_itself(r: redis.Redis) -> None:
    task = await ProcessReportingJob().aenqueue()
    async with running(culex.Runner(run_from=["reporting_process"])):
        assert await task.aresult(timeout=20) is True
    progress = await task.aprogress()
    assert progress is not None and progress.fraction == 0.75
    assert progress.message is not None and progress.message.startswith("from the child")
    assert progress.message != f"from the child, pid {os.getpid()}"  # (another process)


# -- a stale attempt: the runner lost the task, its reports are refused ---------------------


class LosingJob(culex.QueuedJob):
    """Waits until the test has handed its task out again, then reports and pushes back."""

    queue = "losing"
    started: ClassVar[threading.Event] = threading.Event()
    lost: ClassVar[threading.Event] = threading.Event()
    stored: ClassVar[list[bool]] = []

    def perform(self) -> None:
        type(self).started.set()
        assert type(self).lost.wait(20)
        type(self).stored.append(self.progress(0.9, "too late"))
        raise culex.RetryLater(0)


async def test_a_stale_attempts_progress_and_retry_later_are_refused(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    LosingJob.started.clear()
    LosingJob.lost.clear()
    LosingJob.stored.clear()
    task = await LosingJob().aenqueue()
    key = queue_keys("culex", "losing").task(task.id)
    caplog.set_level(logging.WARNING, "culex")
    async with running(culex.Runner(run_from=["losing"])):
        assert await asyncio.to_thread(LosingJob.started.wait, 20)
        r.hincrby(key, "attempt", 1)  # as if its lease ran out and it was handed out again
        before = r.hgetall(key)
        LosingJob.lost.set()
        await await_until(lambda: "refused" in caplog.text, what="the refused report")
        assert LosingJob.stored == [False]
        assert r.hgetall(key) == before  # neither the progress nor the push-back landed
    assert b"progress" not in before and b"retry_later_count" not in before
    assert f"report for task losing<{task.id}> (attempt 1) refused" in caplog.text


# -- in a test's drain ---------------------------------------------------------------------


class DrainedPushBackJob(culex.QueuedJob):
    queue = "drained_push_back"

    async def perform(self) -> int:
        if self.attempt == 1:
            raise culex.RetryLater(3600)  # a drain makes it due at once
        return self.attempt


async def test_a_drain_records_a_push_back_and_goes_on(r: redis.Redis) -> None:
    from culex.testing import adrain

    task = await DrainedPushBackJob().aenqueue()
    ran = await adrain("drained_push_back")
    assert [(a.attempt, a.outcome, a.result) for a in ran] == [
        (1, "retry_later", None), (2, "succeeded", 2),
    ]  # fmt: skip
    assert (await task.ainfo())["retry_count"] == "0"
