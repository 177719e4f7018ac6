"""The exceptions culex raises."""

from __future__ import annotations


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
