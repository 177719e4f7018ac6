"""A workflow run as ``culex workflow RUN_ID`` and the dashboard's run page show it: its
record, its nodes ordered by depth (the nodes without upstreams first), how many nodes are
in each state; and its cancel and retry, on the server the settings name.

Each is a blocking function with its ``a*`` async twin, through :class:`culex.WorkflowRun`
(two reads: the run's record, then its nodes and their tasks' hashes). A run without a
record raises :class:`culex.WorkflowNotFound`; there is no list of runs (nothing in Redis
grows with the runs ever made), so a run is found by its id alone."""

from __future__ import annotations

import contextlib
from collections.abc import Sequence
from typing import NamedTuple

from .. import config
from ..workflows.finishing import depths
from ..workflows.run import NodeView, WorkflowRun

# A node's task hash that has expired (a succeeded node's, after result_ttl) says no state.
EXPIRED = "expired"
# The node states in the order the counts are shown (a node's task states, and EXPIRED).
NODE_STATES = ("blocked", "waiting", "scheduled", "pending", "succeeded", "dead", EXPIRED)
# The nodes shown at once (culex workflow, the run page): a run of more is shown a page at
# a time, after its counts by state, so that a run of 100,000 nodes is no wall of rows.
PAGE = 2000
AFTER_SHOWN = 3  # a node's upstream names shown; the others counted ("+N more")


class NodeRow(NamedTuple):
    """One node as shown: its times in ms since the epoch (None: none yet)."""

    name: str
    state: str
    queue: str
    task_id: str
    job: str
    attempts: int
    started_at: int | None
    ended_at: int | None
    after: tuple[str, ...]  # its upstreams' names
    before: tuple[str, ...]  # its downstreams' names
    depth: int  # 0 without upstreams, else one more than its deepest upstream
    policy: str  # "dead" or "run": what an upstream that ends dead does to it
    error: str = ""  # a dead node's last_error: why it died ("" for any other)


class RunOverview(NamedTuple):
    """A run as shown: its record's name, state and times (ms since the epoch), whether it
    is cancelling (cancelled while nodes still run), and its nodes by depth."""

    id: str
    name: str
    state: str  # "running", "succeeded", "failed" or "cancelled"
    created_at: int | None
    started_at: int | None
    ended_at: int | None
    cancelling: bool
    retries: int
    nodes: list[NodeRow]  # by depth, then in the order they were added

    @property
    def counts(self) -> dict[str, int]:
        """How many nodes are in each state (the states no node is in left out)."""
        found = {state: 0 for state in NODE_STATES}
        for node in self.nodes:
            found[node.state] = found.get(node.state, 0) + 1
        return {state: count for state, count in found.items() if count}

    @property
    def levels(self) -> list[list[NodeRow]]:
        """The nodes a list per depth: the nodes without upstreams first."""
        return levels(self.nodes)

    def page(self, offset: int = 0, limit: int = PAGE, state: str = "") -> list[NodeRow]:
        """The nodes from the ``offset``-th on, ``limit`` of them at most, in their order
        (by depth); only those in ``state`` when one is given ("": all)."""
        nodes = [node for node in self.nodes if node.state == state] if state else self.nodes
        return nodes[offset : offset + limit]

    @property
    def retriable(self) -> bool:
        """Whether :func:`retry_run` takes it: it ended failed or cancelled."""
        return self.state in ("failed", "cancelled")


def levels(nodes: Sequence[NodeRow]) -> list[list[NodeRow]]:
    """``nodes`` (in order of depth) a list per depth, the shallowest first; depths none of
    them is at are left out."""
    found: list[list[NodeRow]] = []
    for node in nodes:
        if not found or found[-1][0].depth != node.depth:
            found.append([])
        found[-1].append(node)
    return found


def after_shown(after: Sequence[str], most: int = AFTER_SHOWN) -> str:
    """A node's upstream names as a table shows them: the first ``most``, then how many
    more ("-": none). A node after 100,000 others is one short cell, not a row that
    widens every other."""
    if not after:
        return "-"
    shown = ", ".join(after[:most])
    return shown if len(after) <= most else f"{shown} +{len(after) - most} more"


def run_overview(run_id: str, settings: config.Settings | None = None) -> RunOverview:
    """The run ``run_id`` as shown (WorkflowNotFound: no record)."""
    run = _run(run_id, settings)
    return overview(run.id, run.info(), run.nodes())


async def arun_overview(run_id: str, settings: config.Settings | None = None) -> RunOverview:
    """The async twin of :func:`run_overview`."""
    run = _run(run_id, settings)
    return overview(run.id, await run.ainfo(), await run.anodes())


def cancel_run(run_id: str, settings: config.Settings | None = None) -> bool:
    """Cancel the run (:meth:`culex.WorkflowRun.cancel`): False when it had ended."""
    return _run(run_id, settings).cancel()


async def acancel_run(run_id: str, settings: config.Settings | None = None) -> bool:
    """The async twin of :func:`cancel_run`."""
    return await _run(run_id, settings).acancel()


def retry_run(run_id: str, settings: config.Settings | None = None) -> int:
    """Retry the run (:meth:`culex.WorkflowRun.retry`): how many nodes run again."""
    return _run(run_id, settings).retry()


async def aretry_run(run_id: str, settings: config.Settings | None = None) -> int:
    """The async twin of :func:`retry_run`."""
    return await _run(run_id, settings).aretry()


def _run(run_id: str, settings: config.Settings | None) -> WorkflowRun:
    settings = settings or config.settings()
    return WorkflowRun(run_id, prefix=settings.prefix, url=settings.redis_url)


def overview(run_id: str, record: dict[str, str], views: Sequence[NodeView]) -> RunOverview:
    """A run as shown, from its record and its nodes as :class:`culex.WorkflowRun` reads them."""
    level = depths({view.name: view.after for view in views})
    below: dict[str, list[str]] = {view.name: [] for view in views}
    for view in views:
        for name in view.after:
            below.setdefault(name, []).append(view.name)
    rows = [_row(view, level[view.name], tuple(below[view.name])) for view in views]
    rows.sort(key=lambda row: (row.depth, row.task_id))
    state = record.get("state", "")
    return RunOverview(
        id=run_id,
        name=record.get("name", ""),
        state="running" if state == "staging" else state,
        created_at=_ms(record.get("created_at")),
        started_at=_ms(record.get("started_at")),
        ended_at=_ms(record.get("ended_at")),
        cancelling=bool(record.get("cancelled")) and state == "running",
        retries=_ms(record.get("retries")) or 0,
        nodes=rows,
    )


def _row(view: NodeView, depth: int, below: tuple[str, ...]) -> NodeRow:
    fields = view.fields
    state = fields.get("state") or EXPIRED
    ended = state in ("succeeded", "dead")
    return NodeRow(
        name=view.name,
        state=state,
        queue=view.task.queue,
        task_id=view.task.id,
        job=fields.get("type", ""),
        attempts=_ms(fields.get("attempt")) or 0,
        started_at=_ms(fields.get("started_at")),
        ended_at=_ms(fields.get("finished_at") or fields.get("failed_at")) if ended else None,
        after=view.after,
        before=below,
        depth=depth,
        policy=view.policy,
        error=fields.get("last_error", "") if state == "dead" else "",
    )


def _ms(text: str | None) -> int | None:
    """A whole number a record holds (None: none, 0, or not a whole number)."""
    with contextlib.suppress(TypeError, ValueError):
        value = int(text or "")
        return value or None
    return None
