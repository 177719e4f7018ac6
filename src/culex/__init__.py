"""culex: a reliable, fast, Redis-backed background job queue.

>>> class SendEmailJob(culex.QueuedJob):
...     to: str
...     def perform(self) -> str: ...
>>> task = SendEmailJob(to="a@b.c").enqueue()
"""

from typing import TYPE_CHECKING

from .config import Settings, configure, settings
from .errors import (
    ConfigurationError,
    CulexError,
    JobFailure,
    RetryLater,
    ServerError,
    ServerUnavailable,
    SignalTimeout,
    StepError,
    TaskFailed,
)
from .jobs.batches import EnqueueManyError
from .jobs.events import (
    Event,
    EventsOff,
    EventsTrimmed,
    aevents,
    arecent_events,
    events,
    recent_events,
)
from .jobs.job import Job, QueuedJob, aenqueue_many, enqueue_many
from .jobs.limits import Rate
from .jobs.periodic import PeriodicJob
from .jobs.registry import JobRegistry, registry
from .jobs.schedules import MonthSpan, months
from .jobs.serialization import register_type
from .jobs.task import Task, TaskNotFound, TaskState
from .jobs.upstream import Upstream
from .middleware.context import ContextMiddleware
from .middleware.encryption import EncryptedParams
from .middleware.hooks import Middleware, ParamsUnreadable
from .operations.dead import DeadTask, adead_tasks, aretry_dead, dead_tasks, retry_dead
from .operations.queue_control import (
    QueueControl,
    alimit,
    apause,
    aresume,
    limit,
    pause,
    resume,
)
from .runner import Runner
from .server.compatibility import VERSION as __version__  # (the release: CHANGELOG.md)
from .server.serving import NoRunnerWarning
from .workflows.run import NodeView, WorkflowError, WorkflowNotFound, WorkflowRun
from .workflows.shapes import Group, chain, group
from .workflows.workflow import Workflow

# The modules the docs spell culex.inspection.runners(), culex.bulk.apply(...), by their
# short names (each lives in the folder of its band: docs/architecture.md). Each is
# imported at its first use after a bare `import culex`, so that a producer that never
# uses them does not pay for importing them (the dashboard's and Django's need their
# extras only then).
_LAZY_MODULES = {
    "bulk": "culex.operations.bulk",
    "dashboard": "culex.dashboard",
    "django": "culex.django",
    "inspection": "culex.operations.inspection",
    "metrics": "culex.operations.metrics",
    "periodic": "culex.jobs.periodic",
    "queue_control": "culex.operations.queue_control",
    "stats": "culex.operations.stats",
    "testing": "culex.testing",
}

if TYPE_CHECKING:
    from . import dashboard as dashboard
    from . import django as django
    from . import testing as testing
    from .jobs import periodic as periodic
    from .operations import bulk as bulk
    from .operations import inspection as inspection
    from .operations import metrics as metrics
    from .operations import queue_control as queue_control
    from .operations import stats as stats
else:

    def __getattr__(name: str) -> object:
        if name in _LAZY_MODULES:
            import importlib

            return importlib.import_module(_LAZY_MODULES[name])
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ConfigurationError",
    "ContextMiddleware",
    "CulexError",
    "DeadTask",
    "EncryptedParams",
    "EnqueueManyError",
    "Event",
    "EventsOff",
    "EventsTrimmed",
    "Group",
    "Job",
    "JobFailure",
    "JobRegistry",
    "Middleware",
    "MonthSpan",
    "NoRunnerWarning",
    "NodeView",
    "ParamsUnreadable",
    "PeriodicJob",
    "QueueControl",
    "QueuedJob",
    "Rate",
    "RetryLater",
    "Runner",
    "ServerError",
    "ServerUnavailable",
    "Settings",
    "SignalTimeout",
    "StepError",
    "Task",
    "TaskFailed",
    "TaskNotFound",
    "TaskState",
    "Upstream",
    "Workflow",
    "WorkflowError",
    "WorkflowNotFound",
    "WorkflowRun",
    "__version__",
    "adead_tasks",
    "aenqueue_many",
    "aevents",
    "alimit",
    "apause",
    "arecent_events",
    "aresume",
    "aretry_dead",
    "chain",
    "configure",
    "dead_tasks",
    "enqueue_many",
    "events",
    "group",
    "limit",
    "months",
    "pause",
    "recent_events",
    "register_type",
    "registry",
    "resume",
    "retry_dead",
    "settings",
]
