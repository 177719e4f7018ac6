"""The task event stream: what happened to the tasks of some queues, as it happens.

With the setting ``events`` on, each script that changes a task's state adds one entry to
its queue's stream in the same call (include/events.lua): enqueued, started, succeeded,
failed (an attempt failed, another comes) or dead. :func:`events` reads them, from now
or from a position (an event's id), and follows new ones; a position older than the
oldest event kept raises :class:`EventsTrimmed`. docs/events.md tells the whole story.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Generator, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from .. import config
from .._redis import commands, streams
from .._redis.calls import Call
from .._redis.keys import check_queue_name, queue_keys
from ..errors import CulexError, short
from ..server import configured
from ..server.procedures import Procedure, one_call, raised, run_async, run_sync

KINDS = ("enqueued", "started", "succeeded", "failed", "dead")
"""The kinds of event, in the order a task's events come."""
ENDS = frozenset(("succeeded", "dead"))
"""The kinds that end a task."""
# A task's events that, up to its retry out of dead's ms, are its run before the retry (a
# retry writes no event, and its new run's first is "started").
_BEFORE_RETRY = ENDS | {"enqueued"}
BATCH = 500  # entries read per stream and round trip
BLOCK_CHUNK = 5.0  # the longest one blocking read waits (a wait for ever is many)
# On a cluster each queue's stream has its own slot: several queues are followed by
# short blocking reads, one queue after the other, each round at most this long.
CLUSTER_ROUND = 0.1


@dataclass(frozen=True, slots=True)
class Event:
    """One change of a task's state. ``id`` is its place in its queue's stream
    ("<ms>-<seq>": pass it as ``since`` to resume after it); ``at`` is the server's time
    when the change was made (an aware UTC datetime, from the id); ``attempt`` is the
    attempt the change is about (0: enqueued, or dead before it ever ran)."""

    id: str
    queue: str
    task_id: str
    job: str
    kind: str
    attempt: int
    at: datetime


class EventsTrimmed(CulexError, LookupError):
    """The position asked for (``since``) is older than the oldest event ``queue`` keeps:
    events after it may have been trimmed (by count or by age) and are lost. ``oldest`` is
    the id of the oldest event kept: resume from there with ``since="0"`` (all that is
    kept) or from now with ``since=None``."""

    def __init__(self, queue: str, since: str, oldest: str) -> None:
        super().__init__(
            f"the events of queue {queue!r} after {since} were trimmed: the oldest kept "
            f"is {oldest} (resume with since='0' for all that is kept, or since=None)"
        )
        self.queue = queue
        self.since = since
        self.oldest = oldest


class EventsOff(CulexError, LookupError):
    """Queue ``queue`` has no event stream: no process with events on (producer or runner)
    has changed one of its tasks within the stream's age (a day), so events are off for it.
    The stream on the server is what every process can see: a process with events on
    writes it, and a reader knows from it whether any writer had them on."""

    def __init__(self, queue: str) -> None:
        super().__init__(f"events are off for queue {queue!r}: {EVENTS_OFF_HINT}")
        self.queue = queue


EVENTS_OFF_HINT = (
    "no producer or runner with events on has changed one of its tasks within a day, so "
    "its event stream is empty; turn them on in every process that enqueues or runs tasks: "
    "culex.configure(events=True), CULEX_EVENTS=1, or culex run --events"
)

Since = str | datetime | timedelta | None


def events(
    queues: Iterable[str],
    since: Since = None,
    follow: bool = True,
    timeout: float | None = 1.0,
    *,
    settings: config.Settings | None = None,
) -> Iterator[Event]:
    """The events of ``queues``, oldest first.

    ``since``: an event's id (the events after it), "0" (every event kept), a datetime or a
    timedelta (the events since then, or since that long ago), or None (from now on).
    ``follow``: wait for new events once the kept ones are read; ``timeout``: the seconds
    to wait for the next event before the iteration ends (None: for ever). Raises
    :class:`EventsTrimmed` when ``since`` is older than the oldest event kept."""
    settings = settings or config.settings()
    steps = _steps_of(queues, since, follow, timeout, settings.prefix)
    return _sync(steps, settings.redis_url)


def aevents(
    queues: Iterable[str],
    since: Since = None,
    follow: bool = True,
    timeout: float | None = 1.0,
    *,
    settings: config.Settings | None = None,
) -> AsyncIterator[Event]:
    """The async twin of :func:`events`: ``async for event in culex.aevents([...])``."""
    settings = settings or config.settings()
    steps = _steps_of(queues, since, follow, timeout, settings.prefix)
    return _async(steps, settings.redis_url)


def task_events(
    prefix: str, queue: str, task_id: str, timeout: float | None, url: str | None
) -> tuple[Iterator[Event], Callable[[], AsyncIterator[Event]]]:
    """Task.watch and Task.awatch (their arguments checked): the events of one task from
    its enqueue (or its last retry out of dead) on (a stream that lost some since: from its
    oldest kept), ending after its succeeded or dead event, or when none of its events came
    for ``timeout`` s."""
    wait = None if timeout is None else config.seconds(timeout, "timeout")
    keys = queue_keys(prefix, queue)

    def steps(cluster: bool) -> Steps:
        fields, newest = raised(
            (yield [commands.read_task(keys, task_id), streams.newest(keys.events)])
        )
        if newest is None:  # (its own enqueue, with events on, would have written one)
            raise EventsOff(queue)
        # From its enqueue, or from its last retry out of dead: the dead event before that
        # is not its end any more.
        times = [fields.get(name, "") for name in ("enqueue_time", "retried_at")]
        start = max((int(t) for t in times if t.isdigit()), default=0)
        since = f"{start - 1}-0" if start else "0-0"
        retried = fields.get("retried_at", "")
        # (its enqueue and end before the retry may share the retry's ms, or the one before)
        ended_by = int(retried) if retried.isdigit() and int(retried) == start else 0
        yield from _steps(prefix, [queue], since, True, wait, cluster, task_id, ended_by)

    return _sync(steps, url), lambda: _async(steps, url)


def events_off(queues: list[str], prefix: str) -> Procedure[list[str]]:
    """Which of ``queues`` have no event stream: events are off for them (EventsOff)."""
    calls = [streams.newest(queue_keys(prefix, queue).events) for queue in queues]
    newest = raised((yield calls))
    return [queue for queue, last in zip(queues, newest, strict=True) if last is None]


def _sync(steps: Callable[[bool], Steps], url: str | None) -> Iterator[Event]:
    """Drive the steps with blocking I/O, yielding the events they find."""
    driver = configured.sync_driver(url)
    generator = steps(driver.cluster)
    reply = None
    while True:
        try:
            step = generator.send(reply)
        except StopIteration:
            return
        if isinstance(step, Event):
            reply = None
            yield step
        else:
            reply = driver.run_many(step)


async def _async(steps: Callable[[bool], Steps], url: str | None) -> AsyncIterator[Event]:
    """Drive the steps on the running event loop, yielding the events they find."""
    driver = await configured.async_driver(url)
    generator = steps(driver.cluster)
    reply = None
    while True:
        try:
            step = generator.send(reply)
        except StopIteration:
            return
        if isinstance(step, Event):
            reply = None
            yield step
        else:
            reply = await driver.run_many(step)


def recent_events(
    queue: str, limit: int = 100, *, settings: config.Settings | None = None
) -> list[Event]:
    """The newest ``limit`` events of ``queue`` (1 .. 10,000), newest first: one read."""
    settings = settings or config.settings()
    return run_sync(_recent(queue, limit, settings.prefix), settings.redis_url)


async def arecent_events(
    queue: str, limit: int = 100, *, settings: config.Settings | None = None
) -> list[Event]:
    """The async twin of :func:`recent_events` (the dashboard's activity page)."""
    settings = settings or config.settings()
    return await run_async(_recent(queue, limit, settings.prefix), settings.redis_url)


def _recent(queue: str, limit: int, prefix: str) -> Procedure[list[Event]]:
    check_queue_name(queue)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise ValueError(f"limit must be a whole number from 1 to 10000, got {short(limit)}")
    call = streams.latest(queue_keys(prefix, queue).events, limit)
    return one_call(call, lambda entries: [_event(queue, entry) for entry in entries])


Steps = Generator[list[Call[Any]] | Event, Any, None]


def _steps_of(
    queues: Iterable[str], since: Since, follow: bool, timeout: float | None, prefix: str
) -> Callable[[bool], Steps]:
    """Check every argument now (before any I/O), and return the steps' maker, which takes
    whether the driver is a cluster's."""
    if isinstance(queues, str):
        raise TypeError("queues must be a list of queue names, not one str: events(['emails'])")
    names = [check_queue_name(q) for q in queues]
    if not names:
        raise ValueError("events() takes at least one queue")
    if len(set(names)) != len(names):
        raise ValueError(f"a queue is named twice: {short(names, 200)}")
    position = _position(since)
    if not isinstance(follow, bool):
        raise TypeError(f"follow must be True or False, got {short(follow)}")
    wait = None if timeout is None else config.seconds(timeout, "timeout")

    def steps(cluster: bool) -> Steps:
        return _steps(prefix, names, position, follow, wait, cluster)

    return steps


def _position(since: Since) -> str | timedelta | None:
    """``since`` as a stream id, a time ago (timedelta), or None (now)."""
    if since is None or isinstance(since, timedelta):
        if isinstance(since, timedelta) and since < timedelta(0):
            raise ValueError(f"since, a time ago, cannot be negative: {since}")
        return since
    if isinstance(since, datetime):
        if since.tzinfo is None:
            raise ValueError("since, a datetime, must be aware (e.g. datetime.now(UTC))")
        return f"{max(0, int(since.timestamp() * 1000))}-0"
    if not isinstance(since, str):
        raise TypeError(
            f"since must be an event id, a datetime, a timedelta or None: {short(since)}"
        )
    return _id(since)


def _id(text: str) -> str:
    """A stream id checked: "<ms>-<seq>" or "<ms>" (as "<ms>-0")."""
    ms, dash, seq = text.partition("-")
    if not ms.isdigit() or (dash and not seq.isdigit()) or len(text) > 41:
        raise ValueError(f"since must be an event id like 1733100000000-0, got {short(text)}")
    return f"{int(ms)}-{int(seq) if dash else 0}"


def _order(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


def _steps(
    prefix: str,
    names: list[str],
    since: str | timedelta | None,
    follow: bool,
    timeout: float | None,
    cluster: bool,
    task_id: str | None = None,
    ended_by: int = 0,
) -> Steps:
    """The reads, and the events they find, one after the other (see :func:`_sync`). With
    ``task_id``: only that task's events, until its end (a position trimmed meanwhile is
    no error: what is kept is read); an end or an ``enqueued`` at or before ``ended_by``
    (ms) is one from before its retry out of dead, passed over."""
    keys = {queue_keys(prefix, q).events: q for q in names}
    if since is None:  # from now: after each stream's newest entry
        newest = raised((yield [streams.newest(key) for key in keys]))
        positions = {key: found or "0-0" for key, found in zip(keys, newest, strict=True)}
    else:
        if isinstance(since, timedelta):
            now_ms = raised((yield [commands.server_time()]))[0]
            since = f"{max(0, now_ms - int(since.total_seconds() * 1000))}-0"
        positions = dict.fromkeys(keys, since)
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        found = yield from _catch_up(keys, positions, task_id is None)
        if not found:
            left = BLOCK_CHUNK if deadline is None else deadline - time.monotonic()
            if not follow or left <= 0:
                return
            found = yield from _wait(keys, positions, min(left, BLOCK_CHUNK), cluster)
        if ended_by:
            found = [e for e in found if e.kind not in _BEFORE_RETRY or _order(e.id)[0] > ended_by]
        handed, ended = yield from _hand_out(found, task_id)
        if ended:
            return
        if handed and timeout is not None:
            deadline = time.monotonic() + timeout


def _hand_out(found: list[Event], task_id: str | None) -> Generator[Event, Any, tuple[bool, bool]]:
    """Yield the events asked for (every one, or one task's); whether any was, and whether
    the task's end was one."""
    handed = False
    for event in found:
        if task_id is None or event.task_id == task_id:
            handed = True
            yield event
            if task_id is not None and event.kind in ENDS:
                return True, True
    return handed, False


def _wait(
    keys: dict[str, str], positions: dict[str, str], wait: float, cluster: bool
) -> Generator[list[Call[Any]], Any, list[Event]]:
    """One blocking read for entries after the positions, up to ``wait`` s (on a cluster,
    several queues in turns, a short read each: their streams are on their own nodes); the
    events found, oldest first, and the positions moved past them."""
    if cluster and len(keys) > 1:
        share = min(wait, CLUSTER_ROUND) / len(keys)
        calls = [streams.block({k: positions[k]}, BATCH, share) for k in keys]
    else:
        calls = [streams.block(positions, BATCH, wait)]
    replies = raised((yield calls))
    found = [
        _event(keys[key], entry) for reply in replies for key, entries in reply.items()
        for entry in entries
    ]  # fmt: skip
    for key, entries in ((k, e) for reply in replies for k, e in reply.items()):
        if entries:
            positions[key] = entries[-1].id
    return sorted(found, key=lambda e: _order(e.id))


def _catch_up(
    keys: dict[str, str], positions: dict[str, str], strict: bool
) -> Generator[list[Call[Any]], Any, list[Event]]:
    """One read of up to BATCH entries after each position, with what each stream keeps: a
    position older than its oldest entry, in a stream that lost entries, may have missed
    some (EventsTrimmed). Positions move past what was read. The events found, oldest
    first."""
    calls: list[Call[Any]] = []
    for key in keys:
        calls += (streams.kept(key), streams.after(key, positions[key], BATCH))
    replies = yield calls
    found: list[Event] = []
    for i, key in enumerate(keys):
        kept, entries = replies[2 * i], raised([replies[2 * i + 1]])[0]
        if isinstance(kept, Exception):
            if "no such key" not in str(kept):
                raise kept
            kept = streams.Kept(None, False)
        position = positions[key]
        if (
            strict
            and kept.trimmed
            and kept.oldest is not None
            and position != "0-0"
            and _order(kept.oldest) > _order(position)
        ):
            raise EventsTrimmed(keys[key], position, kept.oldest)
        if entries:
            positions[key] = entries[-1].id
            found += (_event(keys[key], entry) for entry in entries)
    return sorted(found, key=lambda e: _order(e.id))


def _event(queue: str, entry: streams.Entry) -> Event:
    fields = entry.fields
    attempt = fields.get("attempt", "0")
    return Event(
        id=entry.id,
        queue=queue,
        task_id=fields.get("task", ""),
        job=fields.get("job", ""),
        kind=fields.get("kind", ""),
        attempt=int(attempt) if attempt.isdigit() else 0,
        at=datetime.fromtimestamp(_order(entry.id)[0] / 1000, UTC),
    )
