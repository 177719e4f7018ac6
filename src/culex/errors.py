"""The exceptions culex raises, and how their messages show a value (cut short)."""

from __future__ import annotations

import math
from datetime import timedelta


def short(value: object, limit: int = 60) -> str:
    """repr of a value for an error message, cut short: values can be big."""
    try:
        text = repr(value)
    except Exception:  # a broken __repr__, or an int too long to print
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


class CulexError(Exception):
    """Base class of every error culex raises on purpose."""


class ConfigurationError(CulexError, ValueError):
    """A setting has a value culex cannot use."""


class ServerError(CulexError):
    """The Redis server refused a command (OOM, WRONGTYPE, ...) or cannot be reached."""


class ServerUnavailable(ServerError):
    """The server cannot serve anyone now: unreachable, loading, busy, read-only or out
    of memory.

    A runner backs off and tries again; the condition is not tied to one queue.
    """


class TaskFailed(CulexError):
    """The task ended in dead; ``reason`` is its last error."""

    def __init__(self, task_id: str, reason: str) -> None:
        super().__init__(f"task {task_id} is dead: {reason}")
        self.task_id = task_id
        self.reason = reason


class JobFailure(CulexError):
    """Raised by ``Job.fail()`` to end an attempt as failed."""

    def __init__(self, reason: str = "", *, retry: bool = True) -> None:
        super().__init__(reason or "failed by the job")
        self.reason = reason or "failed by the job"
        self.retry = retry


# The longest a job may push its task back: a longer wait is a new task at a time.
MAX_RETRY_LATER = timedelta(days=365)


class RetryLater(CulexError):
    """Raised in ``perform`` to run the task again after ``delay`` (a timedelta or seconds)
    without counting a failed attempt: a remote service said "slow down".

    The task goes to scheduled, due after the delay; its retry_count and last_error stay as
    they were (docs/flow-control.md). A delay that is not a number of seconds from 0 to
    365 days is a TypeError or ValueError raised here, in perform: the attempt then fails
    as any other exception makes it fail.
    """

    def __init__(self, delay: timedelta | float) -> None:
        if isinstance(delay, timedelta):
            seconds = delay.total_seconds()
        elif isinstance(delay, int | float) and not isinstance(delay, bool):
            seconds = float(delay)
        else:
            raise TypeError(
                f"RetryLater(delay): the delay must be a timedelta or a number of seconds, "
                f"got {short(delay)}"
            )
        most = MAX_RETRY_LATER.total_seconds()
        if math.isnan(seconds) or not 0 <= seconds <= most:
            raise ValueError(
                f"RetryLater(delay): the delay must be from 0 to {most:.0f} s, got {short(delay)}"
            )
        self.delay_ms = round(seconds * 1000)
        super().__init__(f"asked to run again in {self.delay_ms / 1000:g} s")


class SignalTimeout(CulexError, TimeoutError):
    """Raised by ``self.receive(name, timeout=...)`` when no signal ``name`` came in time
    (by the server's clock). Recorded: a later attempt's replay raises it again."""


class StepError(JobFailure):
    """A durable task that cannot go on as its code stands: its task goes to dead with the
    reason (a step over a limit, or code whose steps no longer match what was recorded)."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason, retry=False)


class AttemptOver(BaseException):
    """The attempt ends here without a report of its own: its task was suspended (a sleep,
    a wait for a signal: already in scheduled), or another attempt holds it (a stale
    step's record was refused). A BaseException, as asyncio's CancelledError, so that a
    perform's ``except Exception`` does not swallow it."""

    def __init__(self, why: str) -> None:
        super().__init__(why)
        self.why = why
