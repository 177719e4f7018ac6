"""What a drain ran: one record per attempt, and the errors a drain raises."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

from ..errors import CulexError

AttemptOutcome = Literal["succeeded", "failed", "dead", "retry_later"]
FAILED = ("failed", "dead")  # the outcomes a drain with fail_fast stops on


@dataclass(frozen=True, slots=True)
class Attempt:
    """One attempt that :func:`culex.testing.drain` ran.

    ``outcome``: "succeeded", "failed" (a retry is scheduled), "dead", or "retry_later"
    (perform raised culex.RetryLater: scheduled again, no failure counted). ``result``: what
    perform returned, as a producer's ``task.result()`` reads it back. ``error``: the
    reason stored as the task's last_error. ``exception``: the exception the job raised,
    with its traceback (None when it raised none in this process: a time limit, a broken
    task, a perform in a child process)."""

    queue: str
    task_id: str
    job: str
    params: dict[str, Any]
    attempt: int
    outcome: AttemptOutcome
    result: Any = None
    error: str | None = None
    exception: BaseException | None = field(default=None, repr=False, compare=False)

    @property
    def name(self) -> str:
        """How culex's logs name the task: ``queue<id>``."""
        return f"{self.queue}<{self.task_id}>"


def params_of(raw: bytes | str) -> dict[str, Any]:
    """A task's params as stored, decoded as JSON ({} when they are not a JSON object)."""
    try:
        decoded = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return decoded if isinstance(decoded, dict) else {}


class DrainError(CulexError):
    """Base class of the errors :func:`culex.testing.drain` raises."""


class AttemptFailed(DrainError):
    """An attempt failed without an exception of the job's own to re-raise (a time limit,
    a broken task, a perform in a child process). ``attempt``: its record."""

    def __init__(self, attempt: Attempt) -> None:
        super().__init__(
            f"{attempt.job} task {attempt.name} (attempt {attempt.attempt}) "
            f"{'went to dead' if attempt.outcome == 'dead' else 'failed'}: {attempt.error}"
        )
        self.attempt = attempt


class DrainTimeout(DrainError, TimeoutError):
    """The queues were not empty when the drain's timeout passed. ``left``: what each
    queue still held ({queue: {state: count}}); ``running``: the tasks still running."""

    def __init__(self, timeout: float, left: dict[str, dict[str, int]], running: list[str]) -> None:
        held = "; ".join(
            f"{queue}: " + ", ".join(f"{n} {state}" for state, n in counts.items() if n)
            for queue, counts in left.items()
            if any(counts.values())
        )
        shown = ", ".join(running[:10]) + (", ..." if len(running) > 10 else "")
        super().__init__(
            f"drain: {timeout:g} s passed before the queues were empty; left: "
            f"{held or 'nothing'}" + (f"; still running: {shown}" if running else "")
        )
        self.left = left
        self.running = running
