"""The jobs the chaos suite's runner processes run (``culex run /abs/path/chaos_jobs.py``).

Every execution writes its own history, outside Redis: a line when it starts and a line
when it ends, appended to one file per runner process (O_APPEND) and fsynced before the
job goes on, so a SIGKILL a microsecond later cannot erase it. ``ledger.py`` reads these
files back to check the queue.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import threading
import time
from datetime import timedelta
from typing import Any

import culex

LOG_DIR_ENV = "CHAOS_LOG_DIR"
QUEUE = "chaos"

_lock = threading.Lock()
_log: dict[int, int] = {}  # pid -> file descriptor (a fork would get its own file)


def record(event: str, job: culex.Job) -> None:
    """Append one event of this execution and fsync it before returning."""
    line = json.dumps(
        {
            "ev": event,
            "id": job.task_id,
            "attempt": job.attempt,
            "retry": job.retry_count,
            "pid": os.getpid(),
            "t": time.time(),
        }
    )
    fd = _descriptor()
    os.write(fd, line.encode() + b"\n")  # one write: lines of two threads never interleave
    os.fsync(fd)


def _descriptor() -> int:
    pid = os.getpid()
    with _lock:
        if pid not in _log:
            directory = os.environ[LOG_DIR_ENV]
            path = os.path.join(directory, f"exec-{pid}.jsonl")
            _log[pid] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return _log[pid]


def _result(job: culex.Job) -> dict[str, int]:
    # Who finished the task: the final state must be that of the runner whose report won.
    return {"pid": os.getpid(), "attempt": job.attempt}


class ChaosJob(culex.QueuedJob):
    """Sleeps ``ms`` milliseconds (asyncio: a graceful stop can cancel it)."""

    queue = QUEUE
    max_retries = 20
    ms: int

    async def perform(self) -> dict[str, int]:
        record("start", self)
        try:
            await asyncio.sleep(self.ms / 1000)
        except asyncio.CancelledError:
            record("cancelled", self)
            raise
        record("ok", self)
        return _result(self)


class OtherChaosJob(ChaosJob):
    """The same work in another queue."""

    queue = "chaos_other"


class ThirdChaosJob(ChaosJob):
    """The same work in a third queue (on a cluster, the three are on three masters)."""

    queue = "chaos_third"


class SyncChaosJob(culex.QueuedJob):
    """The same work in a plain ``def perform`` (runs in the runner's thread pool)."""

    queue = QUEUE
    max_retries = 20
    ms: int

    def perform(self) -> dict[str, int]:
        record("start", self)
        time.sleep(self.ms / 1000)
        record("ok", self)
        return _result(self)


class PoisonRaiseJob(culex.QueuedJob):
    """Always raises: retried max_retries times, then dead."""

    queue = QUEUE
    max_retries = 2

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(milliseconds=50)

    def perform(self) -> Any:
        record("start", self)
        record("raise", self)
        raise RuntimeError("poison: this task always raises")


class PoisonExitJob(culex.QueuedJob):
    """Kills its runner process on every attempt (``os._exit``): dead after max_stalls + 1
    (its attempts are stalls, never failures: max_retries does not bound it)."""

    queue = QUEUE
    max_retries = 1
    max_stalls = 1  # (its own bound: the tasks that share its runners keep the setting's)

    def perform(self) -> Any:
        record("start", self)
        record("exit", self)
        os._exit(3)


def _dump_tasks(signum: int, frame: object) -> None:
    """SIGUSR1: write the stack of every asyncio task to stderr (to diagnose a hung runner)."""
    loop = asyncio._get_running_loop()
    if loop is None:
        print("chaos: no running event loop", file=sys.stderr)
        return
    for task in asyncio.all_tasks(loop):
        print(f"chaos: asyncio task {task.get_name()}:", file=sys.stderr)
        task.print_stack(file=sys.stderr)
    sys.stderr.flush()


if threading.current_thread() is threading.main_thread():
    signal.signal(signal.SIGUSR1, _dump_tasks)


JOBS: tuple[type[culex.QueuedJob], ...] = (
    ChaosJob,
    OtherChaosJob,
    ThirdChaosJob,
    SyncChaosJob,
    PoisonRaiseJob,
    PoisonExitJob,
)
