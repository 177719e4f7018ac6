"""Flow control across runner processes: three ``culex run`` processes on one server, each
running every queue of flow_jobs.py, and a record of what ran kept outside Redis."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis

import culex
from culex.operations import inspection, queue_control

from ..conftest import wait_until
from . import flow_jobs
from .flow_jobs import BoundedJob, CustomerJob, OpenJob, PausedJob, RatedJob, UrgentJob

RUNNERS = 3
JOBS_FILE = Path(flow_jobs.__file__).resolve()


class Fleet:
    """Runner processes on the test's server; the executions they recorded."""

    def __init__(self, url: str, folder: Path) -> None:
        self.folder = folder
        env = {
            **os.environ,
            "CULEX_REDIS_URL": url,
            "CULEX_SUCCESSFUL_JOB_TTL": "3600",  # (the hashes are read at the end)
            flow_jobs.LOG_DIR_ENV: str(folder),
        }
        command = [sys.executable, "-m", "culex", "--log-level", "WARNING", "run"]
        command += [str(JOBS_FILE), "--concurrency", "4"]
        self.procs: list[subprocess.Popen[bytes]] = []
        for n in range(RUNNERS):
            with open(folder / f"runner-{n}.log", "wb") as log:  # (the child keeps its copy)
                self.procs.append(
                    subprocess.Popen(
                        command,
                        env=env,
                        cwd=folder,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                    )
                )

    def events(self, job: type[culex.Job]) -> list[dict[str, Any]]:
        lines = []
        for path in self.folder.glob("exec-*.jsonl"):
            lines += [json.loads(line) for line in path.read_text().splitlines()]
        return sorted((e for e in lines if e["type"] == job.type_), key=lambda e: e["t"])

    def started(self, job: type[culex.Job]) -> int:
        return sum(1 for e in self.events(job) if e["ev"] == "start")

    def close(self) -> None:
        for proc in self.procs:
            proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


@pytest.fixture
def fleet(r: redis.Redis, url: str, tmp_path: Path) -> Iterator[Fleet]:
    running = Fleet(url, tmp_path)
    try:
        wait_until(lambda: len(inspection.runners()) == RUNNERS, what="three runners")
        yield running
    finally:
        running.close()
    for n in range(RUNNERS):
        log = (tmp_path / f"runner-{n}.log").read_text(errors="replace")
        assert "Traceback" not in log, log


def most_at_once(events: list[dict[str, Any]]) -> int:
    """The most executions between their start and end at one moment."""
    now = most = 0
    for event in events:  # (sorted by time)
        now += 1 if event["ev"] == "start" else -1
        most = max(most, now)
    return most


def test_a_concurrency_limit_holds_across_runners(fleet: Fleet) -> None:
    culex.enqueue_many(BoundedJob() for _ in range(30))
    wait_until(lambda: fleet.started(BoundedJob) == 30 and _ended(fleet, BoundedJob), 60, "30 runs")
    # 3 runners x 4 slots could run 12 at once; each perform runs inside its claim's lease
    assert most_at_once(fleet.events(BoundedJob)) == 2
    assert inspection.queue_counts(queues=["fc-bounded"])["fc-bounded"]["dead"] == 0


def test_a_rate_limit_holds_in_every_window_across_runners(r: redis.Redis, fleet: Fleet) -> None:
    tasks = culex.enqueue_many(RatedJob() for _ in range(20))
    wait_until(lambda: fleet.started(RatedJob) == 20, 30, "20 runs")
    # The claim's own record of each start (the server's clock, ms), for every task:
    starts = sorted(
        int(r.hget(f"culex:{{fc-rated}}:task:{t.id}", "started_at") or 0) for t in tasks
    )
    assert all(starts)
    # No window of 1,000 ms holds more than 5 starts: start i and start i+5 are >= 1 s apart.
    assert all(later - earlier >= 1000 for earlier, later in zip(starts, starts[5:], strict=False))
    span = (starts[-1] - starts[0]) / 1000
    print(f"the last of 20 starts at 5/s came {span:.2f} s after the first (3 s at the least)")


def test_a_paused_queue_runs_nothing_until_resumed(fleet: Fleet) -> None:
    culex.pause("fc-paused")
    paused = culex.enqueue_many(PausedJob() for _ in range(10))
    # The runners claim meanwhile: a task of another queue, enqueued after, runs.
    OpenJob().enqueue().result(timeout=10)
    OpenJob().enqueue().result(timeout=10)
    assert fleet.started(PausedJob) == 0
    assert inspection.queue_counts(queues=["fc-paused"])["fc-paused"]["waiting"] == 10
    assert queue_control.controls(queues=["fc-paused"])["fc-paused"].paused
    culex.resume("fc-paused")
    for task in paused:
        task.result(timeout=10)
    assert fleet.started(PausedJob) == 10


def test_group_limits_hold_per_group_and_a_busy_group_cannot_starve_a_quiet_one(
    fleet: Fleet,
) -> None:
    culex.enqueue_many((CustomerJob(customer="busy") for _ in range(30)), group="busy")
    for customer in ("quiet", "calm", "still"):
        CustomerJob(customer=customer).enqueue(group=customer)
    wait_until(lambda: fleet.started(CustomerJob) == 33 and _ended(fleet, CustomerJob), 60, "33")
    events = fleet.events(CustomerJob)
    for customer in ("busy", "quiet", "calm", "still"):  # one at a time in each group
        assert most_at_once([e for e in events if e["group"] == customer]) == 1
    assert most_at_once(events) > 1  # while the groups ran beside each other
    starts = [e for e in events if e["ev"] == "start"]
    busy = [e["t"] for e in starts if e["group"] == "busy"]
    for customer in ("quiet", "calm", "still"):  # each came in turn, not after the backlog
        (started,) = [e["t"] for e in starts if e["group"] == customer]
        assert started < busy[3]


def test_priorities_order_a_backlog_across_runners(r: redis.Redis, fleet: Fleet) -> None:
    culex.pause("fc-priority")  # (the backlog builds up before any runner takes from it)
    low = culex.enqueue_many((UrgentJob(level=-5) for _ in range(15)), priority=-5)
    plain = culex.enqueue_many(UrgentJob(level=0) for _ in range(15))
    high = culex.enqueue_many((UrgentJob(level=5) for _ in range(15)), priority=5)
    culex.resume("fc-priority")
    for task in high + plain + low:
        task.result(timeout=20)

    def started(tasks: list[culex.Task]) -> list[int]:  # the claim's own time, ms
        return [int(r.hget(f"culex:{{fc-priority}}:task:{t.id}", "started_at") or 0) for t in tasks]

    # every higher priority was claimed before any lower one, across the three runners
    assert max(started(high)) <= min(started(plain))
    assert max(started(plain)) <= min(started(low))


def _ended(fleet: Fleet, job: type[culex.Job]) -> bool:
    events = fleet.events(job)
    return sum(1 for e in events if e["ev"] == "end") == sum(
        1 for e in events if e["ev"] == "start"
    )
