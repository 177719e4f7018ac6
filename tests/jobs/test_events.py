"""The task event stream (docs/events.md): each kind written by the script that makes the
change, with its attempt, no params or results; read from now, from a position, or from
all that is kept; a trimmed position told; follow ends on its timeout; task.watch ends
with the task; events off write nothing."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime, timedelta

import pytest
import redis

import culex
from culex.jobs.events import Event

from ..conftest import running

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)

STREAM = "culex:{evq}:events"


class EventsOkJob(culex.QueuedJob):
    queue = "evq"
    secret: str = ""

    def perform(self) -> str:
        return "the-result-" + self.secret


class EventsFlakyJob(culex.QueuedJob):
    """Fails its first attempt, succeeds the second."""

    queue = "evq"
    max_retries = 1

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(0)

    def perform(self) -> None:
        if self.attempt < 2:
            raise RuntimeError("first attempt fails")


class EventsDoomedJob(culex.QueuedJob):
    queue = "evq"
    max_retries = 0

    def perform(self) -> None:
        raise RuntimeError("always")


def kinds(found: list[Event], task: culex.Task) -> list[tuple[str, int]]:
    return [(e.kind, e.attempt) for e in found if e.task_id == task.id]


def everything(queue: str = "evq") -> list[Event]:
    return list(culex.events([queue], since="0", follow=False))


@pytest.fixture
def on(r: redis.Redis) -> redis.Redis:
    culex.configure(events=True)
    return r


async def test_each_kind_comes_from_its_script_with_its_attempt(on: redis.Redis) -> None:
    ok = EventsOkJob(secret="s3cr3t").enqueue()
    flaky = EventsFlakyJob().enqueue()
    doomed = EventsDoomedJob().enqueue()
    later = EventsOkJob().enqueue(delay=3600)
    assert later.cancel()
    async with running(culex.Runner(run_from=["evq"])):
        assert await ok.aresult(timeout=20) == "the-result-s3cr3t"
        await flaky.aresult(timeout=20)
        with pytest.raises(culex.TaskFailed):
            await doomed.aresult(timeout=20)
    found = everything()
    assert kinds(found, ok) == [("enqueued", 0), ("started", 1), ("succeeded", 1)]
    assert kinds(found, flaky) == [
        ("enqueued", 0), ("started", 1), ("failed", 1), ("started", 2), ("succeeded", 2),
    ]  # fmt: skip
    assert kinds(found, doomed) == [("enqueued", 0), ("started", 1), ("dead", 1)]
    assert kinds(found, later) == [("enqueued", 0), ("dead", 0)]
    first = found[0]
    assert (first.queue, first.job, first.task_id) == ("evq", "EventsOkJob", ok.id)
    assert first.at.tzinfo is UTC and abs(first.at - datetime.now(UTC)) < timedelta(hours=1)
    assert [e.id for e in found] == sorted(e.id for e in found)
    # payload-free: neither the params nor the result is in any entry
    entries: list[tuple[bytes, dict[bytes, bytes]]] = on.xrange(STREAM)  # type: ignore[assignment]
    for _, fields in entries:
        assert set(fields) == {b"task", b"job", b"kind", b"attempt"}
        assert not any(b"s3cr3t" in value for value in fields.values())


def test_events_off_write_nothing(r: redis.Redis) -> None:
    task = EventsOkJob().enqueue()
    assert task.cancel()
    assert not r.exists(STREAM)
    assert everything() == []


async def test_watch_with_events_off_says_so_rather_than_nothing(r: redis.Redis) -> None:
    task = EventsOkJob().enqueue()  # (events off: its queue has no stream)
    with pytest.raises(culex.EventsOff, match=r"events are off for queue 'evq'.*CULEX_EVENTS=1"):
        list(task.watch(timeout=0.2))
    with pytest.raises(culex.EventsOff) as off:
        [e async for e in task.awatch(timeout=0.2)]
    assert off.value.queue == "evq"
    # A process with events on that changed a task of the queue: the stream says so to all.
    culex.configure(events=True)
    EventsOkJob().enqueue()
    culex.configure(events=False)
    assert [e.kind for e in task.watch(timeout=0.2)] == []  # (its own enqueue wrote none)


def test_since_resumes_after_an_id_and_none_starts_from_now(on: redis.Redis) -> None:
    first = EventsOkJob().enqueue()
    now = culex.events(["evq"], timeout=0.2)
    assert list(now) == []  # (from now: from when the iteration starts)
    mark = everything()[-1].id
    second = EventsOkJob().enqueue()
    assert [e.task_id for e in culex.events(["evq"], since=mark, follow=False)] == [second.id]
    assert [e.task_id for e in everything()] == [first.id, second.id]
    ago = list(culex.events(["evq"], since=timedelta(hours=1), follow=False))
    assert [e.task_id for e in ago] == [first.id, second.id]


def test_a_trimmed_position_is_told(on: redis.Redis) -> None:
    first = EventsOkJob().enqueue()
    mark = everything()[-1].id
    EventsOkJob().enqueue()
    on.xtrim(STREAM, maxlen=1, approximate=False)  # (as trimming by count or age does)
    with pytest.raises(culex.EventsTrimmed) as trimmed:
        list(culex.events(["evq"], since=mark, follow=False))
    assert trimmed.value.queue == "evq" and trimmed.value.since == mark
    assert trimmed.value.oldest == everything()[0].id
    assert first.id not in {e.task_id for e in everything()}


def test_a_stream_never_trimmed_tells_nothing(on: redis.Redis) -> None:
    EventsOkJob().enqueue()
    assert len(list(culex.events(["evq"], since="1-0", follow=False))) == 1


def test_follow_waits_for_new_events_and_ends_on_its_timeout(on: redis.Redis) -> None:
    followed = culex.events(["evq", "evq-other"], timeout=0.2)
    assert list(followed) == []  # nothing came within the timeout: the iteration ended
    waiting = culex.events(["evq", "evq-other"], since="0", timeout=30)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(next, waiting)  # (blocks in the follow's read, or catches up)
        task = EventsOkJob().enqueue()
        event = first.result(timeout=30)
    assert (event.task_id, event.kind) == (task.id, "enqueued")


async def test_aevents_follows_and_ends(on: redis.Redis) -> None:
    task = await EventsOkJob().aenqueue()
    found = [e async for e in culex.aevents(["evq"], since="0", timeout=0.2)]
    assert [(e.task_id, e.kind) for e in found] == [(task.id, "enqueued")]


async def test_task_watch_ends_after_succeeded_or_dead(on: redis.Redis) -> None:
    ok = EventsOkJob().enqueue()
    doomed = EventsDoomedJob().enqueue()
    async with running(culex.Runner(run_from=["evq"])):
        watched = await asyncio.to_thread(lambda: [e.kind for e in ok.watch(timeout=20)])
        assert watched == ["enqueued", "started", "succeeded"]
        seen = [e.kind async for e in doomed.awatch(timeout=20)]
    assert seen == ["enqueued", "started", "dead"]


async def test_watch_of_a_task_retried_from_dead_follows_its_new_run(on: redis.Redis) -> None:
    doomed = EventsDoomedJob().enqueue()
    assert doomed.cancel()
    assert [e.kind for e in doomed.watch(timeout=5)] == ["enqueued", "dead"]
    assert doomed.retry()
    async with running(culex.Runner(run_from=["evq"])):
        seen = [(e.kind, e.attempt) async for e in doomed.awatch(timeout=20)]
    assert seen == [("started", 1), ("dead", 1)]


async def test_watch_of_a_task_that_stays_waiting_ends_on_its_timeout(on: redis.Redis) -> None:
    task = EventsOkJob().enqueue(delay=3600)
    assert [e.kind for e in task.watch(timeout=0.2)] == ["enqueued"]
    assert [e.kind async for e in task.awatch(timeout=0.2)] == ["enqueued"]


async def test_recent_events_are_the_newest_first(on: redis.Redis) -> None:
    tasks = [EventsOkJob().enqueue() for _ in range(3)]
    assert [e.task_id for e in culex.recent_events("evq", 2)] == [tasks[2].id, tasks[1].id]
    found = await culex.arecent_events("evq")
    assert [e.task_id for e in found] == [t.id for t in reversed(tasks)]
    assert culex.recent_events("evq-none") == []
    for bad in (0, 10_001, True):
        with pytest.raises(ValueError):
            culex.recent_events("evq", bad)


def test_bad_arguments_are_refused_before_any_io(on: redis.Redis) -> None:
    with pytest.raises(TypeError):
        culex.events("evq")
    with pytest.raises(ValueError):
        culex.events([])
    with pytest.raises(ValueError):
        culex.events(["evq"], since="yesterday")
    with pytest.raises(ValueError):
        culex.events(["evq"], since=datetime(2026, 1, 1))
    with pytest.raises(ValueError):
        culex.events(["a{b}"])
    with pytest.raises(culex.ConfigurationError):
        culex.events(["evq"], timeout=-1)
    with pytest.raises(TypeError):
        culex.events(["evq"], since=5)  # type: ignore[arg-type]
