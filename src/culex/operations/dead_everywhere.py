"""A page of every queue's dead tasks, newest first: the dashboard's Dead page. The queues
with the most dead tasks are read, a page of each in one round trip (browse.lua), and their
rows merged by the time each task died (bench/dashboard.py measures it at 100,000 queues)."""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from typing import Any

from .. import config
from .._redis.calls import Call
from .._redis.keys import check_queue_name, queue_keys
from ..errors import short
from ..jobs.task import MAX_ID_LENGTH
from ..server.procedures import Procedure, raised, run_async
from .browsing import MAX_PAGE, SCORE, TaskRow, browse_call, task_row

DEAD_QUEUES = 100  # queues a page of every queue's dead tasks reads at most
# An id after every id in a set's byte order (ids have at most MAX_ID_LENGTH bytes): sent
# as that many 0xff bytes and one more (surrogateescape), as a cursor's id.
_PAST_EVERY_ID = "\udcff" * (MAX_ID_LENGTH + 1)


@dataclass(frozen=True)
class DeadPage:
    """A page of the dead tasks of many queues, newest first."""

    rows: list[TaskRow]
    queues: list[str]  # the queues read (at most DEAD_QUEUES: those with the most dead)
    left_out: int  # queues with dead tasks that were not read (past DEAD_QUEUES)
    next_cursor: str | None  # None: no more


async def adead_everywhere(
    dead: dict[str, int],
    settings: config.Settings | None = None,
    *,
    limit: int = 50,
    cursor: str | None = None,
) -> DeadPage:
    """A page of every queue's dead tasks, newest first (ties: by queue name, then as each
    queue's page orders them), ``limit`` rows from ``cursor`` on (a page's ``next_cursor``).
    ``dead``: each queue's count of dead tasks (``aqueue_counts``); the DEAD_QUEUES queues
    with the most are read, ``limit`` rows of each at most, in one round trip."""
    settings = settings or config.settings()
    procedure = _dead_procedure(dead, settings, limit, cursor)
    return await run_async(procedure, settings.redis_url)


def _encode_dead_cursor(score: str, queue: str, task_id: str) -> str:
    raw = json.dumps([score, queue, task_id]).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def _decode_dead_cursor(cursor: str) -> tuple[str, str, str]:
    try:
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        score, queue, task_id = json.loads(raw)
        if not (isinstance(queue, str) and isinstance(task_id, str) and isinstance(score, str)):
            raise ValueError(cursor)
        if not SCORE.fullmatch(score) or not 0 < len(task_id) <= MAX_ID_LENGTH:
            raise ValueError(score)
        return score, check_queue_name(queue), task_id
    except (ValueError, TypeError, binascii.Error, UnicodeDecodeError):
        raise ValueError(f"not a cursor that a page of dead tasks gave: {short(cursor)}") from None


def _dead_procedure(
    dead: dict[str, int], settings: config.Settings, limit: int, cursor: str | None
) -> Procedure[DeadPage]:
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ValueError(f"limit must be 1 to {MAX_PAGE}, got {limit!r}")
    at = None if cursor is None else _decode_dead_cursor(cursor)
    with_dead = sorted((q for q, n in dead.items() if n > 0), key=lambda q: (-dead[q], q))
    queues = sorted(with_dead[:DEAD_QUEUES])
    return _dead_page(queues, len(with_dead) - len(queues), settings, limit, at)


def _dead_page(
    queues: list[str], left_out: int, settings: config.Settings, limit: int,
    at: tuple[str, str, str] | None,
) -> Procedure[DeadPage]:  # fmt: skip
    calls: list[Call[Any]] = []
    for queue in queues:
        after = None
        if at is not None:  # each queue goes on after the cursor in the order of the page
            score, last_queue, last_id = at
            if queue == last_queue:
                after = (score, last_id)
            else:  # an earlier queue showed its tasks of that score; a later one did not
                after = (score, "" if queue < last_queue else _PAST_EVERY_ID)
        keys = queue_keys(settings.prefix, queue)
        calls.append(browse_call(keys, "dead", ascending=False, after=after, limit=limit,
                                 job=None, examine=limit))  # fmt: skip
    replies = raised((yield calls)) if calls else []
    found: list[tuple[float, str, str, TaskRow]] = []
    more = False
    for queue, reply in zip(queues, replies, strict=True):
        more = more or reply.cursor is not None
        found += [(float(row.score), row.score, row.id, task_row(queue, "dead", row))
                  for row in reply.rows]  # fmt: skip
    # (ids in a queue's byte order, last first, as a page of one queue orders them)
    found.sort(key=lambda item: item[2].encode("utf-8", "surrogateescape"), reverse=True)
    found.sort(key=lambda item: (-item[0], item[3].queue))
    shown = found[:limit]
    more = more or len(found) > limit
    last = shown[-1] if shown else None
    next_cursor = _encode_dead_cursor(last[1], last[3].queue, last[2]) if more and last else None
    return DeadPage([item[3] for item in shown], queues, left_out, next_cursor)
