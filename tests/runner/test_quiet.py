"""A quiet runner (SIGTSTP): it takes no new task, finishes the one it runs with its lease
renewed, says so in ``culex runners``, resumes on SIGUSR2 (not on SIGCONT), and stops on
SIGTERM as ever; run as a user runs ``culex run``, alone and under a supervisor."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import culex
from culex._redis.keys import queue_keys
from culex.cli import main
from culex.operations import inspection

from ..cli.test_cli import Stderr, _enqueue_as, culex_command
from ..conftest import wait_until
from .test_supervisor import Supervised, alive

JOBS = textwrap.dedent(
    """
    import asyncio
    import os
    import redis.asyncio
    import culex

    class QuietGatedJob(culex.QueuedJob):
        name: str

        async def perform(self) -> int:
            async with redis.asyncio.Redis.from_url(os.environ["CULEX_REDIS_URL"]) as r:
                await r.rpush("test:ran", self.name)
                while not await r.exists(f"test:go:{self.name}"):
                    await asyncio.sleep(0.01)
            return os.getpid()
    """
)
QUEUE = "quiet_gated_job"
KEYS = queue_keys("culex", QUEUE)


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "quiet_jobs.py").write_text(JOBS)
    return tmp_path


@pytest.fixture
def started() -> Iterator[list[Stderr]]:
    """The ``culex run`` processes a test starts (each with its log): killed if left."""
    logs: list[Stderr] = []
    yield logs
    for log in logs:
        if log.proc.poll() is None:
            log.proc.kill()
            log.proc.wait()
        log.text()


def run(folder: Path, started: list[Stderr], *args: str) -> Stderr:
    proc = subprocess.Popen(
        culex_command("run", "quiet_jobs", *args), cwd=folder, stderr=subprocess.PIPE, text=True
    )
    log = Stderr(proc)
    started.append(log)
    log.wait_for("culex is buzzing...")
    return log


def enqueue(r: redis.Redis, name: str) -> culex.Task:
    _enqueue_as(r, name, "QuietGatedJob", QUEUE, json.dumps({"name": name}))
    return culex.Task(name, QUEUE)


def states() -> list[str]:
    return [runner["state"] for runner in inspection.runners()]


def beats(count: int) -> None:
    """Wait until every runner has beaten ``count`` more times (each beat renews leases
    and would have shown a task the runner took)."""
    for _ in range(count):
        before = {runner["id"]: runner["beat"] for runner in inspection.runners()}

        def beaten(before: dict[str, int] = before) -> bool:
            now = inspection.runners()
            return all(runner["beat"] > before.get(runner["id"], 0) for runner in now)

        wait_until(beaten, what="a beat of every runner")


def test_a_quiet_runner_finishes_its_task_takes_no_new_one_and_stops_on_sigterm(
    r: redis.Redis, folder: Path, started: list[Stderr],
    capsys: pytest.CaptureFixture[str],
) -> None:  # fmt: skip
    # (A blocking wait of 30 s with a claim behind it is in flight when the runner goes
    # quiet: what that claim takes once the second task comes is handed back, unrun.)
    args = ("--concurrency", "3", "--lease", "1", "--grace-period", "30", "--idle-wait", "30")
    log = run(folder, started, *args)
    proc = log.proc
    first = enqueue(r, "first")
    wait_until(lambda: r.lrange("test:ran", 0, -1) == [b"first"], what="the first task to run")
    assert states() == ["running"]
    lease_end = r.zscore(KEYS.pending, "first")
    assert lease_end is not None
    proc.send_signal(signal.SIGTSTP)
    wait_until(lambda: states() == ["quiet"], what="the runner's record to say quiet")
    log.wait_for("quiet: taking no new task; the 1 running go on")
    main(["runners"])
    (line,) = [line for line in capsys.readouterr().out.splitlines() if " pid " in line]
    assert f"pid {proc.pid}  quiet  queues {QUEUE}" in line
    second = enqueue(r, "second")
    log.wait_for(f"task {QUEUE}<second> handed back: this runner is quiet")
    beats(3)  # (the lease is 1 s: it would have run out without renewals)
    renewed = r.zscore(KEYS.pending, "first")
    assert renewed is not None and renewed > lease_end  # renewed while quiet
    assert second.state() == culex.TaskState.WAITING
    assert r.lrange("test:ran", 0, -1) == [b"first"]
    r.set("test:go:first", 1)
    assert first.result(timeout=30) == proc.pid  # the running task finished
    beats(2)
    assert second.state() == culex.TaskState.WAITING and states() == ["quiet"]
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 0
    text = log.text()
    assert "culex stopped" in text, text
    assert second.state() == culex.TaskState.WAITING  # never taken
    assert inspection.runners() == []


def test_sigusr2_resumes_a_quiet_runner_and_sigcont_does_not(
    r: redis.Redis, folder: Path, started: list[Stderr]
) -> None:
    log = run(folder, started, "--concurrency", "1", "--lease", "1")
    log.proc.send_signal(signal.SIGTSTP)
    wait_until(lambda: states() == ["quiet"], what="the runner's record to say quiet")
    task = enqueue(r, "later")
    r.set("test:go:later", 1)
    log.proc.send_signal(signal.SIGCONT)  # (what the kernel sends any stopped process)
    beats(2)
    assert task.state() == culex.TaskState.WAITING and states() == ["quiet"]
    log.proc.send_signal(signal.SIGUSR2)
    assert task.result(timeout=30) == log.proc.pid
    assert states() == ["running"]
    log.wait_for("taking tasks again")
    log.proc.send_signal(signal.SIGTERM)
    assert log.proc.wait(timeout=60) == 0


def test_sigtstp_to_the_supervisor_quiets_every_runner_and_sigterm_stops_them(
    r: redis.Redis, folder: Path
) -> None:
    args = ("--processes", "2", "--concurrency", "1", "--lease", "1", "--grace-period", "30")
    one = Supervised(folder, *args, module="quiet_jobs")
    try:
        pids = one.wait_for_runners(2)
        held = enqueue(r, "held")
        wait_until(lambda: r.lrange("test:ran", 0, -1) == [b"held"], what="a runner to take it")
        one.proc.send_signal(signal.SIGTSTP)
        wait_until(lambda: states() == ["quiet", "quiet"], what="both runners to say quiet")
        waiting = enqueue(r, "waiting")
        r.set("test:go:waiting", 1)
        beats(3)
        assert waiting.state() == culex.TaskState.WAITING
        assert held.state() == culex.TaskState.PENDING  # (renewed: the lease is 1 s)
        r.set("test:go:held", 1)
        assert held.result(timeout=30) in pids
        one.proc.send_signal(signal.SIGTERM)
        assert one.proc.wait(timeout=60) == 0
        log = one.stop()
        assert "SIGTSTP: quiet, no new task: passing it to the runners" in log
        assert not any(alive(pid) for pid in pids)
        for pid in pids:
            assert f"[runner {pid}] - quiet: taking no new task" in log
            assert f"runner {pid} stopped" in log
        assert waiting.state() == culex.TaskState.WAITING
    finally:
        one.stop()


def test_a_runner_a_quiet_supervisor_starts_in_a_dead_one_s_place_starts_quiet(
    r: redis.Redis, folder: Path
) -> None:
    args = ("--processes", "2", "--concurrency", "1", "--lease", "1")
    one = Supervised(folder, *args, module="quiet_jobs")
    try:
        dead, other = one.wait_for_runners(2)
        one.proc.send_signal(signal.SIGTSTP)
        wait_until(lambda: states() == ["quiet", "quiet"], what="both runners to say quiet")
        os.kill(dead, signal.SIGKILL)
        (new,) = one.wait_for_runners(2, besides={dead}) - {other}
        one.log.wait_for(f"[runner {new}] - quiet: taking no new task; the 0 running go on")
        task = enqueue(r, "after")
        r.set("test:go:after", 1)
        beats(2)
        assert {runner["pid"]: runner["state"] for runner in inspection.runners()} == {
            new: "quiet",
            other: "quiet",
        }
        assert task.state() == culex.TaskState.WAITING
        one.proc.send_signal(signal.SIGUSR2)  # (passed on to both)
        assert task.result(timeout=30) in (new, other)
        one.proc.send_signal(signal.SIGTERM)
        assert one.proc.wait(timeout=60) == 0
    finally:
        one.stop()
