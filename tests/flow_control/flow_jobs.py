"""The jobs the flow-control tests' runner processes run (``culex run /abs/path/flow_jobs.py``).

Each perform appends its start and end (the wall clock of this machine, shared by every
runner process) to one file per process, outside Redis, so a test can count what ran at
once and when, whatever the queue says of itself.
"""

from __future__ import annotations

import json
import os
import threading
import time

import culex

LOG_DIR_ENV = "FLOW_LOG_DIR"

_lock = threading.Lock()


def record(job: culex.Job, event: str, group: str = "") -> None:
    line = json.dumps(
        {"ev": event, "id": job.task_id, "type": job.type_, "t": time.time(), "group": group}
    )
    path = os.path.join(os.environ[LOG_DIR_ENV], f"exec-{os.getpid()}.jsonl")
    with _lock:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode() + b"\n")
        finally:
            os.close(fd)


class BoundedJob(culex.QueuedJob):
    """At most two run at once, across every runner."""

    queue = "fc-bounded"
    concurrency_limit = 2

    def perform(self) -> None:
        record(self, "start")
        time.sleep(0.05)
        record(self, "end")


class RatedJob(culex.QueuedJob):
    """At most five start in any second, across every runner."""

    queue = "fc-rated"
    rate_limit = "5/s"

    def perform(self) -> None:
        record(self, "start")


class PausedJob(culex.QueuedJob):
    queue = "fc-paused"

    def perform(self) -> None:
        record(self, "start")


class OpenJob(culex.QueuedJob):
    """No limit: shows the runners claim while another queue is paused."""

    queue = "fc-open"

    def perform(self) -> None:
        record(self, "start")


class CustomerJob(culex.QueuedJob):
    """One at a time per customer (its group), across every runner."""

    queue = "fc-groups"
    group_concurrency = 1
    customer: str

    def perform(self) -> None:
        record(self, "start", self.customer)
        time.sleep(0.02)
        record(self, "end", self.customer)


class UrgentJob(culex.QueuedJob):
    """A backlog of mixed priorities."""

    queue = "fc-priority"
    level: int

    def perform(self) -> None:
        record(self, "start", str(self.level))
