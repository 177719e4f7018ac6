"""Bulk actions on tasks: retry, delete or cancel a selection of ids, or every task of a
state (and job type), in chunks, with progress.

Each chunk of up to 500 ids is one round trip: its script call (retry_dead.lua,
delete.lua, or one cancel.lua per id, pipelined), and, when walking a state, the read of
the next chunk's ids (browse.lua) behind it. Other clients run between chunks, so a bulk
action on a million tasks never holds the server for long.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Literal, NamedTuple, get_args

from .. import config
from .._redis import commands, interventions, reads
from .._redis.calls import Call
from .._redis.keys import QueueKeys, check_queue_name, queue_keys
from ..errors import ServerError, short
from ..jobs.task import check_id
from ..server.procedures import Procedure, raised, run_async, run_sync
from .browsing import EXAMINE, browse_call, check_job, check_state, state_set, state_sets

Action = Literal["retry", "delete", "cancel"]
Progress = Callable[[int, int], None]

CHUNK = 500  # ids per script call
# The states each action takes tasks from (a pending task is running: its runner holds it).
FROM: dict[str, tuple[str, ...]] = {
    "retry": ("dead",),
    "delete": ("waiting", "scheduled", "dead"),
    "cancel": ("waiting", "scheduled"),
}


def apply(
    action: Action,
    queue: str,
    settings: config.Settings | None = None,
    *,
    ids: Iterable[str] | None = None,
    state: str | None = None,
    job: str | None = None,
    progress: Progress | None = None,
) -> int:
    """Apply ``action`` to tasks of ``queue``; returns how many changed.

    ``retry``: dead → waiting, retries restored. ``delete``: a waiting, scheduled or dead task
    is removed for good. ``cancel``: waiting or scheduled → dead ("cancelled"). A task in
    another state is left as it is (a pending one is running and is never touched).

    ``ids`` given: those tasks (``state``, if given, must be one the action takes from).
    Else every task of ``state`` (default for retry: dead), of job type ``job`` if given,
    oldest first, never more than the state held when the call started. A delete with a
    ``state`` deletes only tasks whose hash says that state (an id can linger in a set its
    task has left). ``progress(done,
    total)`` is called after each chunk: ids done of ``len(ids)``, or ids walked over of the
    state's size at the start."""
    settings = settings or config.settings()
    return run_sync(
        _procedure(action, queue, settings, ids, state, job, progress), settings.redis_url
    )


async def aapply(
    action: Action,
    queue: str,
    settings: config.Settings | None = None,
    *,
    ids: Iterable[str] | None = None,
    state: str | None = None,
    job: str | None = None,
    progress: Progress | None = None,
) -> int:
    """The async twin of :func:`apply`."""
    settings = settings or config.settings()
    procedure = _procedure(action, queue, settings, ids, state, job, progress)
    return await run_async(procedure, settings.redis_url)


def _procedure(
    action: Action,
    queue: str,
    settings: config.Settings,
    ids: Iterable[str] | None,
    state: str | None,
    job: str | None,
    progress: Progress | None,
) -> Procedure[int]:
    """The arguments of :func:`apply`, each checked before any I/O, and the action's procedure."""
    if action not in get_args(Action):
        raise ValueError(f"an action must be one of {', '.join(get_args(Action))}: {short(action)}")
    keys = queue_keys(settings.prefix, check_queue_name(queue))
    if progress is not None and not callable(progress):
        raise TypeError(f"progress must be a function (done, total), got {short(progress)}")
    if ids is None and state is None:
        if action != "retry":
            raise ValueError(f"{action} needs ids, or a state: {', '.join(FROM[action])}")
        state = "dead"
    if state is not None:
        check_state(state, FROM[action])
    act = _act(action, keys, settings, state)
    if ids is not None:
        if job is not None:
            raise ValueError("job filters the tasks of a state: give ids, or state and job")
        return _these(act, _checked(ids), progress)
    assert state is not None  # (checked above)
    return _walk(act, keys, state, None if job is None else check_job(job), progress)


class _Act(NamedTuple):
    """An action on one chunk of ids: its calls (one round trip), and how many ids one
    reply says changed. ``alone``: a call per id, so a refused call costs its id only."""

    calls: Callable[[list[str]], list[Call[Any]]]
    count: Callable[[Any], int]
    alone: bool = False


def _act(action: str, keys: QueueKeys, settings: config.Settings, state: str | None) -> _Act:
    if action == "retry":
        return _Act(lambda chunk: [interventions.retry_dead(keys, chunk)], _count_retried)
    if action == "delete":
        # (with a state, only the tasks whose hash says it: an id can linger in a set its
        # task has left, e.g. in dead after its hash expired and the id was enqueued again)
        only = None if state is None else state_set(keys, state)
        return _Act(lambda chunk: [interventions.delete(keys, chunk, only=only)], _count_deleted)
    ttl, most, events = settings.failed_job_ttl_ms, settings.dead_max, settings.events
    return _Act(
        lambda chunk: [
            # (running=False: a bulk cancel calls off what has not started; a running task
            # is cancelled one by one, by task.cancel(), culex cancel or its page)
            interventions.cancel(
                keys, i, "", dead_ttl_ms=ttl, dead_max=most, running=False, events=events
            )
            for i in chunk
        ],
        _count_cancelled,
        alone=True,
    )


def _count_retried(reply: interventions.RetryReply) -> int:
    return len(reply.retried)


def _count_deleted(reply: interventions.DeleteReply) -> int:
    return len(reply.deleted)


def _count_cancelled(reply: str) -> int:
    return int(reply == interventions.CANCELLED)


def _changed(act: _Act, replies: list[Any]) -> int:
    """How many ids the replies of one chunk's calls say changed. A cancel the server
    refused (its periodic record's key holds another type) leaves its task alone."""
    count = 0
    for reply in replies:
        if isinstance(reply, ServerError) and act.alone:
            continue
        if isinstance(reply, Exception):
            raise reply
        count += act.count(reply)
    return count


def _these(act: _Act, ids: list[str], progress: Progress | None) -> Procedure[int]:
    changed = 0
    for start in range(0, len(ids), CHUNK):
        changed += _changed(act, (yield act.calls(ids[start : start + CHUNK])))
        if progress is not None:
            progress(min(start + CHUNK, len(ids)), len(ids))
    return changed


def _walk(
    act: _Act, keys: QueueKeys, state: str, job: str | None, progress: Progress | None
) -> Procedure[int]:
    """Every task of ``state`` (of ``job``): each of the state's sets in turn (waiting: the
    tasks without a group, then the groups')."""
    changed = 0
    for index, key in enumerate(state_sets(keys, state)):
        shown = progress if index == 0 else _unless_empty(progress)
        changed += yield from _walk_set(act, keys, state, key, job, shown)
    return changed


def _unless_empty(progress: Progress | None) -> Progress | None:
    """``progress``, told nothing of a set that held no task (waiting's second set)."""
    if progress is None:
        return None
    shown = progress
    return lambda done, total: shown(done, total) if total else None


def _walk_set(
    act: _Act, keys: QueueKeys, state: str, key: str, job: str | None, progress: Progress | None
) -> Procedure[int]:
    """Every task in the set ``key`` of ``state`` (of ``job``), oldest first, one chunk a
    round trip: the action on a chunk goes with the read of the next one (its cursor is a
    position, so the ids the action moves away do not shift it)."""

    def page(after: tuple[str, str] | None, left: int) -> Call[reads.BrowseReply]:
        # never looking at more ids than the state held at the start: not those added since
        examine = min(EXAMINE, left)
        return browse_call(keys, state, ascending=True, after=after, limit=min(CHUNK, examine),
                           job=job, examine=examine, in_set=key)  # fmt: skip

    size = commands.set_size(key)
    total, reply = raised((yield [size, page(None, EXAMINE)]))
    changed = looked = 0
    while True:
        looked += reply.looked
        more = reply.cursor is not None and looked < total
        calls = act.calls([row.id for row in reply.rows]) if reply.rows else []
        sent = [*calls, page(reply.cursor, total - looked)] if more else calls
        replies = (yield sent) if sent else []
        changed += _changed(act, replies[: len(calls)])
        if progress is not None:
            progress(min(looked, total) if more else total, total)
        if not more:
            return changed
        reply = raised(replies[-1:])[0]


def _checked(ids: Iterable[str]) -> list[str]:
    if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
        raise TypeError(f"ids must be a list of task ids, got {type(ids).__name__}")
    return list(dict.fromkeys(check_id(task_id) for task_id in ids))  # each id once
