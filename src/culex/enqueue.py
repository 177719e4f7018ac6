"""Enqueuing: one task or many, now, after a delay or at a time, optionally durable.

Described once as a flow (no I/O); ``task.run_sync`` and ``task.run_async`` drive it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from . import config
from ._redis import operations
from ._redis.keys import queue_keys, queues_key
from ._redis.operations import Call, Enqueued
from .errors import ServerError
from .task import Flow, Task, check_id, new_id, run_async, run_sync

if TYPE_CHECKING:
    from .job import QueuedJob

# Bulk enqueue sends this many scripts per round trip.
CHUNK = 1000
# How long a durable enqueue waits for the server to confirm the fsync.
DURABLE_TIMEOUT_MS = 5000
DURABLE_WAIT = DURABLE_TIMEOUT_MS / 1000  # (the same in seconds: how long the call blocks)

# Queues this process has already added to the queue registry set (saves a command).
_registered: set[tuple[str | None, str, str]] = set()


def enqueue_many(
    jobs: Iterable[QueuedJob],
    *,
    delay: timedelta | float | None = None,
    at: datetime | None = None,
) -> list[Task]:
    """Enqueue many job objects in few round trips (1,000 per pipeline); returns their tasks."""
    return run_sync(enqueue_flow(_checked(jobs), delay, at))  # type: ignore[no-any-return]


async def aenqueue_many(
    jobs: Iterable[QueuedJob],
    *,
    delay: timedelta | float | None = None,
    at: datetime | None = None,
) -> list[Task]:
    """The async twin of :func:`enqueue_many`."""
    return await run_async(enqueue_flow(_checked(jobs), delay, at))  # type: ignore[no-any-return]


def _checked(jobs: Iterable[QueuedJob]) -> list[QueuedJob]:
    from .job import QueuedJob

    if isinstance(jobs, QueuedJob) or not isinstance(jobs, Iterable):
        raise TypeError("enqueue_many() takes an iterable of QueuedJob objects")
    listed = list(jobs)
    for job in listed:
        if not isinstance(job, QueuedJob):
            raise TypeError(f"enqueue_many() takes QueuedJob objects, got {type(job).__name__}")
    return listed


def enqueue_flow(
    jobs: Sequence[QueuedJob],
    delay: timedelta | float | None,
    at: datetime | None,
    task_id: str | None = None,
) -> Flow:
    """Enqueue ``jobs``; the flow's value is their tasks, in order."""
    settings = config.settings()
    due_ms, delay_ms = when(delay, at)
    calls = [
        _call(job, settings, due_ms, delay_ms, new_id() if task_id is None else check_id(task_id))
        for job in jobs
    ]
    new_queues = [
        q
        for q in dict.fromkeys(job.queue for job in jobs)
        if (settings.redis_url, settings.prefix, q) not in _registered
    ]
    first = [operations.register_queue(queues_key(settings.prefix), q) for q in new_queues]
    tasks: list[Task] = []
    if len(calls) == 1 and not first and not settings.durable_enqueue:
        outcome = yield calls[0]  # the common case: one command, no pipeline
        if outcome.existed and task_id is None:
            outcome = yield from _redraw(jobs[0], settings, due_ms, delay_ms)
        return [Task(outcome.task_id, jobs[0].queue, job=type(jobs[0]))]
    for start in range(0, len(calls), CHUNK):
        replies = yield from _sent([*first, *calls[start : start + CHUNK]], settings)
        done: list[Enqueued] = replies[len(first) :]
        for outcome, job in zip(done, jobs[start:], strict=False):
            if outcome.existed and task_id is None:
                outcome = yield from _redraw(job, settings, due_ms, delay_ms)
            tasks.append(Task(outcome.task_id, job.queue, job=type(job)))
        _registered.update((settings.redis_url, settings.prefix, q) for q in new_queues)
        first = []
    return tasks


def _redraw(job: QueuedJob, settings: config.Settings, due_ms: int | None, delay_ms: int) -> Flow:
    """Enqueue ``job`` again under a new id: the id culex drew for it was taken.

    48 random bits, a counter and the clock make that all but impossible, short of a
    fork that copied this process's random state without reseeding it. But a taken id
    leaves the server's task as it was, and this job would be lost: so draw again.
    """
    while True:
        call = _call(job, settings, due_ms, delay_ms, new_id())
        outcome: Enqueued = (yield from _sent([call], settings))[0]
        if not outcome.existed:
            return outcome


def _sent(calls: list[Call[Any]], settings: config.Settings) -> Flow:
    """Send ``calls`` in one round trip, with the fsync check behind them when
    ``durable_enqueue`` asks for it; the value is their replies. A refused call raises.

    The fsync check's reply is read first: a server without WAITAOF refuses it, and then
    a replica's WAIT is asked for instead (``_confirm``), not the refusal raised.
    """
    if not settings.durable_enqueue:
        replies = yield calls
    else:
        replies = yield [*calls, _durable()]
        yield from _confirm(replies.pop())
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def _call(
    job: QueuedJob, settings: config.Settings, due_ms: int | None, delay_ms: int, task_id: str
) -> Call[Enqueued]:
    params = job.params_json()
    # A character takes at most 4 bytes: most params are measured without encoding them.
    if len(params) * 4 > settings.max_payload_bytes:
        size = len(params.encode("utf-8", "surrogatepass"))
        if size > settings.max_payload_bytes:
            raise ValueError(
                f"{type(job).__name__}: params take {size} bytes, more than "
                f"max_payload_bytes ({settings.max_payload_bytes})"
            )
    return operations.enqueue(
        queue_keys(settings.prefix, job.queue),
        task_id,
        type(job).__name__,
        params,
        due_ms=due_ms,
        delay_ms=delay_ms,
        max_retries=job.max_retries,
    )


def _durable() -> Call[Any]:
    # WAITAOF 1 0: wait until the server has fsynced every write so far to its AOF.
    return Call((), ("WAITAOF", 1, 0, DURABLE_TIMEOUT_MS), lambda reply: reply, blocks=DURABLE_WAIT)


def _confirm(reply: Any) -> Flow:
    """Check the WAITAOF reply; on a server without WAITAOF, wait for a replica instead."""
    if isinstance(reply, ServerError) and "unknown command" in str(reply).lower():
        replicas = yield Call((), ("WAIT", 1, DURABLE_TIMEOUT_MS), int, blocks=DURABLE_WAIT)
        if replicas < 1:
            raise ServerError("durable_enqueue: no replica confirmed the write in time")
        return
    if isinstance(reply, ServerError):
        raise ServerError(
            f"durable_enqueue: the server cannot confirm an fsync ({reply}); turn on "
            "appendonly, or set durable_enqueue=False"
        )
    if not reply or int(reply[0]) < 1:
        raise ServerError("durable_enqueue: the server did not fsync the write in time")


def when(delay: timedelta | float | None, at: datetime | None) -> tuple[int | None, int]:
    """(absolute due ms or None, delay ms) from enqueue's ``delay`` / ``at``."""
    if delay is not None and at is not None:
        raise TypeError("enqueue() takes delay= or at=, not both")
    if at is not None:
        if not isinstance(at, datetime):
            raise TypeError(f"at= must be a datetime, got {type(at).__name__}")
        if at.tzinfo is None or at.utcoffset() is None:
            raise TypeError("at= must be a timezone-aware datetime (e.g. tzinfo=timezone.utc)")
        return round(at.timestamp() * 1000), 0
    if delay is None:
        return None, 0
    return None, round(config.seconds(delay, "delay=") * 1000)
