"""The common shapes of a workflow, built in one line.

>>> culex.chain(A(), B(), C()).enqueue()             # each after the one before
>>> culex.group(A(), B(), C()).then(D()).enqueue()   # a chord: D after all of them
"""

from __future__ import annotations

from ..jobs.job import QueuedJob
from .run import WorkflowError, WorkflowRun
from .workflow import Workflow


def chain(*jobs: QueuedJob, name: str | None = None) -> Workflow:
    """A workflow whose nodes run one after another, each once the one before succeeded."""
    if not jobs:
        raise WorkflowError("chain() takes at least one job")
    workflow = Workflow(name)
    before = None
    for job in jobs:
        before = workflow.add(job, after=[before] if before is not None else [])
    return workflow


class Group:
    """Jobs that run side by side: ``enqueue()`` them as a run, or ``then(job)`` to add a
    node that runs after all of them (a chord)."""

    def __init__(self, jobs: tuple[QueuedJob, ...], name: str | None) -> None:
        if not jobs:
            raise WorkflowError("group() takes at least one job")
        self.workflow = Workflow(name)
        self.members = [self.workflow.add(job) for job in jobs]

    def then(self, job: QueuedJob) -> Workflow:
        """The workflow with ``job`` after every job of the group."""
        self.workflow.add(job, after=self.members)
        return self.workflow

    def enqueue(self) -> WorkflowRun:
        return self.workflow.enqueue()

    async def aenqueue(self) -> WorkflowRun:
        return await self.workflow.aenqueue()


def group(*jobs: QueuedJob, name: str | None = None) -> Group:
    """Jobs that run side by side (see :class:`Group`)."""
    return Group(jobs, name)
