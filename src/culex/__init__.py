"""culex: a reliable, fast, Redis-backed background job queue.

>>> class SendEmailJob(culex.QueuedJob):
...     to: str
...     def perform(self) -> str: ...
>>> task = SendEmailJob(to="a@b.c").enqueue()
"""

from typing import TYPE_CHECKING

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

# Modules the docs spell as culex.inspection.runners(), culex.bulk.apply(...): each is
# imported at its first use after a bare `import culex`, so that a producer that never
# uses them does not pay for importing them (the dashboard's and Django's need their
# extras only then).
_LAZY_MODULES = frozenset(
    {"bulk", "dashboard", "django", "inspection", "metrics", "stats", "testing"}
)

if TYPE_CHECKING:
    from . import bulk as bulk
    from . import dashboard as dashboard
    from . import django as django
    from . import inspection as inspection
    from . import metrics as metrics
    from . import stats as stats
    from . import testing as testing
else:

    def __getattr__(name: str) -> object:
        if name in _LAZY_MODULES:
            import importlib

            return importlib.import_module(f"{__name__}.{name}")
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


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
