"""Reads that go through a script: a page of a state's tasks (browse), a task's end (wait,
which marks a task still running as waited for), a periodic job's record, and what a scrape
reads of every queue. Each builds a :class:`~culex._redis.calls.Call`; no I/O here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, NamedTuple

from . import scripts
from .calls import Call, shown, text
from .keys import QueueKeys


class BrowsedRow(NamedTuple):
    """A task as browse.lua reads it: fields as stored, last_error and params cut."""

    id: str
    score: str
    type: str
    enqueue_time: str
    retry_count: str
    last_error: str
    params: str
    priority: str = ""  # (a reply of browse.lua before priorities has none)
    group: str = ""  # (nor one before groups)


class BrowseReply(NamedTuple):
    """One page: the set's size, how many ids it looked at, the cursor (score, id) to go on
    from (None: the set holds no more), the rows."""

    total: int
    looked: int
    cursor: tuple[str, str] | None
    rows: list[BrowsedRow]


def _parse_browse(reply: list[Any]) -> BrowseReply:
    score, last = text(reply[2]), text(reply[3])
    # (the id as stored, an address; the fields as read: not UTF-8 as U+FFFD)
    rows = [BrowsedRow(text(row[0]), *(shown(v) for v in row[1:])) for row in reply[4:]]
    return BrowseReply(int(reply[0]), int(reply[1]), (score, last) if last else None, rows)


def browse(
    keys: QueueKeys,
    state_set: str,
    *,
    ascending: bool,
    after: tuple[str, str] | None,
    limit: int,
    examine: int,
    job: str,
    cut: int,
    search: str = "",
    kind: str = "",
    state: str = "",
) -> Call[BrowseReply]:
    """A page of ``state_set`` (one of ``keys``' four sets) from the cursor ``after``; with
    ``job``, only its tasks, with ``search`` only those whose id begins with it or whose
    type, params or last_error holds it, with ``kind`` ("retrying" or "delayed") only
    those that failed or stalled before (or not), with ``state`` only those whose hash
    says it, looking at ``examine`` ids at most. Writes nothing."""
    score, last = after if after is not None else ("", "")
    tail: tuple[str, ...] = ()  # (optional: a call as before them)
    if search or kind or state:
        tail = (search, kind, state) if state else (search, kind)
    return Call(
        (state_set, keys.task_prefix),
        ("asc" if ascending else "desc", score, last, limit, examine, job, cut, *tail),
        _parse_browse,
        scripts.BROWSE,
    )


# -- waiting for a task's end: no polling ----------------------------------------------


class End(NamedTuple):
    """What wait read: the task's state ("" when it has no hash) and the fields of its end."""

    state: str
    result: str | None
    last_error: str
    type: str

    @property
    def finished(self) -> bool:
        """Succeeded, dead, or no record: nothing more to wait for."""
        return self.state in ("succeeded", "dead", "")


def _parse_end(reply: list[bytes | None]) -> End:
    state, result, last_error, job_type = reply
    return End(
        text(state), None if result is None else text(result), text(last_error), text(job_type)
    )


def wait(keys: QueueKeys, task_id: str) -> Call[End]:
    """Read a task's end; while it has none, mark the task waited so that its end wakes
    the done list (see ``block_until_done``)."""
    return Call((keys.task(task_id), keys.done(task_id)), (), _parse_end, scripts.WAIT)


# -- periodic jobs' records and the scrape ---------------------------------------------


class PeriodicRead(NamedTuple):
    """A periodic job's record ({} when it has expired) and its last task's state ("")."""

    record: dict[str, str]
    last_state: str


def _parse_periodic_read(reply: list[Any]) -> PeriodicRead:
    fields = reply[0]
    record = {text(fields[i]): shown(fields[i + 1]) for i in range(0, len(fields), 2)}
    return PeriodicRead(record, shown(reply[1]))


def read_periodic(keys: QueueKeys, job_type: str) -> Call[PeriodicRead]:
    """A periodic job's record with the state of its last task: one call, no class needed."""
    return Call(
        (keys.periodic(job_type), keys.task_prefix),
        (),
        _parse_periodic_read,
        scripts.READ_PERIODIC,
    )


def read_queues(bases: Sequence[str]) -> Call[list[Any]]:
    """What a scrape reads of each queue whose keys start with one of ``bases``
    (keys.queue_base), in one call: the flat reply of read_queues.lua, as it is (its reader,
    culex.metrics, walks it without a list per queue). On a Cluster, one base a call."""
    return Call(tuple(bases), (), _as_read, scripts.READ_QUEUES)


def _as_read(reply: list[Any]) -> list[Any]:
    return reply
