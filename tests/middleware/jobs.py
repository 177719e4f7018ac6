"""Jobs of the middleware tests (names start with Mw: the registry is global)."""

from __future__ import annotations

import contextvars
import os
from typing import Any

import culex

# What the recording middleware and the jobs saw, in order (this process only).
seen: list[Any] = []
tenant: contextvars.ContextVar[str] = contextvars.ContextVar("tenant")
locale: contextvars.ContextVar[Any] = contextvars.ContextVar("locale")


class MwHeadersJob(culex.QueuedJob):
    queue = "mw_headers"
    n: int = 0

    def perform(self) -> dict[str, str]:
        seen.append(("perform", self.n, dict(self.headers)))
        return self.headers


class MwAsyncJob(culex.QueuedJob):
    queue = "mw_async"

    async def perform(self) -> dict[str, str]:
        seen.append(("perform", dict(self.headers)))
        return self.headers


class MwFlakyJob(culex.QueuedJob):
    queue = "mw_flaky"
    max_retries = 1

    def reschedule_interval(self, retry_count: int) -> Any:
        return 0

    def perform(self) -> None:
        raise RuntimeError(f"attempt {self.attempt} broke")


class MwContextJob(culex.QueuedJob):
    """Reads the context variables and, when told, enqueues a child (which inherits them)."""

    queue = "mw_context"
    nested: bool = False
    fail_first: bool = False

    def reschedule_interval(self, retry_count: int) -> Any:
        return 0

    def perform(self) -> list[Any]:
        got = [tenant.get("none"), locale.get("none")]
        seen.append(("context", self.nested, got))
        if self.nested:
            MwContextJob().enqueue()
        if self.fail_first and self.attempt == 1:
            raise RuntimeError("first attempt fails")
        return got


class MwProcessJob(culex.QueuedJob):
    queue = "mw_process"
    isolation = "process"

    def perform(self) -> list[Any]:
        return [os.getpid(), self.headers, tenant.get("none")]


class MwSecretJob(culex.QueuedJob):
    queue = "mw_secret"
    card: str
    amount: int = 0

    def perform(self) -> list[Any]:
        return [self.card, self.amount]


class Recording(culex.Middleware):
    """Notes each hook in ``seen`` under its name; with ``header``, writes it at enqueue."""

    def __init__(self, name: str, header: str = "") -> None:
        self.name = name
        self.header = header

    def on_enqueue(self, job: culex.Job, headers: dict[str, str]) -> None:
        seen.append((self.name, "on_enqueue", type(job).__name__))
        if self.header:
            headers[self.header] = self.name

    def around_perform(self, job: culex.Job, call_next: Any) -> Any:
        seen.append((self.name, "before"))
        try:
            return call_next()
        finally:
            seen.append((self.name, "after"))

    async def aaround_perform(self, job: culex.Job, call_next: Any) -> Any:
        seen.append((self.name, "abefore"))
        try:
            return await call_next()
        finally:
            seen.append((self.name, "aafter"))

    def on_failure(self, job: culex.Job, error: BaseException, will_retry: bool) -> None:
        seen.append((self.name, "on_failure", type(job).__name__, str(error), will_retry))

    def on_dead(self, job: culex.Job | None, error: BaseException) -> None:
        kind = None if job is None else type(job).__name__
        seen.append((self.name, "on_dead", kind, str(error)))


class MwStuckJob(culex.QueuedJob):
    """Waits for an event nothing sets: its time limit ends it."""

    queue = "mw_stuck"
    timeout = 0.05
    max_retries = 0

    async def perform(self) -> None:
        import asyncio

        await asyncio.Event().wait()


class MwWaitingJob(culex.QueuedJob):
    """Notes its start and waits until it is cancelled."""

    queue = "mw_waiting"

    async def perform(self) -> None:
        import asyncio

        seen.append(("perform", "started"))
        await asyncio.Event().wait()
