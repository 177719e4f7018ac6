"""Browsing the tasks of a state: pages read from a queue's sorted sets by score, from a
cursor, optionally of one job type (browse.lua), and one task found by id in any state.

Re-exported by :mod:`culex.inspection`, where the rest of the read-only looks are; a page
of every queue's dead tasks is in dead_everywhere.py."""

from __future__ import annotations

import base64
import binascii
import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .. import config
from .._redis import commands, reads
from .._redis.calls import Call, number
from .._redis.keys import QueueKeys, check_queue_name, queue_keys
from .._redis.priority import ready_ms
from ..errors import short
from ..jobs.task import MAX_ID_LENGTH, check_id
from ..middleware.encryption import shown_params
from ..server.procedures import Procedure, raised, run_async, run_sync

STATES = ("waiting", "pending", "scheduled", "dead")
# What a listing of tasks takes: the four sets, and the recent successes (not one of the
# sets a task is in: a history complete.lua keeps, the newest 1,000 of the queue).
LISTED = (*STATES, "succeeded")
MAX_PAGE = 500  # rows a page holds at most
EXAMINE = 2000  # ids a page with a job filter looks at, at most
CUT = 500  # characters shown of last_error and of params
MAX_SEARCH = 200  # characters of a search text
# A score as the server says it (ZRANGE WITHSCORES): ASCII digits, or -inf and +inf, which a
# foreign producer may have stored. Nothing else is sent back as a cursor's score.
SCORE = re.compile(r"-?(inf|[0-9]+(\.[0-9]+)?(e[+-]?[0-9]+)?)")


@dataclass(frozen=True)
class TaskRow:
    """One task, as a listing shows it."""

    id: str
    queue: str
    job: str
    state: str
    at: float  # epoch seconds: from its score in its state's set: waiting: ready since; scheduled:
    # due; pending: when its lease ends (not when it started); dead: when it died. A task
    # found in no set (succeeded): when it finished (0.0 when unknown). A score of -inf or
    # +inf (a foreign producer's) is kept as it is.
    enqueued_at: float | None
    retry_count: int
    last_error: str  # cut to 500 characters
    params: str  # the raw params text (JSON), cut to 500 characters
    priority: int = 0  # higher runs first (a task stored without one: 0)
    group: str = ""  # the group it was enqueued with ("": none)

    @property
    def retries(self) -> int:
        """How many times the task ran again after a failure (:func:`retries`)."""
        return retries(self.state, self.retry_count, self.last_error)


def retries(state: str, retry_count: int, last_error: str) -> int:
    """The retries a task had, as its listings count them: its failures that were followed
    by another run (or wait for one). ``retry_count`` counts the failures; on a dead task
    the one that ended it (a failure not retried, ``fail(retry=False)`` on attempt 1 among
    them) had no retry after it, nor had a failure whose retry was cancelled or expired
    before it ran. A task that died of a lost runner died of no failure: its count stands."""
    lost = last_error.startswith("lease expired (runner lost)")
    return retry_count - 1 if state == "dead" and retry_count > 0 and not lost else retry_count


@dataclass(frozen=True)
class TaskPage:
    """A page of a state's tasks."""

    rows: list[TaskRow]
    total: int  # how many tasks the state holds (ZCARD), not how many match
    next_cursor: str | None  # None: no more
    looked: int = 0  # how many ids the page looked at (with a filter: at most 2,000)


def tasks(
    queue: str,
    state: str,
    settings: config.Settings | None = None,
    *,
    newest_first: bool = True,
    cursor: str | None = None,
    limit: int = 50,
    job: str | None = None,
    search: str | None = None,
    kind: str | None = None,
) -> TaskPage:
    """A page of the tasks of ``queue`` in ``state`` (waiting, scheduled, pending or dead,
    or succeeded: the queue's last 1,000 successes, kept a day; one whose record has
    expired is a row of its id and time alone, with no job), newest first
    by their score (``newest_first=False``: oldest first), ``limit`` (1..500) rows from
    ``cursor`` on (a page's ``next_cursor``; None: the start). A page is read in one round
    trip, and stays stable while tasks come and go: the cursor is a position in the set,
    not an offset.

    In waiting, the order is the one the tasks run in, highest priority first and then
    earliest ready (``newest_first=False``), or its reverse (the default: the task that
    would run last comes first); with one priority, that is oldest or newest first.

    ``job``: only tasks of that job type. A page then looks at 2,000 ids at most, so it may
    hold fewer rows than ``limit``, or none, and still have a ``next_cursor``: go on until
    it is None. Tasks whose record expired are left out (but for succeeded, where such a
    task is a row of its id and time, with no job: then ``job`` and ``kind`` leave it
    out). An unknown queue gives empty pages.

    ``search``: only tasks whose id begins with it, or whose job type, params or last error
    holds it (as written, case and all); ``kind``: "retrying", only tasks that failed or
    stalled before (in scheduled: waiting out a retry's back-off), or "delayed", only the
    others. Each looks at 2,000 ids a page at most, as ``job`` does.
    """
    settings = settings or config.settings()
    procedure = _page_procedure(
        queue, state, settings, newest_first, cursor, limit, job, search, kind
    )
    return run_sync(procedure, settings.redis_url)


async def atasks(
    queue: str,
    state: str,
    settings: config.Settings | None = None,
    *,
    newest_first: bool = True,
    cursor: str | None = None,
    limit: int = 50,
    job: str | None = None,
    search: str | None = None,
    kind: str | None = None,
) -> TaskPage:
    """The async twin of :func:`tasks`."""
    settings = settings or config.settings()
    procedure = _page_procedure(
        queue, state, settings, newest_first, cursor, limit, job, search, kind
    )
    return await run_async(procedure, settings.redis_url)


def find_task(queue: str, task_id: str, settings: config.Settings | None = None) -> TaskRow | None:
    """The task ``task_id`` of ``queue``, whatever its state (read in one round trip), or
    None when it has no record (never enqueued, or expired)."""
    settings = settings or config.settings()
    return run_sync(_find_procedure(queue, task_id, settings), settings.redis_url)


async def afind_task(
    queue: str, task_id: str, settings: config.Settings | None = None
) -> TaskRow | None:
    """The async twin of :func:`find_task`."""
    settings = settings or config.settings()
    return await run_async(_find_procedure(queue, task_id, settings), settings.redis_url)


def check_state(state: object, allowed: Iterable[str] = STATES) -> str:
    """Return ``state`` if it is one of ``allowed``, else raise a clear error."""
    allowed = tuple(allowed)
    if not isinstance(state, str):
        raise TypeError(f"a state must be a str, got {type(state).__name__}")
    if state not in allowed:
        raise ValueError(f"a state must be one of {', '.join(allowed)}: got {short(state)}")
    return state


def check_job(job: object) -> str:
    """Return a job type to filter on if it is one, else raise a clear error."""
    if not isinstance(job, str):
        raise TypeError(f"a job type must be a str, got {type(job).__name__}")
    if not job or not job.isprintable():
        raise ValueError(f"a job type must be printable text, not empty: {short(job)}")
    return job


def check_search(text: object) -> str:
    """Return a search text if it is one (printable, at most 200 characters), else raise a
    clear error."""
    if not isinstance(text, str):
        raise TypeError(f"a search must be a str, got {type(text).__name__}")
    if not text.isprintable() or len(text) > MAX_SEARCH:
        raise ValueError(f"a search must be printable text of at most {MAX_SEARCH} characters")
    return text


def check_limit(limit: object, most: int) -> int:
    """Return ``limit`` if it is an int from 1 to ``most``, else raise a clear error."""
    if isinstance(limit, bool) or not isinstance(limit, int):
        raise TypeError(f"limit must be an int, got {type(limit).__name__}")
    if not 1 <= limit <= most:
        raise ValueError(f"limit must be 1 to {most}, got {limit}")
    return limit


def state_set(keys: QueueKeys, state: str) -> str:
    """The sorted set of ``state`` among ``keys`` (for waiting: the tasks without a group;
    for succeeded: the recent successes)."""
    return {"waiting": keys.waiting, "pending": keys.pending, "scheduled": keys.scheduled,
            "dead": keys.dead, "succeeded": keys.succeeded}[state]  # fmt: skip


def state_sets(keys: QueueKeys, state: str) -> list[str]:
    """Every sorted set that lists tasks of ``state``: waiting's tasks without a group, then
    the ready tasks of the queue's groups (include/groups.lua); one set for the others."""
    if state == "waiting":
        return [keys.waiting, keys.grouped_ready]
    return [state_set(keys, state)]


def encode_cursor(position: tuple[str, str] | None, part: int = 0) -> str | None:
    """A page's position (score, id) in the ``part``-th set of its state (state_sets) as an
    opaque text, safe in URLs and shells."""
    if position is None:
        return None
    raw = ("~" * part + f"{position[0]}:{position[1]}").encode("utf-8", "surrogateescape")
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_part_cursor(cursor: object) -> tuple[int, tuple[str, str] | None]:
    """The set (its place in state_sets) and the position (score, id) of a cursor that
    :func:`tasks` gave, else a clear error. The id is kept as its bytes were (a task id a
    foreign producer wrote need not be UTF-8); the score must be one the server gives."""
    if not isinstance(cursor, str):
        raise TypeError(f"a cursor must be a str, got {type(cursor).__name__}")
    try:
        if not cursor.isascii():
            raise ValueError(cursor)
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        text = raw.decode("utf-8", "surrogateescape")
        part = len(text) - len(text.lstrip("~"))
        if part > 1:
            raise ValueError(part)
        if part and not text[part:]:  # the start of a later set
            return part, None
        score, _, task_id = text[part:].partition(":")
        if not SCORE.fullmatch(score) or not 0 < len(task_id) <= MAX_ID_LENGTH:
            raise ValueError(score)
        return part, (score, task_id)
    except (ValueError, binascii.Error):
        raise ValueError(f"not a cursor that a page of tasks gave: {short(cursor)}") from None


def browse_call(
    keys: QueueKeys,
    state: str,
    *,
    ascending: bool,
    after: tuple[str, str] | None,
    limit: int,
    job: str | None,
    examine: int = EXAMINE,
    in_set: str | None = None,
    search: str = "",
    kind: str = "",
) -> Call[reads.BrowseReply]:
    """The call that reads one page (its arguments already checked): ``limit`` rows at
    most, looking at ``examine`` ids at most (never fewer than ``limit``), of ``in_set``
    (one of state_sets; default: state_set)."""
    return reads.browse(
        keys, in_set or state_set(keys, state), ascending=ascending, after=after, limit=limit,
        examine=max(limit, examine), job=job or "", cut=CUT * 4,  # (bytes: 4 per character)
        search=search, kind=kind, state="succeeded" if state == "succeeded" else "",
    )  # fmt: skip


def _page_procedure(
    queue: str,
    state: str,
    settings: config.Settings,
    newest_first: bool,
    cursor: str | None,
    limit: int,
    job: str | None,
    search: str | None = None,
    kind: str | None = None,
) -> Procedure[TaskPage]:
    """The arguments of :func:`tasks`, checked before any I/O, and the procedure of the page."""
    keys = queue_keys(settings.prefix, check_queue_name(queue))
    check_state(state, LISTED)
    if not isinstance(newest_first, bool):
        raise TypeError(f"newest_first must be a bool, got {type(newest_first).__name__}")
    check_limit(limit, MAX_PAGE)
    part, after = (0, None) if cursor is None else decode_part_cursor(cursor)
    sets = state_sets(keys, state)
    if newest_first:
        sets.reverse()  # (newest first: the grouped tasks, then waiting's, each newest first)
    if part >= len(sets):
        raise ValueError(f"not a cursor that a page of {state} tasks gave: {short(cursor)}")
    job = None if job is None else check_job(job)
    search = "" if search is None else check_search(search)
    if kind not in (None, "", "retrying", "delayed"):
        raise ValueError(f"kind must be retrying or delayed, got {short(kind)}")

    def call(index: int, position: tuple[str, str] | None, rows: int) -> Call[Any]:
        return browse_call(
            keys, state, ascending=not newest_first, after=position, limit=rows, job=job,
            in_set=sets[index], search=search, kind=kind or "",
        )  # fmt: skip

    return _page(call, sets, part, after, limit, queue, state)


def _page(
    call: Any, sets: list[str], part: int, after: tuple[str, str] | None, limit: int,
    queue: str, state: str,
) -> Procedure[TaskPage]:  # fmt: skip
    """A page that goes on into the state's next set when one ends before the page does
    (waiting: the groups' ready tasks); the total counts every set."""
    others = [commands.set_size(key) for i, key in enumerate(sets) if i != part]
    reply, *sizes = raised((yield [call(part, after, limit), *others]))
    rows = [task_row(queue, state, row) for row in reply.rows]
    total = reply.total + sum(sizes)
    looked = reply.looked
    cursor = encode_cursor(reply.cursor, part)
    while cursor is None and part + 1 < len(sets) and len(rows) < limit:
        part += 1
        reply = raised((yield [call(part, None, limit - len(rows))]))[0]
        rows += [task_row(queue, state, row) for row in reply.rows]
        looked += reply.looked
        cursor = encode_cursor(reply.cursor, part)
    if cursor is None and part + 1 < len(sets):  # (this page ends where a set ends)
        cursor = _start_of(part + 1)
    return TaskPage(rows, total, cursor, looked)


def _start_of(part: int) -> str:
    """The cursor of the start of the ``part``-th set of a state (part >= 1)."""
    return base64.urlsafe_b64encode(b"~" * part).decode().rstrip("=")


def task_row(queue: str, state: str, row: reads.BrowsedRow) -> TaskRow:
    """A row of browse.lua's reply as a listing shows it."""
    enqueued = number(row.enqueue_time, -1)
    at = float(row.score)
    if state == "waiting" and math.isfinite(at):  # (its score holds its priority too:
        at = ready_ms(at)  # _redis/priority.py)
    return TaskRow(
        id=row.id, queue=queue, job=row.type, state=state, at=at / 1000,
        enqueued_at=None if enqueued < 0 else enqueued / 1000,
        retry_count=number(row.retry_count), last_error=row.last_error[:CUT],
        params=shown_params(row.params)[:CUT], priority=number(row.priority), group=row.group,
    )  # fmt: skip


def _find_procedure(
    queue: str, task_id: str, settings: config.Settings
) -> Procedure[TaskRow | None]:
    keys = queue_keys(settings.prefix, check_queue_name(queue))
    check_id(task_id)
    return _find(keys, task_id)


def _find(keys: QueueKeys, task_id: str) -> Procedure[TaskRow | None]:
    calls: list[Call[Any]] = [commands.read_row(keys, task_id)]
    places = [(state, key) for state in STATES for key in state_sets(keys, state)]
    calls += [commands.set_score(key, task_id) for _, key in places]
    fields, *scores = yield calls
    for reply in (fields, *scores):
        if isinstance(reply, Exception):
            raise reply
    if not fields:
        return None
    found = [(s, score) for (s, _), score in zip(places, scores, strict=True) if score is not None]
    # In no set: succeeded (or between the sets of a script that failed half-way).
    state, at = found[0] if found else (fields.get("state", ""), number(fields.get("finished_at")))
    row = reads.BrowsedRow(
        task_id, str(at), fields.get("type", ""), fields.get("enqueue_time", ""),
        fields.get("retry_count", ""), fields.get("last_error", ""), fields.get("params", ""),
        fields.get("priority", ""), fields.get("group", ""),
    )  # fmt: skip
    return task_row(keys.name, state, row)
