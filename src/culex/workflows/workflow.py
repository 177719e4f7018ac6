"""A workflow: tasks with dependencies, enqueued as one run that always ends.

>>> wf = Workflow(name="nightly-report")
>>> a = wf.add(FetchJob(day=1), name="fetch1")
>>> m = wf.add(MergeJob(), after=[a], name="merge")
>>> run = wf.enqueue()

Every check is made as a node is added, before anything is stored: a node's ``after=``
names only tasks added to the same workflow before it, so a graph is acyclic by
construction. ``chain`` and ``group`` build the common shapes.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import timedelta

from .. import config
from ..errors import short
from ..jobs.durability import confirmed
from ..jobs.enqueue import checked_params
from ..jobs.job import QueuedJob
from ..jobs.task import Task, new_id
from ..server.procedures import Procedure, run_async, run_sync
from .enqueueing import Node, Policy, enqueue_run
from .run import WorkflowError, WorkflowRun

POLICIES = ("dead", "run")
MAX_NAME = 200
MAX_NODES = 1_000_000
DEFAULT_TTL = timedelta(days=1)


class Workflow:
    """Nodes and edges, then ``enqueue()`` (``await aenqueue()``) -> :class:`WorkflowRun`.

    ``name``: shown with the run (optional); ``ttl``: how long a run's record is kept once
    it has ended (a day by default; its tasks keep their own TTLs)."""

    def __init__(self, name: str | None = None, *, ttl: timedelta | float = DEFAULT_TTL) -> None:
        if name is not None and (
            not isinstance(name, str) or not 0 < len(name) <= MAX_NAME or not name.isprintable()
        ):
            raise WorkflowError(
                f"a workflow's name is printable text of 1 to {MAX_NAME} characters, "
                f"got {short(name)}"
            )
        seconds = ttl.total_seconds() if isinstance(ttl, timedelta) else ttl
        if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not seconds >= 1:
            raise WorkflowError(f"a workflow's ttl is at least a second, got {short(ttl)}")
        self.name = name or ""
        self.ttl_ms = int(seconds * 1000)
        self.nodes: dict[str, Node] = {}  # by task id, in the order added
        self._names: set[str] = set()
        self.run: WorkflowRun | None = None

    def __repr__(self) -> str:
        return f"<Workflow {self.name or '(no name)'}: {len(self.nodes)} nodes>"

    def add(
        self,
        job: QueuedJob,
        *,
        name: str | None = None,
        after: Iterable[Task] = (),
        if_upstream_fails: Policy = "dead",
    ) -> Task:
        """Add ``job`` as a node that runs once every task of ``after`` has ended; the
        value is the :class:`~culex.Task` the node becomes. ``name`` defaults to its task
        id. ``if_upstream_fails``: "dead" (an upstream that ends dead ends this node dead
        without running it) or "run" (it runs anyway; ``self.upstream()`` says which
        failed)."""
        if self.run is not None:
            raise WorkflowError(f"{self!r} was enqueued already: add nodes before enqueue()")
        if not isinstance(job, QueuedJob):
            raise TypeError(f"a workflow's node is a QueuedJob instance, got {short(job)}")
        if if_upstream_fails not in POLICIES:
            raise WorkflowError(
                f'if_upstream_fails is "dead" or "run", got {short(if_upstream_fails)}'
            )
        if isinstance(after, Task | str) or not isinstance(after, Iterable):
            raise TypeError(f"after= takes a list of tasks of this workflow, got {short(after)}")
        upstreams = tuple(dict.fromkeys(after))
        for task in upstreams:
            if not isinstance(task, Task) or self.nodes.get(task.id, None) is None:
                raise WorkflowError(
                    f"after= names {short(task)}, which is not a node of this workflow "
                    "(a node runs after nodes added to the same workflow before it)"
                )
        if len(self.nodes) >= MAX_NODES:
            raise WorkflowError(f"a workflow holds at most {MAX_NODES:,} nodes")
        checked_params(job, config.settings())  # (before anything is stored)
        task_id = new_id()
        name = task_id if name is None else name
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME or not name.isprintable():
            raise WorkflowError(
                f"a node's name is printable text of 1 to {MAX_NAME} characters, got {short(name)}"
            )
        if name in self._names:
            raise WorkflowError(f"the node name {name!r} is used twice in this workflow")
        task = Task(task_id, job.queue, job=type(job))
        self.nodes[task_id] = Node(job, task, name, upstreams, if_upstream_fails)
        self._names.add(name)
        return task

    def enqueue(self) -> WorkflowRun:
        """Store the whole run and start the nodes without upstreams: they all run, or (a
        producer stopped half-way) none does."""
        return run_sync(self._procedure())

    async def aenqueue(self) -> WorkflowRun:
        """The async twin of :meth:`enqueue`."""
        return await run_async(self._procedure())

    def _procedure(self) -> Procedure[WorkflowRun]:
        if self.run is not None:
            raise WorkflowError(f"{self!r} was enqueued already: a workflow runs once")
        if not self.nodes:
            raise WorkflowError("a workflow needs at least one node: add() one")
        return self._enqueued()

    def _enqueued(self) -> Procedure[WorkflowRun]:
        # (with durable_enqueue, each round trip is confirmed as an enqueue is)
        run = yield from confirmed(enqueue_run(self.name, self.ttl_ms, list(self.nodes.values())))
        self.run = run
        return run
