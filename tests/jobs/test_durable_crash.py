"""Durable tasks across real ``culex run`` processes: a runner SIGKILLed inside a step (the
next runner reclaims the task and replays it: the recorded step does not run again), and a
sleep across a runner restart (the runner that ran the first part stops while the task
sleeps; another resumes it after the wake time). What the step functions ran is counted in
files (durable_crash_jobs.py), outside Redis and outside the killed processes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import culex

from ..conftest import wait_until
from . import durable_crash_jobs as jobs

JOBS_FILE = Path(jobs.__file__).resolve()
LEASE = 1.0  # (seconds: a killed runner's task is reclaimed soon after)

# The test process only enqueues these jobs: the runners are other processes.
for _job in jobs.JOBS:
    culex.registry.remove(_job)

Start = Callable[[], "subprocess.Popen[bytes]"]


@pytest.fixture
def start_runner(url: str, tmp_path: Path) -> Iterator[Start]:
    """Start ``culex run durable_crash_jobs.py`` processes; each is killed at the end."""
    started: list[subprocess.Popen[bytes]] = []
    env = {
        **os.environ,
        # (the culex this test imports, not another installed one)
        "PYTHONPATH": os.pathsep.join(
            [str(Path(culex.__file__).resolve().parents[1]), os.environ.get("PYTHONPATH", "")]
        ),
        "CULEX_REDIS_URL": url,
        "CULEX_LEASE": str(LEASE),
        jobs.DIR_ENV: str(tmp_path),
    }

    def start() -> subprocess.Popen[bytes]:
        log = open(tmp_path / f"runner-{len(started)}.log", "wb")  # noqa: SIM115
        command = [sys.executable, "-m", "culex", "run", str(JOBS_FILE), "--concurrency", "2"]
        proc = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=log, stderr=log)
        log.close()
        started.append(proc)
        return proc

    try:
        yield start
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
            proc.wait()


def records(task: culex.Task) -> list[dict[str, object]]:
    info = task.info()
    return [json.loads(info[f"step:{k}"]) for k in range(int(info.get("steps", 0)))]


def test_a_runner_killed_inside_step_2_the_next_replays_step_1_and_reruns_step_2(
    r: redis.Redis, start_runner: Start, tmp_path: Path
) -> None:
    first = start_runner()
    task = jobs.DurableKilledJob().enqueue()
    wait_until(lambda: jobs.ran(task.id, "pay", tmp_path), timeout=30, what="step 2 to start")
    assert task.info()["steps"] == "1"  # step 1 is recorded; step 2 is running
    first.kill()  # SIGKILL, inside step 2's function
    first.wait()
    second = start_runner()  # reclaims the task once its lease has run out
    assert task.result(timeout=60) == f"paid seat-{task.id}"
    assert jobs.ran(task.id, "reserve", tmp_path) == [first.pid]  # once: replayed after
    assert jobs.ran(task.id, "pay", tmp_path) == [first.pid, second.pid]  # killed, then run
    info = task.info()
    assert (info["attempt"], info["stalls"], info.get("retry_count", "0")) == ("2", "1", "0")
    assert [(x["kind"], x["name"]) for x in records(task)] == [("step", "reserve"), ("step", "pay")]


def test_a_sleep_outlives_its_runner_and_another_resumes_it_after_the_wake_time(
    r: redis.Redis, start_runner: Start, tmp_path: Path
) -> None:
    first = start_runner()
    task = jobs.DurableNapJob(seconds=3).enqueue()
    wait_until(
        lambda: task.state() == culex.TaskState.SCHEDULED and task.info().get("steps") == "2",
        timeout=30,
        what="the sleep",
    )
    first.terminate()  # a graceful stop, while the task sleeps
    assert first.wait(timeout=30) == 0
    asleep = task.info()
    assert asleep["state"] == "scheduled", "the first runner resumed it before it stopped"
    second = start_runner()
    assert task.result(timeout=60) == second.pid  # the second runner finished it
    assert jobs.ran(task.id, "before", tmp_path) == [first.pid]
    assert jobs.ran(task.id, "after", tmp_path) == [second.pid]
    before, nap, after = records(task)
    assert (before["name"], nap["kind"], after["name"]) == ("before", "sleep", "after")
    assert isinstance(nap["until"], int) and isinstance(after["at"], int)
    assert after["at"] >= nap["until"] == int(asleep["due_at"])  # resumed after it woke
    info = task.info()
    assert (info["attempt"], info.get("retry_count", "0"), info.get("stalls", "0")) == (
        "2",
        "0",
        "0",
    )
