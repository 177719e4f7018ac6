"""The calls of workflows: a run's nodes stored blocked, its record's changes, the release
of a node by its upstreams' ends, and the outbox those ends wait in. Each builds a
:class:`~culex._redis.calls.Call`; no I/O here (the procedures are culex.workflows').

Every call touches one slot: a queue's (a node, an outbox) or a run's (its record).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, NamedTuple

from . import scripts
from .calls import Arg, Call, text
from .commands import block_on, parse_hash
from .keys import QueueKeys, RunKeys, unfinished_key


class NodeSpec(NamedTuple):
    """One node as workflow_enqueue.lua stores it (see its header)."""

    task_id: str
    job_type: str
    params_json: str
    max_retries: int
    priority: int
    trace: str
    name: str
    policy: str
    up: str  # JSON: [[queue, id, name], ...]
    down: str  # JSON: [[queue, id], ...]
    headers: str = ""  # JSON (the middleware's), "" for none


def store_nodes(keys: QueueKeys, run_id: str, nodes: Sequence[NodeSpec]) -> Call[int]:
    """Store ``nodes`` (all of ``keys``'s queue) blocked; the reply: how many were new.
    Nodes with headers are sent "with headers", 11 values a node; else 10 (as before)."""
    args: list[Arg] = [keys.name, run_id]
    if any(node.headers for node in nodes):
        args.append("with headers")
        for node in nodes:
            args += node
    else:
        for node in nodes:
            args += node[:-1]
    return Call((keys.task_prefix,), tuple(args), int, scripts.WORKFLOW_ENQUEUE)


def _record(run: RunKeys, *args: Arg) -> Call[str]:
    return Call((run.record, run.nodes, run.ended, run.done), args, text, scripts.WORKFLOW_RECORD)


def begin(run: RunKeys, name: str, nodes: int, *, stage_ms: int, ttl_ms: int) -> Call[str]:
    """Make the run's record, "staging" until :func:`commit`."""
    return _record(run, "begin", run.id, name, nodes, stage_ms, ttl_ms)


def add(run: RunKeys, nodes: Sequence[tuple[str, str]]) -> Call[str]:
    """Record nodes of a staging run: (task id, JSON [queue, name, [upstream ids], policy])."""
    args: list[Arg] = ["add"]
    for task_id, described in nodes:
        args += (task_id, described)
    return _record(run, *args)


def commit(run: RunKeys) -> Call[str]:
    """Every node is stored: the run is "running" (the reply: its state)."""
    return _record(run, "commit")


def discard(run: RunKeys, *, now: bool = False) -> Call[str]:
    """A staging run past its deadline (``now``: at once) is "discarded"."""
    return _record(run, "discard", "now" if now else "")


def ended(run: RunKeys, ends: Sequence[tuple[str, str]]) -> Call[str]:
    """Nodes ended: (task id, "succeeded" or "dead") each; the reply: the run's state after."""
    args: list[Arg] = ["ended"]
    for task_id, state in ends:
        args += (task_id, state)
    return _record(run, *args)


def mark_cancelled(run: RunKeys) -> Call[str]:
    """Mark the run cancelled; the reply: its state."""
    return _record(run, "cancel")


def broken(run: RunKeys, why: str) -> Call[str]:
    """The run cannot go on (``why``: the node and why): it is called off, to end
    "failed" with ``why`` as its record's ``error``; the reply: its state."""
    return _record(run, "broken", why)


def retry(run: RunKeys, task_ids: Sequence[str]) -> Call[int]:
    """An ended run runs again; ``task_ids`` no longer count as ended. The reply: the
    retry's number, which fences :func:`rearm`."""
    return Call(
        (run.record, run.nodes, run.ended, run.done),
        ("retry", *task_ids),
        lambda reply: int(reply[1]),
        scripts.WORKFLOW_RECORD,
    )


def set_op(run: RunKeys, op: str) -> Call[str]:
    """The operation under way that spans slots ("enqueue", "cancel", "retry"), "" once done."""
    return _record(run, "op", op)


def read_record(run: RunKeys) -> Call[dict[str, str]]:
    """The run's record ({} when there is none)."""
    return Call((), ("HGETALL", run.record), parse_hash)


def read_nodes(run: RunKeys, cursor: int, count: int) -> Call[tuple[int, dict[str, str]]]:
    """A page of the run's nodes (HSCAN: task id -> JSON) and the next cursor (0: done)."""
    return Call((), ("HSCAN", run.nodes, cursor, "COUNT", count), _scan_page)


def read_ended(run: RunKeys) -> Call[dict[str, str]]:
    """The nodes that ended, task id -> state."""
    return Call((), ("HGETALL", run.ended), parse_hash)


def wait_ended(run: RunKeys, timeout: float) -> Call[Any]:
    """Block until the run ends (its done list gets its element), or ``timeout`` (s)."""
    return block_on(run.done, timeout)


def resolve(
    keys: QueueKeys,
    task_ids: Sequence[str],
    *,
    upstream: str,
    name: str,
    state: str,
    job_type: str,
    result: str,
    error: str,
    dead_ttl_ms: int,
    events: bool = False,
) -> Call[list[str]]:
    """Apply an upstream's end (``upstream`` "" for the run's start) to blocked nodes of
    one queue (one at least); the reply: what became of each, in order. ``events``: a node
    released (enqueued) or ended dead goes to the queue's event stream."""
    first, *more = task_ids
    return Call(
        (
            keys.task_prefix,
            keys.waiting,
            keys.signal,
            keys.dead,
            *keys.events_if(events),
        ),
        (first, upstream, name, state, job_type, result, error, dead_ttl_ms, *more),
        _states,
        scripts.WORKFLOW_RESOLVE,
    )


def _states(reply: Any) -> list[str]:
    return [text(x) for x in reply] if isinstance(reply, list) else [text(reply)]


class Entry(NamedTuple):
    """An outbox entry: a workflow node that ended (include/workflow.lua)."""

    queue: str
    task_id: str
    fields: dict[str, str]


def take(keys: QueueKeys, *, limit: int, lease_ms: int) -> Call[list[Entry]]:
    """Take (and lease) the queue's due outbox entries."""

    def parse(reply: list[Any]) -> list[Entry]:
        entries = []
        for row in reply[1:]:
            fields = {text(row[i]): text(row[i + 1]) for i in range(1, len(row), 2)}
            entries.append(Entry(keys.name, text(row[0]), fields))
        return entries

    return Call((keys.outbox,), (limit, lease_ms), parse, scripts.WORKFLOW_TAKE)


def done(keys: QueueKeys, entries: Sequence[Entry]) -> Call[int]:
    """The entries were applied: they leave the outbox (each fenced by its ``at``)."""
    args: list[Arg] = []
    for entry in entries:
        args += (entry.task_id, entry.fields.get("at", ""))
    return Call((keys.outbox, keys.task_prefix), tuple(args), int, scripts.WORKFLOW_DONE)


def set_aside(keys: QueueKeys, entry: Entry, reason: str, ttl_ms: int) -> Call[int]:
    """An entry that cannot be applied leaves the outbox for the queue's ``aside`` set,
    with its reason (kept ``ttl_ms``); the reply: 1, or 0 when it was written anew since."""
    args = ("aside", entry.task_id, entry.fields.get("at", ""), reason, ttl_ms)
    return Call((keys.outbox, keys.task_prefix), args, int, scripts.WORKFLOW_DONE)


def due_again(keys: QueueKeys, task_ids: Sequence[str]) -> Call[int]:
    """The entries (taken by this runner, not struck off) are due at once, their lease
    given back; XX: one struck off or dropped meanwhile is not made again."""
    args: list[Arg] = ["ZADD", keys.outbox, "XX"]
    for task_id in task_ids:
        args += (0, task_id)
    return Call((), tuple(args), int)


def take_unfinished(prefix: str, *, limit: int, lease_ms: int) -> Call[list[str]]:
    """Take (and lease) the runs whose cross-slot operation is overdue."""
    return Call(
        (unfinished_key(prefix),),
        (limit, lease_ms),
        lambda reply: [text(x) for x in reply],
        scripts.WORKFLOW_UNFINISHED,
    )


def hold_unfinished(prefix: str, run_id: str, until_ms: int) -> Call[int]:
    """Note that ``run_id`` has an operation under way, to finish after ``until_ms``."""
    return Call((), ("ZADD", unfinished_key(prefix), until_ms, run_id), int)


def finished(prefix: str, *run_ids: str) -> Call[int]:
    """The runs leave the unfinished set: each has ended (or has no record)."""
    return Call((), ("ZREM", unfinished_key(prefix), *run_ids), int)


def discard_nodes(keys: QueueKeys, run_id: str, task_ids: Sequence[str]) -> Call[int]:
    """Delete the blocked nodes of a discarded run on this queue."""
    return Call((keys.task_prefix,), (run_id, *task_ids), int, scripts.WORKFLOW_DISCARD)


def rearm(
    keys: QueueKeys, task_id: str, run_id: str, retry_number: int, waits_for: Sequence[str]
) -> Call[str]:
    """A dead node of a retried run runs again, once ``waits_for`` have ended."""
    return Call(
        (keys.task_prefix, keys.waiting, keys.signal, keys.dead),
        (task_id, run_id, retry_number, *waits_for),
        text,
        scripts.WORKFLOW_REARM,
    )


class Healed(NamedTuple):
    """What workflow_heal.lua did and saw: the ids whose entry it wrote, and what each
    blocked node still waits for."""

    written: list[str]
    waits: dict[str, list[str]]


def heal(keys: QueueKeys, run_id: str, retries: str, task_ids: Sequence[str]) -> Call[Healed]:
    """Write the outbox entry of each of ``task_ids`` (nodes of ``run_id`` on this queue
    whose ends the run has not recorded) whose hash says it ended but that has none: one
    ended by a runner that writes no entry. ``retries``: the run's record's."""

    def parse(reply: list[Any]) -> Healed:
        pairs = [text(x) for x in reply[1]]
        waits = {pairs[i]: json.loads(pairs[i + 1]) for i in range(0, len(pairs), 2)}
        return Healed([text(x) for x in reply[0]], waits)

    return Call((keys.task_prefix,), (run_id, retries, *task_ids), parse, scripts.WORKFLOW_HEAL)


def read_upstream(keys: QueueKeys, task_id: str) -> Call[dict[str, str]]:
    """A node's copies of its upstreams' ends: upstream id -> JSON."""
    return Call((), ("HGETALL", keys.upstream(task_id)), parse_hash)


def _scan_page(reply: list[Any]) -> tuple[int, dict[str, str]]:
    return int(reply[0]), parse_hash(reply[1])
