"""culex: a reliable, fast, Redis-backed background job queue.

>>> class SendEmailJob(culex.QueuedJob):
...     to: str
...     def perform(self) -> str: ...
>>> task = SendEmailJob(to="a@b.c").enqueue()
"""

from .config import Settings, configure, settings
from .enqueue import aenqueue_many, enqueue_many
from .errors import (
    ConfigurationError,
    CulexError,
    JobFailure,
    ServerError,
    ServerUnavailable,
    TaskFailed,
)
from .job import Job, JobRegistry, QueuedJob, registry
from .periodic import MonthSpan, PeriodicJob, months
from .runner import Runner
from .serialization import register_type
from .task import Task, TaskNotFound, TaskState

__all__ = [
    "ConfigurationError",
    "CulexError",
    "Job",
    "JobFailure",
    "JobRegistry",
    "MonthSpan",
    "PeriodicJob",
    "QueuedJob",
    "Runner",
    "ServerError",
    "ServerUnavailable",
    "Settings",
    "Task",
    "TaskFailed",
    "TaskNotFound",
    "TaskState",
    "aenqueue_many",
    "configure",
    "enqueue_many",
    "months",
    "register_type",
    "registry",
    "settings",
]
