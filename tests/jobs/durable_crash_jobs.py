"""Durable jobs that ``culex run`` processes run in tests/jobs/test_durable_crash.py.

The runner loads this file by its path. Every step function appends a line to a file of
its own in ``DURABLE_CRASH_DIR`` (one file per task and step, fsynced), so the test counts
what really ran, outside Redis, across processes that are SIGKILLed.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import culex

DIR_ENV = "DURABLE_CRASH_DIR"
QUEUE = "durable_crash"


def ran(task_id: str, step: str, directory: str | Path | None = None) -> list[int]:
    """The pids that ran ``step`` of ``task_id``, one per execution, in order."""
    path = Path(directory or os.environ[DIR_ENV]) / f"{task_id}.{step}"
    return [int(line) for line in path.read_text().split()] if path.exists() else []


def mark(task_id: str, step: str) -> int:
    """Record one execution of ``step`` (fsynced before the step goes on); the count so far."""
    path = os.path.join(os.environ[DIR_ENV], f"{task_id}.{step}")
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, f"{os.getpid()}\n".encode())
        os.fsync(fd)
    finally:
        os.close(fd)
    return len(ran(task_id, step))


def reserve(task_id: str) -> str:
    mark(task_id, "reserve")
    return f"seat-{task_id}"


def pay(task_id: str, seat: str) -> str:
    """Blocks for good the first time it runs (the test SIGKILLs its process there)."""
    if mark(task_id, "pay") == 1:
        while True:
            time.sleep(60)
    return f"paid {seat}"


def note(task_id: str, what: str) -> str:
    mark(task_id, what)
    return what


class DurableKilledJob(culex.QueuedJob):
    """Step 1 records; step 2 blocks in its first execution, until its runner is killed."""

    queue = QUEUE

    def perform(self) -> str:
        seat = self.step("reserve", reserve, self.task_id)
        return self.step("pay", pay, self.task_id, seat)


class DurableNapJob(culex.QueuedJob):
    """A step, a sleep of ``seconds``, a step; returns the pid of the runner that finished."""

    queue = QUEUE
    seconds: float

    def perform(self) -> int:
        self.step("before", note, self.task_id, "before")
        self.sleep(self.seconds)
        self.step("after", note, self.task_id, "after")
        return os.getpid()


JOBS: tuple[type[culex.QueuedJob], ...] = (DurableKilledJob, DurableNapJob)
