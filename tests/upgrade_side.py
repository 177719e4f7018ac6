"""One side of tests/test_upgrade.py: the same job module and commands, run as a script by
this culex or by an older one (PYTHONPATH picks which), in a process of its own.

It uses only what both versions have (QueuedJob, PeriodicJob, Runner, Task, dead_tasks), so
that it imports under either. Settings come from the environment (CULEX_REDIS_URL, ...);
UPGRADE_QUEUE names the queue of the queued jobs, UPGRADE_SIDE the version ("old" or
"new"), UPGRADE_TICKS a file that each periodic slot appends its task id to.

    python tests/upgrade_side.py where             # which culex this is
    python tests/upgrade_side.py enqueue JOB...    # {job: task id}
    python tests/upgrade_side.py run QUEUE         # a runner, until SIGTERM
    python tests/upgrade_side.py read ID...        # {id: {"value": repr} or {"dead": reason}}
    python tests/upgrade_side.py retry ID          # retry a dead task: true or false
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
import time
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any

import culex

QUEUE = os.environ.get("UPGRADE_QUEUE", "upgrade")
SIDE = os.environ.get("UPGRADE_SIDE", "?")


class Color(Enum):
    RED = "red"
    BLUE = "blue"


class EchoJob(culex.QueuedJob):
    """Params of every encoding: the runner says what it decoded."""

    queue = QUEUE
    text: str
    count: int
    ratio: float
    amount: Decimal
    when: datetime
    wait: timedelta
    names: dict[int, str]
    ids: list[uuid.UUID]
    color: Color
    blob: bytes
    pair: tuple[int, str]
    maybe: float | None = None

    def perform(self) -> dict[str, str]:
        return {name: repr(getattr(self, name)) for name in sorted(self.params_)}


class SpanJob(culex.QueuedJob):
    queue = QUEUE

    def perform(self) -> timedelta:
        return timedelta(seconds=1, microseconds=500)


class NamesJob(culex.QueuedJob):
    queue = QUEUE

    def perform(self) -> dict[int, str]:
        return {1: "a", 2: "b"}


class SpansJob(culex.QueuedJob):
    queue = QUEUE

    def perform(self) -> dict[str, list[timedelta]]:
        return {"a": [timedelta(hours=1)]}


class LimitJob(culex.QueuedJob):
    queue = QUEUE

    def perform(self) -> float:
        return math.inf


class PriceJob(culex.QueuedJob):
    queue = QUEUE

    def perform(self) -> Decimal:
        return Decimal("1.10")


class LooseJob(culex.QueuedJob):
    """Annotations an older culex took: HEAD must import this module too."""

    queue = QUEUE

    def perform(self) -> dict:  # type: ignore[type-arg]
        return {"k": [1, "x"]}


class NoneJob(culex.QueuedJob):
    queue = QUEUE

    def perform(self) -> str:
        return None  # type: ignore[return-value]


class AnyJob(culex.QueuedJob):
    queue = QUEUE

    def perform(self) -> dict[str, Any]:
        return {"at": datetime(2030, 1, 1, tzinfo=UTC)}


class FlakyJob(culex.QueuedJob):
    """Fails twice, then succeeds: two retries."""

    queue = QUEUE
    max_retries = 3

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(0)

    def perform(self) -> int:
        if self.retry_count < 2:
            raise RuntimeError(f"flaky on retry {self.retry_count}")
        return self.retry_count


class DoomedJob(culex.QueuedJob):
    """Always fails: dead after one retry."""

    queue = QUEUE
    max_retries = 1

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(0)

    def perform(self) -> None:
        raise RuntimeError(f"doomed on {SIDE}")


class SlowJob(culex.QueuedJob):
    """Hangs on its first attempt (its runner is killed then), quick after a reclaim."""

    queue = QUEUE
    max_retries = 2

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(0)

    def perform(self) -> str:
        if self.attempt == 1:
            time.sleep(120)
        return f"{SIDE} on attempt {self.attempt}"


if os.environ.get("UPGRADE_TICKS"):

    class TickJob(culex.PeriodicJob):
        queue = QUEUE
        run_every = 1

        def perform(self) -> None:
            with open(os.environ["UPGRADE_TICKS"], "a") as ticks:
                ticks.write(f"{self.task_id} {SIDE}\n")


def made(name: str) -> culex.QueuedJob:
    if name == "EchoJob":
        return EchoJob(
            text="héllo",
            count=2**53 + 1,
            ratio=0.1,
            amount=Decimal("1.10"),
            when=datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=UTC),
            wait=timedelta(days=1, microseconds=7),
            names={1: "a", 2: "b"},
            ids=[uuid.UUID(int=1)],
            color=Color.BLUE,
            blob=b"\xff\x00",
            pair=(1, "x"),
        )
    job: culex.QueuedJob = globals()[name]()
    return job


def main(command: str, args: list[str]) -> object:
    if command == "where":
        return culex.__file__
    if command == "enqueue":
        return {name: made(name).enqueue().id for name in args}
    if command == "run":
        logging.basicConfig(level=logging.INFO, format=f"%(asctime)s {SIDE}: %(message)s")
        culex.Runner(run_from=args).run()
        return None
    if command == "read":
        return {task_id: read(task_id) for task_id in args}
    if command == "retry":
        return culex.Task(args[0], QUEUE).retry()
    raise SystemExit(f"unknown command {command!r}")


def read(task_id: str) -> dict[str, str]:
    try:
        return {"value": repr(culex.Task(task_id, QUEUE).result(timeout=20))}
    except culex.TaskFailed as exc:
        return {"dead": str(exc)}
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}


if __name__ == "__main__":
    print(json.dumps(main(sys.argv[1], sys.argv[2:])), flush=True)
