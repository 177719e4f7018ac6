"""Dead tasks: list them, and put them back in waiting to run again.

A dead task is kept ``failed_job_ttl`` in its queue's dead set. Retrying it (one script,
``retry_dead.lua``) moves it to the back of waiting with its retries restored; its attempt
number is kept, so a report from a run before its death is still refused.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from .. import config
from .._redis import calls, commands, interventions
from .._redis.interventions import RetryReply
from .._redis.keys import QueueKeys, check_queue_name, queue_keys
from ..jobs.codecs import moment
from ..jobs.task import check_id
from ..server.procedures import Procedure, run_async, run_sync

# Ids per retry script: a long retry is cut into scripts that other clients can run between.
CHUNK = 1000


@dataclass(frozen=True, slots=True)
class DeadTask:
    """A task in a queue's dead set, as :func:`dead_tasks` reads it."""

    id: str
    queue: str
    type: str
    error: str  # its last_error: why it died
    died_at: datetime | None  # aware, UTC; None: a time no datetime holds (see died_ms)
    retry_count: int
    attempt: int
    died_ms: float = field(default=0.0, compare=False)  # its score in dead, as stored (ms)


def dead_tasks(
    queue: str, limit: int = 50, *, offset: int = 0, settings: config.Settings | None = None
) -> list[DeadTask]:
    """The dead tasks of ``queue``, newest first: ``limit`` of them from ``offset`` on.

    Ids whose record has already expired are left out (they can never run again)."""
    settings = settings or config.settings()
    procedure = _list_procedure(queue, limit, offset, settings)
    return run_sync(procedure, settings.redis_url)


async def adead_tasks(
    queue: str, limit: int = 50, *, offset: int = 0, settings: config.Settings | None = None
) -> list[DeadTask]:
    """The async twin of :func:`dead_tasks`."""
    settings = settings or config.settings()
    procedure = _list_procedure(queue, limit, offset, settings)
    return await run_async(procedure, settings.redis_url)


def retry_dead(
    queue: str,
    ids: Iterable[str] | None = None,
    limit: int = 1000,
    *,
    settings: config.Settings | None = None,
) -> list[str]:
    """Put dead tasks of ``queue`` back in waiting; returns the ids that went back.

    ``ids=None``: the oldest ``limit`` dead tasks (``limit`` is used only then). A given id
    that is not dead (or whose record expired) is skipped. Each retried task gets its
    ``max_retries`` again and runs after the tasks already waiting."""
    _check_count(limit, "limit", positive=True)  # None (every one) is for dead.retry only
    return retry(queue, ids, limit, settings=settings).retried


async def aretry_dead(
    queue: str,
    ids: Iterable[str] | None = None,
    limit: int = 1000,
    *,
    settings: config.Settings | None = None,
) -> list[str]:
    """The async twin of :func:`retry_dead`."""
    _check_count(limit, "limit", positive=True)
    settings = settings or config.settings()
    procedure = _retry_procedure(queue, ids, limit, settings)
    reply = await run_async(procedure, settings.redis_url)
    return reply.retried


def retry(
    queue: str,
    ids: Iterable[str] | None,
    limit: int | None,
    *,
    settings: config.Settings | None = None,
) -> RetryReply:
    """As :func:`retry_dead`, with the skipped ids too (``culex dead retry`` shows them).
    ``limit=None`` with ``ids=None``: every task in dead when the call starts."""
    settings = settings or config.settings()
    procedure = _retry_procedure(queue, ids, limit, settings)
    return run_sync(procedure, settings.redis_url)


def _retry_procedure(
    queue: str, ids: Iterable[str] | None, limit: int | None, settings: config.Settings
) -> Procedure[RetryReply]:
    """Retry dead tasks (arguments as in :func:`retry`); the procedure's value is a RetryReply.
    The arguments are checked here, before any I/O."""
    keys = queue_keys(settings.prefix, check_queue_name(queue))
    if limit is not None:
        _check_count(limit, "limit", positive=True)
    if ids is None:
        return _retry_oldest(keys, limit)
    return _retry_these(keys, list(dict.fromkeys(_checked_ids(ids))))  # each id once


def _retry_these(keys: QueueKeys, ids: list[str]) -> Procedure[RetryReply]:
    if not ids:
        return RetryReply([], [])
    chunks = [ids[i : i + CHUNK] for i in range(0, len(ids), CHUNK)]
    return _merged((yield [interventions.retry_dead(keys, chunk) for chunk in chunks]))


def _retry_oldest(keys: QueueKeys, limit: int | None) -> Procedure[RetryReply]:
    if limit is not None and limit <= CHUNK:
        return _merged([(yield interventions.retry_oldest_dead(keys, limit))])
    # Never more than dead holds at the start: tasks that die again meanwhile are not chased.
    left = yield commands.dead_count(keys)
    if limit is not None:
        left = min(left, limit)
    replies: list[RetryReply] = []
    while left > 0:
        reply = yield interventions.retry_oldest_dead(keys, min(left, CHUNK))
        replies.append(reply)
        if not reply.retried:  # nothing left to retry (or only ids that are not dead)
            break
        left -= len(reply.retried) + len(reply.skipped)
    return _merged(replies)


def _list_procedure(
    queue: str, limit: int, offset: int, settings: config.Settings
) -> Procedure[list[DeadTask]]:
    """Read a page of the dead set (arguments as in :func:`dead_tasks`), checked first."""
    keys = queue_keys(settings.prefix, check_queue_name(queue))
    _check_count(limit, "limit", positive=True)
    _check_count(offset, "offset", positive=False)
    return _list(keys, limit, offset)


def _list(keys: QueueKeys, limit: int, offset: int) -> Procedure[list[DeadTask]]:
    listed = yield commands.dead_ids(keys, limit=limit, offset=offset)
    if not listed:
        return []
    fields = yield [commands.read_dead(keys, task_id) for task_id, _ in listed]
    tasks: list[DeadTask] = []
    for (task_id, died_ms), found in zip(listed, fields, strict=True):
        if isinstance(found, Exception):
            raise found
        if found:  # {}: the record expired; the id only waits to be trimmed from dead
            tasks.append(_record(keys.name, task_id, died_ms, found))
    return tasks


def _record(queue: str, task_id: str, died_ms: float, fields: dict[str, str]) -> DeadTask:
    return DeadTask(
        id=task_id,
        queue=queue,
        type=fields.get("type", ""),
        error=fields.get("last_error", ""),
        died_at=moment(died_ms),
        retry_count=calls.number(fields.get("retry_count")),
        attempt=calls.number(fields.get("attempt")),
        died_ms=died_ms,
    )


def _merged(replies: list[Any]) -> RetryReply:
    retried: list[str] = []
    skipped: dict[str, None] = {}  # an id left in dead may be seen by two chunks
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
        retried += reply.retried
        skipped.update(dict.fromkeys(reply.skipped))
    return RetryReply(retried, list(skipped))


def _checked_ids(ids: Iterable[str]) -> list[str]:
    if isinstance(ids, str | bytes) or not isinstance(ids, Iterable):
        raise TypeError(f"ids must be a list of task ids, got {type(ids).__name__}")
    return [check_id(task_id) for task_id in ids]


def _check_count(value: object, name: str, *, positive: bool) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"{name} must be an int, got {type(value).__name__}")
    if value < (1 if positive else 0):
        raise ValueError(f"{name} must be {'> 0' if positive else '>= 0'}, got {value}")
