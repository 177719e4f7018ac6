"""A workflow run stored whole, or not at all, then started.

The run's record is made first ("staging", with a deadline that each of the producer's
round trips pushes back), in its own slot; then its nodes, each blocked on its queue, and
their list in the record, in chunks (the list first: a node is listed before it exists,
so a discard finds every node that does); then the
commit ("running"), from which the run always ends; then the nodes without upstreams are
released. The run is noted as unfinished before the first step: a producer that stops
half-way leaves it to a runner (culex.workflows.release), which discards a staging run
whose deadline has passed (its nodes never ran) and releases the rest of a committed
run's first nodes. A committed run stays in the unfinished set until a runner finds it
ended: runners look at it about once a lease meanwhile (culex.workflows.finishing's heal).
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence
from typing import Any, Literal, NamedTuple

from .. import config
from .._redis import commands, workflows
from .._redis.calls import Call
from .._redis.keys import queue_keys, queues_key, run_keys
from .._redis.workflows import NodeSpec
from ..errors import ServerError
from ..jobs.job import QueuedJob
from ..jobs.task import Task, new_id
from ..middleware.hooks import enqueue_parts
from ..server.procedures import Procedure
from .finishing import start_roots
from .run import WorkflowRun

Policy = Literal["dead", "run"]
STAGE_MS = 60_000  # a staging run whose producer stays silent this long is discarded
CHUNK = 500  # nodes a call
CALLS_A_TRIP = 8  # calls sent together while storing


class Node(NamedTuple):
    """One node: its job, the task it becomes, its name, its upstreams and its policy."""

    job: QueuedJob
    task: Task
    name: str
    after: tuple[Task, ...]
    policy: Policy


def enqueue_run(name: str, ttl_ms: int, nodes: Sequence[Node]) -> Procedure[WorkflowRun]:
    """Store and start a run of ``nodes`` (checked already: culex.workflows.workflow)."""
    settings = config.settings()
    prefix = settings.prefix
    run = run_keys(prefix, new_id())
    calls = list(_storing(run.id, nodes, prefix))
    now = yield commands.server_time()
    yield workflows.hold_unfinished(prefix, run.id, now + STAGE_MS)
    queues = sorted({node.task.queue for node in nodes})
    yield [
        commands.register_queue(queues_key(prefix), *queues),
        workflows.begin(run, name, len(nodes), stage_ms=STAGE_MS, ttl_ms=ttl_ms),
    ]
    try:
        for start in range(0, len(calls), CALLS_A_TRIP):
            # (every trip holds an add, which pushes the deadline back: _storing; refused
            # once a runner discarded the run, when the producer stops there)
            for reply in (yield calls[start : start + CALLS_A_TRIP]):
                if isinstance(reply, Exception):
                    raise reply
        yield workflows.commit(run)
    except ServerError:
        yield [workflows.discard(run, now=True)]  # (its own error, if any, is not this one)
        raise
    roots = [(node.task.queue, node.task.id) for node in nodes if not node.after]
    yield from start_roots(prefix, roots, settings.failed_job_ttl_ms, settings.events)
    yield workflows.set_op(run, "")  # (it stays unfinished: runners look at it until it ends)
    return WorkflowRun(run.id, prefix=prefix)


def _storing(run_id: str, nodes: Sequence[Node], prefix: str) -> Iterator[Call[Any]]:
    """The calls that store the nodes (blocked, by queue) and their list in the record."""
    names = {node.task.id: node.name for node in nodes}
    down: dict[str, list[list[str]]] = {}
    for node in nodes:
        for up in node.after:
            down.setdefault(up.id, []).append([node.task.queue, node.task.id])
    settings = config.settings()
    specs = [(n.task.queue, _spec(n, names, down, settings)) for n in nodes]  # (in order)
    described: list[tuple[str, str]] = []
    for node in nodes:
        entry = [node.task.queue, node.name, [up.id for up in node.after], node.policy]
        described.append((node.task.id, json.dumps(entry, ensure_ascii=False)))
    run = run_keys(prefix, run_id)
    # Chunk by chunk, the record's list beside the nodes: each `add` pushes the staging
    # deadline back, so a long enqueue that is still going is never taken for a dead one.
    for start in range(0, len(described), CHUNK):
        yield workflows.add(run, described[start : start + CHUNK])
        by_queue: dict[str, list[NodeSpec]] = {}
        for queue, spec in specs[start : start + CHUNK]:
            by_queue.setdefault(queue, []).append(spec)
        for queue, mine in by_queue.items():
            yield workflows.store_nodes(queue_keys(prefix, queue), run_id, mine)


def _spec(
    node: Node, names: dict[str, str], down: dict[str, list[list[str]]], settings: config.Settings
) -> NodeSpec:
    """How workflow_enqueue.lua takes ``node``: its params and headers made as an enqueue
    makes them (the middleware's on_enqueue, its params sealed)."""
    job, task = node.job, node.task
    params, headers = job.params_json(), ""
    if settings.middleware:
        params, headers = enqueue_parts(settings, job, task.id, params)
    return NodeSpec(
        task.id, job.type_, params, job.max_retries, job.priority, "", node.name, node.policy,
        json.dumps([[up.queue, up.id, names[up.id]] for up in node.after], ensure_ascii=False),
        json.dumps(down.get(task.id, []), ensure_ascii=False), headers,
    )  # fmt: skip
