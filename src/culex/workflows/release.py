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
import time
from collections.abc import Iterable
from typing import Any

from .._redis import workflows
from .._redis.calls import Call
from .._redis.keys import queue_keys, run_keys
from .._redis.workflows import Entry
from ..server.procedures import Procedure
from .finishing import BATCHES_A_TRIP, finish, sent

TAKE = 100  # entries a queue a call
LEASE_MS = 30_000  # an entry taken and not struck off by then is taken again
BATCH = 500  # downstreams a release call, ends a record call


class Held:
    """The outbox entries a runner took and has not struck off (a call of theirs was
    refused: the server away or full), while their lease holds (less MARGIN_S): no other
    runner may take them before it runs out, so the runner's next drain makes them due
    again (workflows.due_again) and takes them at once, as they are then."""

    MARGIN_S = 5.0

    def __init__(self) -> None:
        self._held: dict[tuple[str, str], float] = {}  # (queue, task id) -> until

    def took(self, entries: Iterable[Entry]) -> None:
        until = time.monotonic() + LEASE_MS / 1000 - self.MARGIN_S
        for entry in entries:
            self._held[entry.queue, entry.task_id] = until

    def let_go(self, queue: str, task_ids: Iterable[str]) -> None:
        for task_id in task_ids:
            self._held.pop((queue, task_id), None)

    def due(self) -> dict[str, list[str]]:
        """The ids still held, by queue (those whose lease is ending let go)."""
        now = time.monotonic()
        self._held = {k: until for k, until in self._held.items() if until > now}
        by_queue: dict[str, list[str]] = {}
        for queue, task_id in self._held:
            by_queue.setdefault(queue, []).append(task_id)
        return by_queue


def drain(
    prefix: str,
    queues: Iterable[str],
    dead_ttl_ms: int,
    events: bool = False,
    held: Held | None = None,
) -> Procedure[int]:
    """Apply every due outbox entry of ``queues`` (and of the queues their downstreams
    end on, as they end), and the entries ``held`` (this runner's, taken by an earlier
    drain whose calls were refused); the value: how many entries were applied.
    ``events``: the downstreams released or ended go to their queues' event streams."""
    held = Held() if held is None else held
    applied = 0
    wanted = set(queues)
    mine = held.due()
    if mine:
        replies = yield [workflows.due_again(queue_keys(prefix, q), ids) for q, ids in mine.items()]
        for (queue, ids), reply in zip(mine.items(), replies, strict=True):
            if not isinstance(reply, Exception):
                held.let_go(queue, ids)
                wanted.add(queue)
    look = sorted(wanted)
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
        held.took(entries)
        done, ended_on = yield from _apply(prefix, entries, dead_ttl_ms, events, held)
        applied += done
        look = sorted(again | ended_on)
    return applied


def _apply(
    prefix: str, entries: list[Entry], dead_ttl_ms: int, events: bool, held: Held
) -> Procedure[tuple[int, set[str]]]:
    """Release the entries' downstreams, note their ends in their runs, strike them off.
    The value: how many were struck off, and the queues where a downstream ended dead.

    The downstreams of one entry on one queue are released by one call (BATCH at most),
    and the ends of one run noted by one: a fan-out of 100,000 costs 200 calls, not
    100,000. A refused call leaves every entry it carried in the outbox, and in ``held``
    (for this runner's next pass: no other may take it before its lease runs out)."""
    calls: list[Call[Any]] = []
    owners: list[tuple[int, str]] = []  # each call's entry and queue
    for i, entry in enumerate(entries):
        f = entry.fields
        by_queue: dict[str, list[str]] = {}
        for queue, task_id in _downstreams(f.get("down", "")):
            by_queue.setdefault(queue, []).append(task_id)
        for queue, ids in by_queue.items():
            for start in range(0, len(ids), BATCH):
                calls.append(
                    workflows.resolve(
                        queue_keys(prefix, queue),
                        ids[start : start + BATCH],
                        upstream=entry.task_id,
                        name=f.get("node", entry.task_id),
                        state=f.get("state", "dead"),
                        job_type=f.get("type", ""),
                        result=f.get("result", ""),
                        error=f.get("error", ""),
                        dead_ttl_ms=dead_ttl_ms,
                        events=events,
                    )
                )
                owners.append((i, queue))
    replies = yield from sent(calls, BATCHES_A_TRIP)
    failed = {owners[k][0] for k, reply in enumerate(replies) if isinstance(reply, Exception)}
    ended_on = {
        owners[k][1]
        for k, reply in enumerate(replies)
        if not isinstance(reply, Exception) and "dead" in reply
    }
    good = [entry for i, entry in enumerate(entries) if i not in failed]
    landed = yield from _note_ends(prefix, good)
    by_queue_done: dict[str, list[Entry]] = {}
    for entry in landed:
        by_queue_done.setdefault(entry.queue, []).append(entry)
    struck = yield from sent(
        [workflows.done(queue_keys(prefix, q), es) for q, es in by_queue_done.items()]
    )
    for (queue, es), reply in zip(by_queue_done.items(), struck, strict=True):
        if not isinstance(reply, Exception):
            held.let_go(queue, (e.task_id for e in es))
    return sum(r for r in struck if isinstance(r, int)), ended_on


def _note_ends(prefix: str, entries: list[Entry]) -> Procedure[list[Entry]]:
    """Note the entries' ends in their runs' records, a call a run (BATCH ends at most); an
    entry whose state is neither end is sent alone, so that its refusal holds back no
    other. The value: the entries noted."""
    groups: dict[str, list[Entry]] = {}
    alone: list[list[Entry]] = []
    for entry in entries:
        if entry.fields.get("state") in ("succeeded", "dead"):
            groups.setdefault(entry.fields.get("run", ""), []).append(entry)
        else:
            alone.append([entry])
    chunks = [es[i : i + BATCH] for es in groups.values() for i in range(0, len(es), BATCH)]
    chunks += alone
    calls = [
        workflows.ended(
            run_keys(prefix, chunk[0].fields.get("run", "")),
            [(e.task_id, e.fields.get("state", "")) for e in chunk],
        )
        for chunk in chunks
    ]
    noted = yield from sent(calls, BATCHES_A_TRIP)
    return [
        entry
        for chunk, reply in zip(chunks, noted, strict=True)
        if not isinstance(reply, Exception)
        for entry in chunk
    ]


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
