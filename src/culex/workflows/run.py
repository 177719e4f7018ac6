"""A workflow run, once enqueued: its state, its end, its tasks; cancel and retry it.

``WorkflowRun(run_id)`` finds a run by its id (``culex workflow RUN_ID`` shows one).
"""

from __future__ import annotations

import time
from typing import Any, NamedTuple

from .. import config
from .._redis import commands, workflows
from .._redis.keys import RunKeys, queue_keys, run_keys
from ..errors import CulexError
from ..jobs.registry import registry
from ..jobs.task import Task, check_id
from ..server import serving
from ..server.procedures import Procedure, run_async, run_sync
from .finishing import OPERATION_MS, NodeInfo, call_off, read_nodes, rearm_nodes, sent

STATES = ("running", "succeeded", "failed", "cancelled")
ENDED = frozenset(("succeeded", "failed", "cancelled"))


class WorkflowError(CulexError, ValueError):
    """A workflow (or a run) that cannot take what was asked: nothing was stored."""


class WorkflowNotFound(CulexError, LookupError):
    """No record of the run: it never existed, or it ended and its record expired."""


class NodeView(NamedTuple):
    """One node of a run as it is now: its task's hash fields ({} once expired)."""

    name: str
    task: Task
    after: tuple[str, ...]  # upstream names
    policy: str
    fields: dict[str, str]


class WorkflowRun:
    """A run of a workflow. Each method asks the server; ``a*`` twins are async."""

    __slots__ = ("id", "prefix", "url")

    def __init__(self, run_id: str, *, prefix: str | None = None, url: str | None = None) -> None:
        self.id = check_id(run_id)
        self.prefix = prefix
        self.url = url

    def __repr__(self) -> str:
        return f"<WorkflowRun {self.id}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, WorkflowRun) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def _prefix(self) -> str:
        return self.prefix if self.prefix is not None else config.settings().prefix

    def _keys(self) -> RunKeys:
        return run_keys(self._prefix(), self.id)

    def _record(self) -> Procedure[dict[str, str]]:
        record: dict[str, str] = yield workflows.read_record(self._keys())
        if not record or record.get("state") == "discarded":
            raise WorkflowNotFound(
                f"workflow run {self.id} not found: it never existed, its enqueue was "
                "discarded, or it ended and its record expired"
            )
        return record

    def _state(self) -> Procedure[str]:
        record = yield from self._record()
        state = record["state"]
        return "running" if state == "staging" else state

    def state(self) -> str:
        """ "running", "succeeded", "failed" or "cancelled"."""
        return run_sync(self._state(), self.url)

    async def astate(self) -> str:
        return await run_async(self._state(), self.url)

    def info(self) -> dict[str, str]:
        """The run's record: name, state, nodes, created_at, started_at, ended_at (ms)..."""
        return run_sync(self._record(), self.url)

    async def ainfo(self) -> dict[str, str]:
        return await run_async(self._record(), self.url)

    def _wait(self, timeout: float) -> Procedure[str]:
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
            raise ValueError(f"wait: timeout is a number of seconds > 0, got {timeout!r:.40}")
        started = time.monotonic()
        deadline = started + timeout
        looked = False
        while True:
            state = yield from self._state()
            now = time.monotonic()
            left = deadline - now
            if state in ENDED:
                return state
            if left <= 0:
                said = f"workflow run {self.id} is still {state} after {timeout} s"
                lines = yield from self._unserved()
                raise TimeoutError("; ".join([said, *lines]))
            if not looked and now - started >= serving.WARN_AFTER:
                looked = True
                serving.warn((yield from self._unserved()), f"workflow run {self.id}")
            yield workflows.wait_ended(self._keys(), min(left, serving.WARN_AFTER))

    def _unserved(self) -> Procedure[list[str]]:
        """Why the run may wait for ever: the queues of its nodes not ended that no runner
        serves (culex.server.serving), read once when asked."""
        return (yield from serving.unserved(self._prefix(), (yield from self._queues_left())))

    def _queues_left(self) -> Procedure[list[str]]:
        """The queues of the run's nodes that have not ended."""
        nodes = yield from read_nodes(self._prefix(), self.id)
        ended = yield workflows.read_ended(self._keys())
        return sorted({n.queue for n in nodes.values() if n.task_id not in ended})

    def wait(self, timeout: float = 60) -> str:
        """The run's final state, once it has ended; TimeoutError if not within ``timeout`` s."""
        return run_sync(self._wait(timeout), self.url)

    async def await_(self, timeout: float = 60) -> str:
        """The async twin of :meth:`wait` (``await`` is Python's own word)."""
        return await run_async(self._wait(timeout), self.url)

    def _nodes(self) -> Procedure[list[NodeView]]:
        yield from self._record()
        prefix = self._prefix()
        nodes = yield from read_nodes(prefix, self.id)
        calls = [commands.read_task(queue_keys(prefix, n.queue), n.task_id) for n in nodes.values()]
        hashes = yield from sent(calls)
        views = zip(nodes.values(), hashes, strict=True)
        return [_view(n, nodes, fields, prefix) for n, fields in views]

    def nodes(self) -> list[NodeView]:
        """Every node, with its task's state and times (its hash's fields)."""
        return run_sync(self._nodes(), self.url)

    async def anodes(self) -> list[NodeView]:
        return await run_async(self._nodes(), self.url)

    def tasks(self) -> dict[str, Task]:
        """Node name -> its :class:`~culex.Task`."""
        return {view.name: view.task for view in self.nodes()}

    async def atasks(self) -> dict[str, Task]:
        return {view.name: view.task for view in await self.anodes()}

    def _cancel(self) -> Procedure[str]:
        yield from self._record()
        return (
            yield from call_off(self._prefix(), self.id, workflows.mark_cancelled(self._keys()))
        )

    def cancel(self) -> bool:
        """Cancel the run: nodes not started end dead ("cancelled"), running ones are
        asked to stop; the run ends "cancelled". False when it had ended already."""
        return run_sync(self._cancel(), self.url) == "running"

    async def acancel(self) -> bool:
        return await run_async(self._cancel(), self.url) == "running"

    def _retry(self) -> Procedure[int]:
        record = yield from self._record()
        if record["state"] not in ("failed", "cancelled"):
            raise WorkflowError(
                f"workflow run {self.id} is {record['state']}: a run is retried once it "
                "has ended failed or cancelled"
            )
        prefix, run = self._prefix(), self._keys()
        nodes = yield from read_nodes(prefix, self.id)
        ended = yield workflows.read_ended(run)
        again = [task_id for task_id, state in ended.items() if state != "succeeded"]
        now = yield commands.server_time()
        yield workflows.hold_unfinished(prefix, self.id, now + OPERATION_MS)
        number = yield workflows.retry(run, again)
        # (noted again: a runner that recorded the run's end just before may strike it off
        # the set after the first note; the record now says op "retry" for the next look)
        yield workflows.hold_unfinished(prefix, self.id, now + OPERATION_MS)
        for task_id in again:
            del ended[task_id]
        yield from rearm_nodes(prefix, self.id, number, nodes, ended)
        yield workflows.set_op(run, "")  # (unfinished until it ends again: finishing.heal)
        return len(again)

    def retry(self) -> int:
        """Run the dead nodes again, and the nodes that ended because of them (each waits
        for its retried upstreams again); the value: how many nodes were retried."""
        return run_sync(self._retry(), self.url)

    async def aretry(self) -> int:
        return await run_async(self._retry(), self.url)


def _view(node: NodeInfo, nodes: dict[str, NodeInfo], fields: Any, prefix: str) -> NodeView:
    task = Task(node.task_id, node.queue, job=registry.get(fields.get("type", "")), prefix=prefix)
    after = tuple(nodes[u].name if u in nodes else u for u in node.after)
    return NodeView(node.name, task, after, node.policy, fields)
