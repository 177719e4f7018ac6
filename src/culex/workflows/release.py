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
import logging
import time
from collections.abc import Iterable
from typing import Any

from .._redis import workflows
from .._redis.calls import Call
from .._redis.keys import queue_keys, run_keys
from .._redis.workflows import Entry
from ..server.procedures import Procedure
from .finishing import BATCHES_A_TRIP, call_off, finish, sent

logger = logging.getLogger("culex")

TAKE = 100  # entries a queue a call
LEASE_MS = 30_000  # an entry taken and not struck off by then is taken again
BATCH = 500  # downstreams a release call, ends a record call
ENDS = ("succeeded", "dead")
ENDED = ("succeeded", "failed", "cancelled")  # a run's final states
UNFINISHED = 50  # runs of the unfinished set looked at a pass


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
    kept: list[tuple[Entry, list[tuple[str, str]]]] = []
    for entry in entries:
        down, reason = _readable(entry.fields)
        if reason:
            yield from _set_aside(prefix, entry, reason, dead_ttl_ms)
            held.let_go(entry.queue, (entry.task_id,))
        else:
            kept.append((entry, down))
    entries = [entry for entry, _ in kept]
    calls: list[Call[Any]] = []
    owners: list[tuple[int, str]] = []  # each call's entry and queue
    for i, (entry, down) in enumerate(kept):
        f = entry.fields
        by_queue: dict[str, list[str]] = {}
        for queue, task_id in down:
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
    """Note the entries' ends in their runs' records, a call a run (BATCH ends at most);
    the runs that ended leave the unfinished set. The value: the entries noted."""
    groups: dict[str, list[Entry]] = {}
    for entry in entries:
        groups.setdefault(entry.fields.get("run", ""), []).append(entry)
    chunks = [es[i : i + BATCH] for es in groups.values() for i in range(0, len(es), BATCH)]
    calls = [
        workflows.ended(
            run_keys(prefix, chunk[0].fields.get("run", "")),
            [(e.task_id, e.fields.get("state", "")) for e in chunk],
        )
        for chunk in chunks
    ]
    noted = yield from sent(calls, BATCHES_A_TRIP)
    over = {chunk[0].fields["run"] for chunk, reply in zip(chunks, noted, strict=True)
            if reply in ENDED}  # fmt: skip
    if over:  # (a run that has ended needs no look any more: culex.workflows.finishing)
        yield workflows.finished(prefix, *sorted(over))
    return [
        entry
        for chunk, reply in zip(chunks, noted, strict=True)
        if not isinstance(reply, Exception)
        for entry in chunk
    ]


def _readable(fields: dict[str, str]) -> tuple[list[tuple[str, str]], str]:
    """An entry's downstreams, (queue, task id) each, and "", or why it cannot be applied:
    no run, a state that is no end, a ``down`` that is no JSON list of [queue, id]."""
    if not fields.get("run"):
        return [], "it names no run"
    if fields.get("state") not in ENDS:
        return [], f"its state {fields.get('state', '')[:40]!r} is no end (succeeded or dead)"
    text = fields.get("down") or "[]"
    try:
        down = json.loads(text)
    except (ValueError, RecursionError):
        down = None
    pairs: list[tuple[str, str]] = []
    for p in down if isinstance(down, list) else [None]:
        if not (isinstance(p, list) and len(p) == 2 and _named(p[0]) and _named(p[1])):
            return [], f"its down {text[:80]!r} is no JSON list of [queue, id] pairs"
        pairs.append((p[0], p[1]))
    return pairs, ""


def _named(x: object) -> bool:
    return isinstance(x, str) and x != ""


def _set_aside(prefix: str, entry: Entry, reason: str, ttl_ms: int) -> Procedure[None]:
    """An entry that cannot be applied: its run is called off, to end "failed" naming the
    node and why (its node noted as ended, dead when its state is none), and the entry is
    set aside with its reason (workflow_done.lua's "aside"), so the next is applied."""
    f = entry.fields
    why = f"node {f.get('node', entry.task_id)} ({entry.task_id}): {reason}"
    logger.error("queue %s: the end of workflow %s cannot be applied: set aside", entry.queue, why)
    if f.get("run"):
        run = run_keys(prefix, f["run"])
        yield from call_off(prefix, f["run"], workflows.broken(run, why))
        end = f["state"] if f.get("state") in ENDS else "dead"
        yield [workflows.ended(run, [(entry.task_id, end)])]
    yield workflows.set_aside(queue_keys(prefix, entry.queue), entry, reason, ttl_ms)


def finish_unfinished(prefix: str, limit: int = UNFINISHED) -> Procedure[int]:
    """Look at the due runs of the unfinished set: finish the cross-slot operations
    (enqueue, cancel, retry) whose producers have not in time, heal the running runs
    (finishing.heal), strike off the ended ones; the value: how many runs were looked at."""
    runs = yield workflows.take_unfinished(prefix, limit=limit, lease_ms=LEASE_MS)
    for run_id in runs:
        try:
            yield from finish(prefix, run_id)
        except (ValueError, TypeError, KeyError) as exc:  # (a record written by hand)
            logger.error("workflow run %s: its operation cannot be finished: %r", run_id, exc)
    return len(runs)
