"""The steps of a workflow operation that spans slots (an enqueue's start, a cancel, a
retry), shared by the producer that makes them and the runner that finishes one its
producer left half-done (culex.workflows.release). Each step is idempotent: made twice, or
by two callers at once, it changes what it changes once.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from .. import config
from .._redis import commands, interventions, workflows
from .._redis.calls import Call
from .._redis.keys import queue_keys, run_keys
from ..server.procedures import Procedure

logger = logging.getLogger("culex")

CALLS_A_TRIP = 500
SCAN_COUNT = 1000
RELEASE_BATCH = 500  # nodes of one queue a release call
BATCHES_A_TRIP = 8  # calls a round trip, for calls that carry RELEASE_BATCH nodes each
CANCELLED = "its workflow run was cancelled"  # (cancel.lua writes "cancelled: " before it)
OPERATION_MS = 30_000  # a cancel or retry its caller has not finished by then, a runner does


class NodeInfo(NamedTuple):
    """A node as its run's record lists it."""

    task_id: str
    queue: str
    name: str
    after: tuple[str, ...]  # its upstreams' task ids
    policy: str


def read_nodes(prefix: str, run_id: str) -> Procedure[dict[str, NodeInfo]]:
    """Every node of the run, by task id ({} for a run that has no record)."""
    run = run_keys(prefix, run_id)
    nodes: dict[str, NodeInfo] = {}
    cursor = 0
    while True:
        cursor, page = yield workflows.read_nodes(run, cursor, SCAN_COUNT)
        for task_id, text in page.items():
            queue, name, after, policy = json.loads(text)
            nodes[task_id] = NodeInfo(task_id, queue, name, tuple(after), policy)
        if cursor == 0:
            return nodes


def depths(after: Mapping[str, Sequence[str]]) -> dict[str, int]:
    """Each node's depth (nodes keyed as ``after`` keys them: by task id, or by name): 0
    without upstreams, else one more than its deepest upstream's. An upstream ``after``
    does not list counts as depth 0; a cycle (a record written by hand) is cut."""
    found: dict[str, int] = {}
    for key in after:
        if key in found:
            continue
        stack, open_ = [key], {key}  # (open_: on the stack; a cycle is cut there)
        while stack:
            current = stack[-1]
            ups = [u for u in after[current] if u in after and u not in open_]
            missing = [u for u in dict.fromkeys(ups) if u not in found]
            if missing:
                stack += missing
                open_.update(missing)
                continue
            stack.pop()
            open_.discard(current)
            found[current] = 1 + max(found[u] for u in ups) if ups else 0
    return found


def _levels(nodes: dict[str, NodeInfo]) -> dict[str, int]:
    return depths({task_id: node.after for task_id, node in nodes.items()})


def sent(calls: Sequence[Call[Any]], per_trip: int = CALLS_A_TRIP) -> Procedure[list[Any]]:
    """``calls`` in round trips of ``per_trip``; the replies (a refused call's: its error).
    Calls that each carry a batch go BATCHES_A_TRIP a trip: a trip of 500 batches of 500
    nodes kept the server busy for seconds, past a client's socket timeout."""
    replies: list[Any] = []
    for start in range(0, len(calls), per_trip):
        replies += yield list(calls[start : start + per_trip])
    return replies


def start_roots(
    prefix: str, roots: Iterable[tuple[str, str]], dead_ttl_ms: int, events: bool = False
) -> Procedure[list[Any]]:
    """Release the nodes without upstreams (queue, task id): the run's start; those of one
    queue by calls of RELEASE_BATCH (``events``: each one's enqueued event)."""
    by_queue: dict[str, list[str]] = {}
    for queue, task_id in roots:
        by_queue.setdefault(queue, []).append(task_id)
    calls = [
        workflows.resolve(
            queue_keys(prefix, queue),
            ids[i : i + RELEASE_BATCH],
            upstream="",
            name="",
            state="succeeded",
            job_type="",
            result="",
            error="",
            dead_ttl_ms=dead_ttl_ms,
            events=events,
        )
        for queue, ids in by_queue.items()
        for i in range(0, len(ids), RELEASE_BATCH)
    ]
    return (yield from sent(calls, BATCHES_A_TRIP))


def cancel_nodes(prefix: str, nodes: dict[str, NodeInfo]) -> Procedure[list[Any]]:
    """Cancel every node, the deepest first (so a node's end never releases a downstream
    not cancelled yet): blocked, waiting and scheduled ones end dead, running ones are
    asked to stop."""
    settings = config.settings()
    level = _levels(nodes)
    calls = [
        interventions.cancel(
            queue_keys(prefix, node.queue),
            node.task_id,
            CANCELLED,
            dead_ttl_ms=settings.failed_job_ttl_ms,
            dead_max=settings.dead_max,
            events=settings.events,
        )
        for node in sorted(nodes.values(), key=lambda n: -level[n.task_id])
    ]
    return (yield from sent(calls))


def call_off(prefix: str, run_id: str, mark: Call[str]) -> Procedure[str]:
    """Call a run off: noted as unfinished, marked (``mark``: its record's cancel, or
    broken), then, when it was running, every node cancelled, and the ends no entry
    was written for written (:func:`heal`); the value: the state ``mark`` replied (the
    run's before the change). The run stays in the unfinished set, due OPERATION_MS
    later: a runner looks at it then, and strikes it off once it has ended."""
    run = run_keys(prefix, run_id)
    now = yield commands.server_time()
    yield workflows.hold_unfinished(prefix, run_id, now + OPERATION_MS)
    state: str = yield mark
    if state == "running":
        nodes = yield from read_nodes(prefix, run_id)
        yield from cancel_nodes(prefix, nodes)
        yield from heal(prefix, run_id, (yield workflows.read_record(run)), nodes)
    yield workflows.set_op(run, "")
    return state


def heal(
    prefix: str, run_id: str, record: Mapping[str, str], nodes: dict[str, NodeInfo] | None = None
) -> Procedure[list[str]]:
    """Write the outbox entry of each node of a running run whose hash says it ended but
    whose end the run never recorded and no entry carries (workflow_heal.lua): a node a
    runner of an older culex ended (completed, failed, or reclaimed) writes none, and its
    downstreams and its run would wait for ever. Logged; the value: the ids healed. A
    blocked node that waits for an id that is no node of the run (an `up` written by hand)
    can never start: its run is called off, to end "failed" naming the node and why."""
    if record.get("state") != "running":
        return []
    if nodes is None:
        nodes = yield from read_nodes(prefix, run_id)
    ended = yield workflows.read_ended(run_keys(prefix, run_id))
    by_queue: dict[str, list[str]] = {}
    for node in nodes.values():
        if node.task_id not in ended:
            by_queue.setdefault(node.queue, []).append(node.task_id)
    retries = record.get("retries", "")
    calls = [
        workflows.heal(queue_keys(prefix, queue), run_id, retries, ids[i : i + RELEASE_BATCH])
        for queue, ids in by_queue.items()
        for i in range(0, len(ids), RELEASE_BATCH)
    ]
    replies = yield from sent(calls, BATCHES_A_TRIP)
    seen: list[workflows.Healed] = [r for r in replies if not isinstance(r, Exception)]
    healed = [task_id for reply in seen for task_id in reply.written]
    for task_id in healed:
        logger.warning(
            "workflow run %s: node %s (%s) had ended without its end written (a runner of "
            "an older culex, without workflows, ended it; culex runners lists the "
            "versions): written now, its downstreams and its run go on",
            *(run_id, nodes[task_id].name, task_id),
        )
    strangers = [
        (task_id, waited)
        for reply in seen
        for task_id, waits in reply.waits.items()
        for waited in waits
        if waited not in nodes
    ]
    if strangers and not record.get("cancelled"):  # (called off already: it ends)
        task_id, waited = strangers[0]
        why = f"node {nodes[task_id].name} ({task_id}): it waits for {waited}, no node of its run"
        logger.error("workflow run %s cannot go on: %s; it is called off", run_id, why)
        yield from call_off(prefix, run_id, workflows.broken(run_keys(prefix, run_id), why))
    return healed


def rearm_nodes(
    prefix: str, run_id: str, retry_number: int, nodes: dict[str, NodeInfo], ended: dict[str, str]
) -> Procedure[list[Any]]:
    """Rearm the nodes that do not count as ended (the retried ones), the deepest first:
    each waits for its upstreams that have not succeeded, which are rearmed after it, so
    none of their new ends comes before it waits for them."""
    level = _levels(nodes)
    retried = [node for node in nodes.values() if node.task_id not in ended]
    calls = [
        workflows.rearm(
            queue_keys(prefix, node.queue),
            node.task_id,
            run_id,
            retry_number,
            [u for u in node.after if ended.get(u) != "succeeded"],
        )
        for node in sorted(retried, key=lambda n: -level[n.task_id])
    ]
    return (yield from sent(calls))


def discard_nodes(prefix: str, run_id: str, nodes: dict[str, NodeInfo]) -> Procedure[list[Any]]:
    """Delete the nodes of a discarded run (only blocked ones of that run go)."""
    by_queue: dict[str, list[str]] = {}
    for node in nodes.values():
        by_queue.setdefault(node.queue, []).append(node.task_id)
    calls = [
        workflows.discard_nodes(queue_keys(prefix, queue), run_id, ids[i : i + RELEASE_BATCH])
        for queue, ids in by_queue.items()
        for i in range(0, len(ids), RELEASE_BATCH)
    ]
    return (yield from sent(calls, BATCHES_A_TRIP))


def finish(prefix: str, run_id: str) -> Procedure[str]:
    """Look at a run of the unfinished set: finish the operation a producer left under way
    on it, or, for a running run, write the ends no entry was written for (:func:`heal`);
    a run that has ended (or has no record) leaves the set, any other stays in it, due
    again when its taker's lease runs out. The value: what was done ("discarded",
    "started", "cancelled", "retried", "waiting": a staging run before its deadline,
    "healed" (ends were written), or "none")."""
    settings = config.settings()
    run = run_keys(prefix, run_id)
    record = yield workflows.read_record(run)
    state, op = record.get("state", ""), record.get("op", "")
    done = "none"
    if state == "staging":
        state = yield workflows.discard(run)
        if state == "staging":  # (its producer is still at it: look again at its deadline)
            yield workflows.hold_unfinished(prefix, run_id, int(record.get("deadline", 0)))
            return "waiting"
    if state == "discarded":
        yield from discard_nodes(prefix, run_id, (yield from read_nodes(prefix, run_id)))
        done = "discarded"
    elif op == "enqueue":
        nodes = yield from read_nodes(prefix, run_id)
        roots = [(n.queue, n.task_id) for n in nodes.values() if not n.after]
        yield from start_roots(prefix, roots, settings.failed_job_ttl_ms, settings.events)
        done = "started"
    elif op == "cancel":
        yield from cancel_nodes(prefix, (yield from read_nodes(prefix, run_id)))
        done = "cancelled"
    elif op == "retry":
        nodes = yield from read_nodes(prefix, run_id)
        ended = yield workflows.read_ended(run)
        retries = int(record.get("retries", "0"))
        yield from rearm_nodes(prefix, run_id, retries, nodes, ended)
        done = "retried"
    elif (yield from heal(prefix, run_id, record)):
        done = "healed"
    calls: list[Call[Any]] = [workflows.set_op(run, "")] if op else []
    if state not in ("running", "staging"):  # (ended, discarded, or no record)
        calls.append(workflows.finished(prefix, run_id))
    if calls:
        yield calls
    return done
