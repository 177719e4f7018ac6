"""The producer's operations: enqueue a task, and enqueue a periodic job's slot once
across runners (schedule). Each builds a :class:`~culex._redis.calls.Call`; no I/O here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from . import scripts
from .calls import Arg, Call, text
from .keys import QueueKeys


class Enqueued(NamedTuple):
    """What enqueue did: ``state`` is "waiting" or "scheduled"; ``existed``: the id was taken;
    ``deduped``: nothing was stored, ``task_id`` is the live task that holds the dedupe key."""

    task_id: str
    state: str
    existed: bool
    deduped: bool = False


def _parse_enqueue(reply: list[bytes]) -> Enqueued:
    state = _STATES.get(reply[0]) or text(reply[0])  # (a dict look-up for the usual two)
    if state == "exists":
        return Enqueued(text(reply[1]), "", True)
    if state == "deduped":
        return Enqueued(text(reply[1]), "", False, True)
    return Enqueued(text(reply[1]), state, False)


_STATES = {b"waiting": "waiting", b"scheduled": "scheduled"}


def enqueue(
    keys: QueueKeys,
    task_id: str,
    job_type: str,
    params_json: str,
    *,
    due_ms: int | None,
    delay_ms: int,
    max_retries: int,
    trace: str = "",
    priority: int = 0,
    dedupe_key: str = "",
    group: str = "",
    drawn: bool = False,
    expires_ms: int | None = None,
    dedupe_for_ms: int | None = None,
    events: bool = False,
    headers: str = "",
) -> Call[Enqueued]:
    """``trace``: the producer's trace context (tracing.py), "" for none; ``priority``: higher
    runs first (checked by the caller); ``dedupe_key``, ``group``: "" for none;
    ``drawn``: culex drew ``task_id`` (task.new_id), so no task ever had it;
    ``expires_ms``: the task expires this many ms after the server stores it (None: never);
    ``dedupe_for_ms``: with a dedupe key, how long the key stays the task's after it ended;
    ``events``: the task's ``enqueued`` event goes to the queue's stream (KEYS[9], after all
    the optional keys before it); ``headers``: the task's headers, a JSON object of strings
    (culex.middleware), "" for none.

    The optional KEYS and ARGV are sent only when needed, so the common enqueue sends
    seven words fewer and its script does one command less: ARGV 8 to 11 when one of them
    is used (and ARGV[12] with an expiry, 12 and 13 with headers, 12 to 14 with a window);
    KEYS 5 to 7 with a dedupe key or a group; KEYS[8] (dead) unless the id is drawn (an id
    no task had cannot be left in dead)."""
    args: tuple[Arg, ...] = (
        task_id,
        job_type,
        keys.name,
        params_json,
        "" if due_ms is None else due_ms,
        delay_ms or "",  # ("" is 0, and the script reads it without a check)
        max_retries,
    )
    if trace or priority or dedupe_key or group or expires_ms is not None or headers:
        args += (trace, priority or "", dedupe_key, group)  # ("": priority 0, read with no check)
        if dedupe_for_ms is not None or headers:
            args += ("" if expires_ms is None else expires_ms, headers)
            if dedupe_for_ms is not None:
                args += (dedupe_for_ms,)
        elif expires_ms is not None:
            args += (expires_ms,)
    named: tuple[str, ...] = (keys.task(task_id), keys.waiting, keys.scheduled, keys.signal)
    if dedupe_key or group or not drawn or events:
        named += (keys.dedupe, keys.task_prefix, keys.groups_prefix)
        if not drawn or events:
            named += (keys.dead,)
        named += keys.events_if(events)
    return Call(named, args, _parse_enqueue, scripts.ENQUEUE)


# -- periodic jobs: one slot, enqueued once --------------------------------------------


@dataclass(frozen=True, slots=True)
class Scheduled:
    """What schedule did: "enqueued", "done", "new", "overlap", "early", "unknown" or
    "paused" (see schedule.lua)."""

    outcome: str
    task_id: str


def schedule(
    keys: QueueKeys,
    job_type: str,
    task_id: str,
    *,
    slot_ms: int | None,
    next_slot_ms: int | None,
    overlap: bool,
    run_new: bool,
    max_retries: int,
    record: Sequence[tuple[str, str]] = (),
    events: bool = False,
    headers: str = "",
) -> Call[Scheduled]:
    """Enqueue one slot of a periodic job once across runners; ``slot_ms=None``: a trigger
    (with ``run_new`` False, refused as "unknown" when the job has no record). ``record``:
    fields written on the job's record (its schedule, for readers without the class);
    ``events``: the task's ``enqueued`` event goes to the queue's stream; ``headers``: the
    task's (JSON, "" for none), sent as the pair named `headers`."""
    described: list[Arg] = []
    for name, value in record:
        described += (name, value)
    if headers:
        described += ("headers", headers)
    return Call(
        (
            keys.periodic(job_type),
            keys.task(task_id),
            keys.waiting,
            keys.signal,
            keys.task_prefix,
            *keys.events_if(events),
        ),
        (
            task_id,
            job_type,
            keys.name,
            "" if slot_ms is None else slot_ms,
            "" if next_slot_ms is None else next_slot_ms,
            int(overlap),
            int(run_new),
            max_retries,
            *described,
        ),
        lambda reply: Scheduled(text(reply[0]), text(reply[1])),
        scripts.SCHEDULE,
    )


def periodic_pause(
    keys: QueueKeys, job_type: str, pause: bool, *, record: Sequence[tuple[str, str]] | None
) -> Call[str]:
    """Pause (``pause``) or resume a periodic job; the reply is "paused", "resumed" or
    "unknown" (periodic_pause.lua). ``record``: the job's fields when the caller has its
    class (a job no scheduler has seen yet gets a record); None: by name, known jobs only."""
    described: list[Arg] = []
    for name, value in record or ():
        described += (name, value)
    return Call(
        (keys.periodic(job_type),),
        ("pause" if pause else "resume", int(record is not None), *described),
        text,
        scripts.PERIODIC_PAUSE,
    )
