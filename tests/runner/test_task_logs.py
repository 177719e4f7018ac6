"""A task's log lines (issue 31): self.log() keeps them with the task, in order, capped,
each with its attempt; sent with the heartbeat while the attempt runs and before its
report, from a process child too; read by task.logs(), shown by `culex task`."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import ClassVar

import pytest
import redis

import culex
from culex import cli, logs
from culex.jobs import task_logs
from culex.testing import drain, perform_now

from ..conftest import await_until, running

QUEUE = "logged"


class LoggedJob(culex.QueuedJob):
    queue = QUEUE
    lines: int = 3
    width: int = 10

    def perform(self) -> None:
        for i in range(1, self.lines + 1):
            self.log(str(i).ljust(self.width, "."))


class LoggedFlakyJob(culex.QueuedJob):
    queue = QUEUE
    max_retries = 1

    def perform(self) -> None:
        self.log(f"try {self.attempt}")
        if self.attempt == 1:
            raise RuntimeError("first try fails")


class LoggedChildJob(culex.QueuedJob):
    queue = QUEUE
    isolation = "process"

    def perform(self) -> None:
        for i in range(25):  # (more than FLUSH_LINES: one send on the way, one at the end)
            self.log(f"child {i}")


class LoggedSleepingJob(culex.QueuedJob):
    queue = QUEUE

    def perform(self) -> None:
        self.log(f"attempt {self.attempt} before the sleep")
        self.sleep(0.01)  # (the first attempt ends here, suspended, with nothing to report)
        self.log(f"attempt {self.attempt} after the sleep")


class LoggedWaitingJob(culex.QueuedJob):
    queue = QUEUE
    go: ClassVar[threading.Event] = threading.Event()

    def perform(self) -> None:
        self.log("before the wait")
        LoggedWaitingJob.go.wait(30)
        self.log("after the wait")


def test_lines_are_kept_in_order_with_their_attempt(r: redis.Redis) -> None:
    task = LoggedJob().enqueue()
    drain(QUEUE)
    kept = task.logs()
    assert [(line.attempt, line.line) for line in kept] == [
        (1, "1........."), (1, "2........."), (1, "3.........")]  # fmt: skip
    assert kept[0].at <= kept[1].at <= kept[2].at


def test_the_newest_100_lines_are_kept_each_cut_to_1000_characters(r: redis.Redis) -> None:
    task = LoggedJob(lines=150, width=1500).enqueue()
    drain(QUEUE)
    kept = task.logs()
    assert len(kept) == task_logs.MAX_LINES == 100
    assert [int(line.line.rstrip(".")) for line in kept] == list(range(51, 151))
    assert {len(line.line) for line in kept} == {task_logs.MAX_LINE}


def test_the_lines_of_a_failed_attempt_are_kept_with_its_number(r: redis.Redis) -> None:
    task = LoggedFlakyJob().enqueue()
    drain(QUEUE, fail_fast=False)
    assert task.state() is culex.TaskState.SUCCEEDED
    assert [(line.attempt, line.line) for line in task.logs()] == [(1, "try 1"), (2, "try 2")]


def test_the_lines_of_an_attempt_that_suspends_are_kept(r: redis.Redis) -> None:
    task = LoggedSleepingJob().enqueue()
    drain(QUEUE)
    assert task.state() is culex.TaskState.SUCCEEDED
    assert [(line.attempt, line.line) for line in task.logs()] == [
        (1, "attempt 1 before the sleep"),
        (2, "attempt 2 before the sleep"),
        (2, "attempt 2 after the sleep"),
    ]


def test_a_process_child_sends_its_own_lines(r: redis.Redis) -> None:
    task = LoggedChildJob().enqueue()
    drain(QUEUE)
    assert [line.line for line in task.logs()] == [f"child {i}" for i in range(25)]


async def test_the_heartbeat_sends_lines_while_the_attempt_runs(r: redis.Redis) -> None:
    culex.configure(lease=0.3)  # (a beat every 0.1 s)
    LoggedWaitingJob.go.clear()
    async with running(culex.Runner(run_from=[QUEUE])):
        task = await LoggedWaitingJob().aenqueue()
        seen = await await_until(task.alogs, what="the line logged before the wait")
        assert [line.line for line in seen] == ["before the wait"]
        assert await task.astate() is culex.TaskState.PENDING
        LoggedWaitingJob.go.set()
        assert await task.aresult(timeout=30) is None
    assert [line.line for line in await task.alogs()] == ["before the wait", "after the wait"]


def test_outside_a_runner_lines_are_only_logged(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("INFO", logger="culex"):
        perform_now(LoggedJob(lines=1))
    assert "[LoggedJob] 1........." in caplog.text
    assert r.dbsize() == 0


def test_culex_task_shows_the_lines(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs, "configure", lambda *args, **kwargs: None)
    task = LoggedFlakyJob().enqueue()
    drain(QUEUE, fail_fast=False)
    assert cli.main(["task", QUEUE, task.id, "--redis-url", url]) == 0
    out = capsys.readouterr().out
    assert "logs (2 kept, oldest first: attempt, time UTC, line)" in out
    first, second = (line for line in out.splitlines() if line.endswith(("try 1", "try 2")))
    assert first.split()[0] == "1" and second.split()[0] == "2"
    assert '"attempt"' not in out  # (the field is shown as lines, not as stored)


def test_a_line_that_is_not_log_lua_s_is_left_out() -> None:
    assert task_logs.parse('[{"attempt": 1, "n": 1, "at": 0, "line": "ok"}, 5, "x"]')[0].line == (
        "ok"
    )
    assert task_logs.parse("not json") == []
    assert task_logs.parse(None) == []


def test_the_loop_is_not_blocked_by_a_line() -> None:
    # (a line is buffered in memory: adding one takes no round trip)
    buffer = task_logs.LogBuffer(1)
    for _ in range(1000):
        buffer.add("x")
    assert len(buffer.take()) == task_logs.MAX_LINES and buffer.count == 1000
    assert asyncio.iscoroutinefunction(culex.Task.alogs)


def test_lines_a_send_failed_for_go_first_with_the_next() -> None:
    buffer = task_logs.LogBuffer(2)
    for text in ("a", "b", "c"):
        buffer.add(text)
    failed = buffer.take()
    buffer.add("d")
    buffer.put_back(failed)
    sent = [json.loads(line) for line in buffer.take()]
    assert [(e["attempt"], e["n"], e["line"]) for e in sent] == [
        (2, 1, "a"), (2, 2, "b"), (2, 3, "c"), (2, 4, "d")]  # fmt: skip
