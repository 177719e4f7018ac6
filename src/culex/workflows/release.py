"""What runners do for workflows: apply the ends of nodes to their downstreams and runs,
and finish what a producer left half-done.

The script that ends a node writes its end to its queue's outbox, in the same call
(include/workflow.lua). :func:`drain` takes a queue's due entries (leased, as a task is),
then, for each, releases its downstreams (workflow_resolve.lua, in each downstream's slot:
set semantics, so an end applied twice counts once), notes its end in the run's record
(workflow_record.lua, in the run's slot: the run ends with its last node), and strikes it
off. A runner that dies between two of these steps leaves the entry to be taken again
when its lease runs out, and every step is made again harmlessly. A node that ends dead
because of its upstream writes its own entry: the drain follows it at once, down the graph.

Nothing here polls a run: a runner takes the entries of its own queues after each report
of a node's end, and looks at every queue's outbox and at the unfinished operations once
a pass (culex.runner.releaser), at a cost that grows with the entries, not the runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from .._redis import workflows
from .._redis.calls import Call
from .._redis.keys import queue_keys, run_keys
from .._redis.workflows import Entry
from ..server.procedures import Procedure
from .finishing import finish, sent

TAKE = 100  # entries a queue a call
LEASE_MS = 30_000  # an entry taken and not struck off by then is taken again


def drain(prefix: str, queues: Iterable[str], dead_ttl_ms: int) -> Procedure[int]:
    """Apply every due outbox entry of ``queues`` (and of the queues their downstreams
    end on, as they end); the value: how many entries were applied."""
    applied = 0
    look = sorted(set(queues))
    while look:
        taken = yield [
            workflows.take(queue_keys(prefix, q), limit=TAKE, lease_ms=LEASE_MS) for q in look
        ]
        entries: list[Entry] = []
        again = set()
        for queue, reply in zip(look, taken, strict=True):
            if isinstance(reply, Exception):
                continue  # (that queue's outbox waits for the next pass)
            entries += reply
            if len(reply) == TAKE:
                again.add(queue)
        if not entries:
            break
        done, ended_on = yield from _apply(prefix, entries, dead_ttl_ms)
        applied += done
        look = sorted(again | ended_on)
    return applied


def _apply(prefix: str, entries: list[Entry], dead_ttl_ms: int) -> Procedure[tuple[int, set[str]]]:
    """Release the entries' downstreams, note their ends in their runs, strike them off.
    The value: how many were struck off, and the queues where a downstream ended dead."""
    calls: list[Call[Any]] = []
    owners: list[tuple[int, str]] = []  # each call's entry and queue
    for i, entry in enumerate(entries):
        f = entry.fields
        for queue, task_id in _downstreams(f.get("down", "")):
            calls.append(
                workflows.resolve(
                    queue_keys(prefix, queue),
                    task_id,
                    upstream=entry.task_id,
                    name=f.get("node", entry.task_id),
                    state=f.get("state", "dead"),
                    job_type=f.get("type", ""),
                    result=f.get("result", ""),
                    error=f.get("error", ""),
                    dead_ttl_ms=dead_ttl_ms,
                )
            )
            owners.append((i, queue))
    replies = yield from sent(calls)
    failed = {owners[k][0] for k, reply in enumerate(replies) if isinstance(reply, Exception)}
    ended_on = {owners[k][1] for k, reply in enumerate(replies) if reply == "dead"}
    good = [entry for i, entry in enumerate(entries) if i not in failed]
    noted = yield from sent(
        [
            workflows.ended(
                run_keys(prefix, e.fields.get("run", "")), e.task_id, e.fields.get("state", "")
            )
            for e in good
        ]
    )
    landed = [e for e, reply in zip(good, noted, strict=True) if not isinstance(reply, Exception)]
    by_queue: dict[str, list[Entry]] = {}
    for entry in landed:
        by_queue.setdefault(entry.queue, []).append(entry)
    struck = yield from sent(
        [workflows.done(queue_keys(prefix, q), es) for q, es in by_queue.items()]
    )
    return sum(r for r in struck if isinstance(r, int)), ended_on


def _downstreams(text: str) -> list[tuple[str, str]]:
    try:
        down = json.loads(text or "[]")
    except ValueError:
        return []
    return [(str(q), str(t)) for q, t in down] if isinstance(down, list) else []


def finish_unfinished(prefix: str, limit: int = 10) -> Procedure[int]:
    """Finish the cross-slot operations (enqueue, cancel, retry) whose producers have not
    in time; the value: how many runs were looked at."""
    runs = yield workflows.take_unfinished(prefix, limit=limit, lease_ms=LEASE_MS)
    for run_id in runs:
        yield from finish(prefix, run_id)
    return len(runs)
