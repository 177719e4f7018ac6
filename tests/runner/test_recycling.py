"""``culex run --max-tasks-per-process M --max-memory-per-process MB``: the supervisor
replaces a runner that has run M tasks, or whose RSS has passed MB, one at a time and
gracefully; no task is lost or run twice. Run as a user runs it, on the test server."""

from __future__ import annotations

import json
import re
import signal
import textwrap
from collections import Counter
from pathlib import Path

import pytest
import redis

import culex
from culex.cli import main

from ..cli.test_cli import _enqueue_as
from .test_supervisor import Supervised, alive

JOBS = textwrap.dedent(
    """
    import os
    import redis
    import culex

    HOARD = []  # what a hoarding task leaves behind: the process's memory only grows

    class RecycledJob(culex.QueuedJob):
        name: str
        hoard_mb: int = 0

        def perform(self) -> int:
            if self.hoard_mb:
                HOARD.append(b"x" * (self.hoard_mb << 20))  # (written: resident)
            with redis.Redis.from_url(os.environ["CULEX_REDIS_URL"]) as r:
                r.rpush("test:runs", f"{self.name} {os.getpid()}")
            return os.getpid()
    """
)
QUEUE = "recycled_job"


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "recycled_jobs.py").write_text(JOBS)
    return tmp_path


def enqueue(r: redis.Redis, name: str, **params: object) -> culex.Task:
    _enqueue_as(r, name, "RecycledJob", QUEUE, json.dumps({"name": name, **params}))
    return culex.Task(name, QUEUE)


def runs(r: redis.Redis) -> list[tuple[str, int]]:
    """Each run of a task: its name and the pid of the runner that ran it."""
    found = [
        (entry.decode() if isinstance(entry, bytes) else entry).split()
        for entry in r.lrange("test:runs", 0, -1)
    ]
    return [(name, int(pid)) for name, pid in found]


def test_runners_are_replaced_one_at_a_time_after_m_tasks_and_no_task_is_lost(
    r: redis.Redis, folder: Path
) -> None:
    args = ("--processes", "2", "--concurrency", "1", "--max-tasks-per-process", "3")
    one = Supervised(folder, *args, module="recycled_jobs")
    try:
        one.wait_for_runners(2)
        tasks = [enqueue(r, f"t{n}") for n in range(20)]
        pids = [task.result(timeout=60) for task in tasks]
        done = runs(r)
        assert sorted(name for name, _ in done) == sorted(t.id for t in tasks)  # each once
        assert {pid for _, pid in done} == set(pids)
        one.proc.send_signal(signal.SIGTERM)
        assert one.proc.wait(timeout=60) == 0
        log = one.stop()
    finally:
        one.stop()
    assert not any(alive(pid) for pid in one.seen)
    # 20 tasks on 2 runners: one of them has run 3 and asked, and the first to ask is
    # replaced at once (none retires before it).
    asked = re.findall(r"runner (\d+) asks to be replaced: (.*)", log)
    assert asked and {int(pid) for pid, _ in asked} <= set(pids)
    assert {why for _, why in asked} == {"it has run 3 tasks (--max-tasks-per-process 3)"}
    assert len(re.findall(r"runner \d+ started \(", log)) >= 3
    # One at a time: each runner told to retire has retired before the next is told.
    turns = re.findall(r"(recycling runner|runner) (\d+)(?: retired|: it finishes)", log)
    assert turns, log
    for told, ended in zip(turns[::2], turns[1::2], strict=False):
        assert told[0] == "recycling runner" and ended == ("runner", told[1]), turns
        # (each that retired said so; the last told may instead stop with the SIGTERM
        # above, when its turn came as the test ended)
        assert f"[runner {told[1]}] - retiring: stopping once the" in log
    assert Counter(pid for _, pid in done).most_common(1)[0][1] >= 3


def test_a_runner_whose_memory_passed_the_limit_is_replaced(r: redis.Redis, folder: Path) -> None:
    args = ("--concurrency", "1", "--max-memory-per-process", "300")
    one = Supervised(folder, *args, module="recycled_jobs")  # (a supervisor of one runner)
    try:
        (first,) = one.wait_for_runners(1)
        assert [enqueue(r, f"small{n}").result(timeout=30) for n in range(3)] == [first] * 3
        assert enqueue(r, "hog", hoard_mb=400).result(timeout=30) == first
        line = one.log.wait_for(f"runner {first} asks to be replaced: its RSS")
        assert "has passed --max-memory-per-process 300" in line
        (second,) = one.wait_for_runners(1, besides={first})
        one.log.wait_for(f"runner {first} retired")
        assert enqueue(r, "after").result(timeout=30) == second
        one.proc.send_signal(signal.SIGTERM)
        assert one.proc.wait(timeout=60) == 0
    finally:
        log = one.stop()
    assert [name for name, _ in runs(r)] == ["small0", "small1", "small2", "hog", "after"], log
    assert not alive(first) and not alive(second)


@pytest.mark.parametrize("flag", ["--max-tasks-per-process", "--max-memory-per-process"])
@pytest.mark.parametrize("value", ["0", "-1", "many", "1.5"])
def test_the_limits_must_be_whole_numbers_from_1(
    flag: str, value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["run", "some.module", flag, value])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}: must be a whole number, 1 or more (not {value!r})" in err


def test_a_runner_claims_no_task_past_its_limit_however_many_one_claim_could_take(
    r: redis.Redis, folder: Path
) -> None:
    # Every task is waiting before the runners start: a claim could take 4 at once.
    tasks = [enqueue(r, f"t{n}") for n in range(14)]
    args = ("--processes", "2", "--concurrency", "4", "--max-tasks-per-process", "3")
    one = Supervised(folder, *args, module="recycled_jobs")
    try:
        pids = [task.result(timeout=60) for task in tasks]
        one.proc.send_signal(signal.SIGTERM)
        assert one.proc.wait(timeout=60) == 0
    finally:
        log = one.stop()
    done = runs(r)
    assert sorted(name for name, _ in done) == sorted(t.id for t in tasks)  # each once
    per_runner = Counter(pid for _, pid in done)
    assert set(per_runner) == set(pids)
    assert max(per_runner.values()) <= 3, (per_runner, log)  # none past its limit
    asked = re.findall(r"runner \d+ asks to be replaced: (.*)", log)
    assert asked and set(asked) == {"it has run 3 tasks (--max-tasks-per-process 3)"}, log
    retired = re.findall(r"retiring: stopping once .* \(it has started (\d+) in all\)", log)
    assert retired and set(retired) == {"3"}, log
