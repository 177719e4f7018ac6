"""culex: a reliable, fast, Redis-backed background job queue.

>>> class SendEmailJob(culex.QueuedJob):
...     to: str
...     def perform(self) -> str: ...
>>> task = SendEmailJob(to="a@b.c").enqueue()
"""

from .config import Settings, configure, settings
from .dead import DeadTask, adead_tasks, aretry_dead, dead_tasks, retry_dead
from .enqueue import EnqueueManyError
from .errors import (
    ConfigurationError,
    CulexError,
    JobFailure,
    RetryLater,
    ServerError,
    ServerUnavailable,
    TaskFailed,
)
from .job import Job, QueuedJob, aenqueue_many, enqueue_many
from .job_registry import JobRegistry, registry
from .periodic import MonthSpan, PeriodicJob, months
from .queue_control import (
    QueueControl,
    Rate,
    alimit,
    apause,
    aresume,
    limit,
    pause,
    resume,
)
from .runner import Runner
from .serialization import register_type
from .task import Task, TaskNotFound, TaskState

__all__ = [
    "ConfigurationError",
    "CulexError",
    "DeadTask",
    "EnqueueManyError",
    "Job",
    "JobFailure",
    "JobRegistry",
    "MonthSpan",
    "PeriodicJob",
    "QueueControl",
    "QueuedJob",
    "Rate",
    "RetryLater",
    "Runner",
    "ServerError",
    "ServerUnavailable",
    "Settings",
    "Task",
    "TaskFailed",
    "TaskNotFound",
    "TaskState",
    "adead_tasks",
    "aenqueue_many",
    "alimit",
    "apause",
    "aresume",
    "aretry_dead",
    "configure",
    "dead_tasks",
    "enqueue_many",
    "limit",
    "months",
    "pause",
    "register_type",
    "registry",
    "resume",
    "retry_dead",
    "settings",
]
