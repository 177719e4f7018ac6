"""What a person (or a test) does to a queue and its tasks from outside their life: pause
and limits (control), cancel, put dead tasks back, run a scheduled task now, delete, and
make scheduled tasks due (culex.testing's drain). Each builds a
:class:`~culex._redis.calls.Call`; no I/O here.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import NamedTuple

from . import scripts
from .calls import Arg, Call, text, text_pairs, texts
from .keys import QueueKeys

# -- pause, resume, limits -------------------------------------------------------------


def _parse_control(reply: list[bytes]) -> dict[str, str]:
    return dict(text_pairs(reply))


def control(keys: QueueKeys, changes: dict[str, str]) -> Call[dict[str, str]]:
    """Set (or, with "", remove) fields of a queue's control hash: paused, rate and
    rate_ms, concurrency. The reply is the hash after the change."""
    args: list[Arg] = []
    for field, value in changes.items():
        args += (field, value)
    return Call((keys.control, keys.signal), tuple(args), _parse_control, scripts.QUEUE_CONTROL)


# -- cancel: call off a task, or ask the runner of a running one to stop it ------------


CANCELLED = "cancelled"
"""cancel's reply when the task went to dead."""
CANCELLING = "cancelling"
"""cancel's reply when the task is running and its cancel was requested; any other reply
is the state that refused it."""


def cancel(
    keys: QueueKeys,
    task_id: str,
    reason: str,
    *,
    dead_ttl_ms: int,
    dead_max: int,
    running: bool = True,
    events: bool = False,
) -> Call[str]:
    """Move a waiting or scheduled task to dead ("cancelled"); with ``running``, request the
    cancel of a running (pending) one ("cancelling": its runner ends it). Else nothing
    changes and the reply is the state it is in ("pending", "succeeded", "dead"), or ""
    when it has no hash. ``events``: a cancelled task's dead event goes to the queue's
    stream (its key comes after the running task's keys, which are then sent too, with
    ARGV[5] "1" when ``running`` is False: a running task is still refused)."""
    running_keys: tuple[str, ...] = ()
    if running or events:
        running_keys = (keys.pending, keys.cancels, keys.task_prefix)
    waiting_only: tuple[str, ...] = ()
    if events:
        running_keys += (keys.events,)
        waiting_only = () if running else ("1",)
    return Call(
        (
            keys.task(task_id),
            keys.waiting,
            keys.scheduled,
            keys.dead,
            keys.periodic_prefix,
            keys.done(task_id),
            keys.dedupe,
            keys.groups_prefix,
            *running_keys,
        ),
        (task_id, reason, dead_ttl_ms, dead_max, *waiting_only),
        text,
        scripts.CANCEL,
    )


# -- dead tasks: put them back ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetryReply:
    """What retry_dead did: the ids put back in waiting, and the ids it skipped."""

    retried: list[str]
    skipped: list[str]


def _parse_retry(reply: list[list[bytes]]) -> RetryReply:
    return RetryReply(texts(reply[0]), texts(reply[1]))


def retry_dead(keys: QueueKeys, ids: Sequence[str]) -> Call[RetryReply]:
    """Put these dead tasks back in waiting; ids that are not dead are skipped."""
    if not ids:  # no ids would mean "the oldest in dead" to the script
        raise ValueError("retry_dead needs at least one id (see retry_oldest_dead)")
    return Call(
        (keys.dead, keys.waiting, keys.signal, keys.task_prefix, keys.groups_prefix),
        (len(ids), *ids),
        _parse_retry,
        scripts.RETRY_DEAD,
    )


def retry_oldest_dead(keys: QueueKeys, limit: int) -> Call[RetryReply]:
    """Put the oldest ``limit`` dead tasks back in waiting."""
    return Call(
        (keys.dead, keys.waiting, keys.signal, keys.task_prefix, keys.groups_prefix),
        (limit,),
        _parse_retry,
        scripts.RETRY_DEAD,
    )


# -- scheduled tasks made due: run now, hasten -----------------------------------------


def hasten(keys: QueueKeys, *, limit: int) -> Call[int]:
    """Make up to ``limit`` scheduled tasks due now (culex.testing's drain); the reply is
    how many went to waiting."""
    return Call(
        (keys.scheduled, keys.waiting, keys.signal, keys.task_prefix, keys.groups_prefix),
        (limit,),
        int,
        scripts.HASTEN,
    )


def run_now(keys: QueueKeys, task_id: str) -> Call[str]:
    """Make one scheduled task ready now (the dashboard's "run now"); the reply is
    "waiting" when it moved, else the state that refused it ("" when it has no record)."""
    return Call(
        (keys.task(task_id), keys.scheduled, keys.waiting, keys.signal, keys.groups_prefix),
        (task_id,),
        text,
        scripts.RUN_NOW,
    )


# -- delete tasks ----------------------------------------------------------------------


class DeleteReply(NamedTuple):
    """What delete did: the ids deleted, and the ids it skipped (pending, unknown...)."""

    deleted: list[str]
    skipped: list[str]


def delete(keys: QueueKeys, ids: Sequence[str], *, only: str | None = None) -> Call[DeleteReply]:
    """Delete these waiting, scheduled or dead tasks: out of their set, hash deleted. ``only``
    (the set of one of those states, e.g. ``keys.dead``): only the tasks whose hash says
    that state."""
    return Call(
        (
            keys.waiting,
            keys.scheduled,
            keys.dead,
            keys.task_prefix,
            keys.done_prefix,
            keys.dedupe,
            keys.groups_prefix,
            *(() if only is None else (only,)),
        ),
        tuple(ids),
        lambda reply: DeleteReply(texts(reply[0]), texts(reply[1])),
        scripts.DELETE,
    )
