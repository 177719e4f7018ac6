"""The durable jobs of the chaos suite (``culex run /abs/path/durable_chaos_jobs.py``).

A task runs STEPS steps in a row, each handed the value of the step before (a replay must
give back the recorded value), and sleeps NAP seconds after its first SLEEP_AFTER steps
(its attempt ends there: the task waits in scheduled, and a later attempt resumes it). The
attempt's start and end go to the ledger's files as every chaos job's do
(chaos_jobs.record; an attempt that ends in the sleep logs "suspended"); each execution of
a step function writes a "begin" line before its work and an "end" line after it, fsynced,
to steps-<pid>.jsonl in the same folder (the ledger reads only exec-*.jsonl). A step's
value names the execution that made it, ``<k>/<pid>/<attempt>``, so the check knows which
execution was recorded.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import time
from typing import Any

import culex
from culex.errors import AttemptOver

try:
    from . import chaos_jobs
except ImportError:  # (loaded by path in a runner: its folder is on sys.path)
    chaos_jobs = importlib.import_module("chaos_jobs")

QUEUE = "durable_chaos"
STEPS = 5
SLEEP_AFTER = 2  # the sleep comes after this many steps (its record is step:2)
NAP = 0.2  # seconds

_files: dict[int, int] = {}  # pid -> file descriptor


def _line(event: str, task_id: str, k: int, attempt: int, prev: str) -> None:
    pid = os.getpid()
    if pid not in _files:
        path = os.path.join(os.environ[chaos_jobs.LOG_DIR_ENV], f"steps-{pid}.jsonl")
        _files[pid] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    line = {"ev": event, "id": task_id, "k": k, "attempt": attempt, "pid": pid, "prev": prev}
    os.write(_files[pid], json.dumps({**line, "t": time.time()}).encode() + b"\n")
    os.fsync(_files[pid])


def work(task_id: str, k: int, attempt: int, prev: str, ms: int) -> str:
    _line("begin", task_id, k, attempt, prev)
    time.sleep(ms / 1000)
    _line("end", task_id, k, attempt, prev)
    return f"{k}/{os.getpid()}/{attempt}"


async def awork(task_id: str, k: int, attempt: int, prev: str, ms: int) -> str:
    _line("begin", task_id, k, attempt, prev)
    await asyncio.sleep(ms / 1000)
    _line("end", task_id, k, attempt, prev)
    return f"{k}/{os.getpid()}/{attempt}"


class DurableChaosJob(culex.QueuedJob):
    """STEPS steps of ``ms`` milliseconds each, and a sleep (async)."""

    queue = QUEUE
    max_retries = 20
    ms: int

    async def perform(self) -> dict[str, Any]:
        chaos_jobs.record("start", self)
        value = ""
        for k in range(STEPS):
            if k == SLEEP_AFTER:
                try:
                    await self.asleep(NAP)
                except AttemptOver as over:  # ("suspended"; "stale": not its attempt's)
                    chaos_jobs.record(over.why, self)
                    raise
            value = await self.astep(f"s{k}", awork, self.task_id, k, self.attempt, value, self.ms)
        chaos_jobs.record("ok", self)
        return {"pid": os.getpid(), "attempt": self.attempt, "last": value}


class SyncDurableChaosJob(culex.QueuedJob):
    """The same in a plain ``def perform`` (in the runner's thread pool)."""

    queue = QUEUE
    max_retries = 20
    ms: int

    def perform(self) -> dict[str, Any]:
        chaos_jobs.record("start", self)
        value = ""
        for k in range(STEPS):
            if k == SLEEP_AFTER:
                try:
                    self.sleep(NAP)
                except AttemptOver as over:  # ("suspended"; "stale": not its attempt's)
                    chaos_jobs.record(over.why, self)
                    raise
            value = self.step(f"s{k}", work, self.task_id, k, self.attempt, value, self.ms)
        chaos_jobs.record("ok", self)
        return {"pid": os.getpid(), "attempt": self.attempt, "last": value}


JOBS: tuple[type[culex.QueuedJob], ...] = (DurableChaosJob, SyncDurableChaosJob)
