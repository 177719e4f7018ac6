"""Durable jobs for the tests: each counts what its step functions really ran, outside Redis."""

from __future__ import annotations

import asyncio
from collections import Counter
from datetime import timedelta
from decimal import Decimal
from typing import ClassVar

import culex

QUEUE = "durable"

ran: Counter[str] = Counter()  # "<task id>:<step>" -> times the function ran


def charge(task_id: str, cents: int) -> Decimal:
    ran[f"{task_id}:charge"] += 1
    return Decimal(cents) / 100


def note(task_id: str, what: str) -> str:
    ran[f"{task_id}:{what}"] += 1
    return what


async def anote(task_id: str, what: str) -> str:
    ran[f"{task_id}:{what}"] += 1
    await asyncio.sleep(0)
    return what


class DurableChargeJob(culex.QueuedJob):
    """Charges, fails its first attempt after the charge, then mails: the charge runs once."""

    queue = QUEUE
    cents: int
    fail_once: bool = True

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(milliseconds=10)

    def perform(self) -> str:
        amount = self.step("charge", charge, self.task_id, self.cents)
        assert isinstance(amount, Decimal)  # (typed back by charge's annotation on replay)
        if self.fail_once and self.attempt == 1:
            raise RuntimeError("the mail server is down")
        self.step("mail", note, self.task_id, "mail")
        return f"charged {amount}"


class DurableSleepJob(culex.QueuedJob):
    """A step, a sleep, a step."""

    queue = QUEUE
    seconds: float = 0.2

    def perform(self) -> int:
        self.step("before", note, self.task_id, "before")
        self.sleep(self.seconds)
        self.step("after", note, self.task_id, "after")
        return self.attempt


class DurableApprovalJob(culex.QueuedJob):
    """Waits for the signal "approved"; says "timed out" when it does not come in time."""

    queue = QUEUE
    wait_s: float | None = None

    def perform(self) -> str:
        self.step("asked", note, self.task_id, "asked")
        try:
            by = self.receive("approved", timeout=self.wait_s)
        except culex.SignalTimeout:
            return "timed out"
        self.step("welcome", note, self.task_id, "welcome")
        return f"approved by {by['by']}"


class DurableAsyncJob(culex.QueuedJob):
    """The async twins: astep, asleep, areceive."""

    queue = QUEUE

    async def perform(self) -> str:
        first = await self.astep("first", anote, self.task_id, "first")
        await self.asleep(0.05)
        value = await self.areceive("go", timeout=30)
        second = await self.astep("second", anote, self.task_id, "second")
        return f"{first} {value} {second}"


class DurableChildJob(culex.QueuedJob):
    """A step and a sleep in a process of its own (isolation = "process")."""

    queue = QUEUE
    isolation = "process"

    def perform(self) -> str:
        self.step("in-child", note, self.task_id, "in-child")
        self.sleep(0.05)
        return "done"


class DurableRenamedJob(culex.QueuedJob):
    """Its first step's name comes from ``names``: a test changes it between attempts."""

    queue = QUEUE
    names: ClassVar[list[str]] = ["draft"]

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(milliseconds=10)

    def perform(self) -> None:
        self.step(self.names[0], note, self.task_id, "x")
        if self.attempt == 1:
            raise RuntimeError("first attempt fails")


class DurableManyStepsJob(culex.QueuedJob):
    """As many steps as it is told."""

    queue = QUEUE
    steps: int

    def perform(self) -> int:
        for n in range(self.steps):
            self.step(f"s{n}", note, self.task_id, f"s{n}")
        return self.steps


class DurableGatherJob(culex.QueuedJob):
    """Two steps at once under asyncio.gather: refused, places run one at a time."""

    queue = QUEUE

    async def perform(self) -> list[str]:
        both = asyncio.gather(
            self.astep("a", anote, self.task_id, "a"), self.astep("b", anote, self.task_id, "b")
        )
        return list(await both)


class DurableRenamedReceiveJob(culex.QueuedJob):
    """Waits for the signal named ``names[0]``: a test renames it while the task waits."""

    queue = QUEUE
    names: ClassVar[list[str]] = ["approved"]

    def perform(self) -> str:
        self.step("asked", note, self.task_id, "asked")
        return f"got {self.receive(self.names[0])}"
