"""Enqueuing: one task or many, now, after a delay or at a time, optionally durable.

Described once as a procedure (no I/O); ``procedures.run_sync`` and
``procedures.run_async`` drive it. ``QueuedJob.enqueue`` and ``enqueue_many`` (in
``job.py``, beside the job) start it.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Protocol

from .. import config, tracing
from .._redis import commands, enqueuing
from .._redis.calls import Call
from .._redis.enqueuing import Enqueued
from .._redis.keys import queue_keys, queues_key
from ..errors import ServerError
from ..middleware.hooks import enqueue_parts
from ..server.compatibility import warn_of_older
from ..server.procedures import Procedure
from .batches import Batch
from .durability import Confirm, confirmation, sent
from .enqueue_options import (
    NO_CONTROL,
    FlowControl,
    check_dedupe_key,
    check_group,
    check_priority,
    dedupe_for_ms,
    expires_ms,
    when,
)
from .task import ResultTyped, Task, check_id, new_id

# Bulk enqueue sends this many scripts per round trip.
CHUNK = 1000

# Queues this process has already added to the queue registry set (saves a command).
_registered: set[tuple[str | None, str, str]] = set()


class Enqueueable(ResultTyped, Protocol):
    """What an enqueue reads of a job object (a ``QueuedJob``): its class's queue, task type,
    retries and priority, and its params as stored; its class is its task's ``job``."""

    @property
    def queue(self) -> str: ...

    @property
    def type_(self) -> str: ...

    @property
    def max_retries(self) -> int: ...

    @property
    def priority(self) -> int: ...

    @property
    def expires(self) -> float | timedelta | None: ...

    @property
    def dedupe_for(self) -> float | timedelta | None: ...

    def params_json(self) -> str: ...


def enqueue_procedure(
    jobs: Sequence[Enqueueable],
    delay: timedelta | float | None,
    at: datetime | None,
    task_id: str | None = None,
    *,
    priority: int | None = None,
    dedupe_key: str | None = None,
    group: str | None = None,
    batch: Batch | None = None,
    expires: timedelta | float | None = None,
    dedupe_for: timedelta | float | None = None,
) -> Procedure[list[Task]]:
    """Enqueue ``jobs``; the procedure's value is their tasks, in order. ``priority`` overrides
    each job's class's; ``dedupe_key`` takes one job; ``group``: every task's group;
    ``batch``: the jobs' ids (and dedupe keys), and where the stored ones are noted as their
    replies come; ``expires``: every task's expiry from now, instead of its class's;
    ``dedupe_for``: the window of every task with a dedupe key, instead of its class's."""
    if (
        priority is None
        and dedupe_key is None
        and group is None
        and expires is None
        and dedupe_for is None
    ):
        control = NO_CONTROL  # (the common case: no object made)
    else:
        control = FlowControl(
            None if priority is None else check_priority(priority),
            "" if dedupe_key is None else check_dedupe_key(dedupe_key),
            "" if group is None else check_group(group),
            None if expires is None else expires_ms(expires, "expires="),
            None if dedupe_for is None else dedupe_for_ms(dedupe_for),
        )
    if control.dedupe_key and len(jobs) != 1:
        raise TypeError("dedupe_key= names one task: enqueue one job with it")
    if dedupe_for is not None and not (control.dedupe_key or (batch and batch.dedupe_keys)):
        raise TypeError("dedupe_for= is the window of a dedupe key: give dedupe_key= too")
    if tracing.in_span():  # made inside a span: a span of its own (tracing.py)
        with _producing(jobs) as producing:
            tasks = yield from _enqueue(jobs, delay, at, task_id, producing.field, control, batch)
            producing.sent(tasks[0].id if len(tasks) == 1 else "")
    else:  # (nothing to trace: no trace field, nothing to end)
        tasks = yield from _enqueue(jobs, delay, at, task_id, "", control, batch)
    if control.group:  # (at most once a minute per queue: compatibility.py)
        queues = list(dict.fromkeys(job.queue for job in jobs))
        yield from warn_of_older(
            config.settings(),
            queues,
            "groups: a grouped task they reclaim or hand back may run past its group's limits",
            recheck=True,
        )
    return tasks


def lone_call(job: Enqueueable, options: tuple[object, ...]) -> Call[Enqueued] | None:
    """The call of the most common enqueue, built without a procedure to drive: one job,
    no ``options`` (enqueue's keyword arguments, all None), to a queue this process has
    registered, not durable, not traced. None when any of that is not so: then
    ``enqueue_procedure`` does it all, as it does when the reply says the drawn id was
    taken (nothing was stored: the procedure draws another). A procedure's two generators
    and their driving cost a tenth of a producer's own instructions per enqueue."""
    if options != _NO_OPTIONS:
        return None
    settings = config.settings()
    if not _one_command(settings, job.queue) or tracing.in_span():
        return None
    return _call(job, settings, None, 0, new_id(), "", NO_CONTROL, True)


_NO_OPTIONS = (None,) * 8


def _one_command(settings: config.Settings, queue: str) -> bool:
    """Whether one job's enqueue to ``queue`` is a single command: not durable (no check
    behind it) and to a queue this process has registered (no SADD before it)."""
    return (
        not settings.durable_enqueue and (settings.redis_url, settings.prefix, queue) in _registered
    )


def _producing(jobs: Sequence[Enqueueable]) -> tracing.Producing:
    """The PRODUCER span of an enqueue of ``jobs``, named by their types and queue."""
    queues = {job.queue for job in jobs}
    queue = next(iter(queues)) if len(queues) == 1 else ""
    return tracing.Producing(sorted({job.type_ for job in jobs}), queue, len(jobs))


def _enqueue(
    jobs: Sequence[Enqueueable],
    delay: timedelta | float | None,
    at: datetime | None,
    task_id: str | None,
    trace: str,
    control: FlowControl,
    batch: Batch | None = None,
) -> Procedure[list[Task]]:
    settings = config.settings()
    due_ms, delay_ms = when(delay, at)
    given = None if task_id is None else check_id(task_id)
    # the common case: one job to a known queue, one command, no pipeline
    if batch is None and len(jobs) == 1 and _one_command(settings, jobs[0].queue):
        job = jobs[0]
        task_id = given or new_id()
        call = _call(job, settings, due_ms, delay_ms, task_id, trace, control, given is None)
        outcome = yield call
        if outcome.existed and given is None:
            outcome = yield from _redraw(job, settings, due_ms, delay_ms, None, trace, control)
        return [task_of(outcome, job)]
    # (no Batch for an enqueue that gave none: a lone enqueue makes no object of it)
    ids = batch.ids if batch is not None else [given or new_id() for _ in jobs]
    ids_given = batch.given if batch is not None else given is not None
    controls = [control] * len(jobs) if batch is None else batch.controls(control)
    calls = [
        _call(job, settings, due_ms, delay_ms, task_id, trace, asked, not ids_given)
        for job, task_id, asked in zip(jobs, ids, controls, strict=True)
    ]
    new_queues = [
        q
        for q in dict.fromkeys(job.queue for job in jobs)
        if (settings.redis_url, settings.prefix, q) not in _registered
    ]
    first = [commands.register_queue(queues_key(settings.prefix), q) for q in new_queues]
    tasks: list[Task] = []
    confirm = (yield from confirmation(settings)) if settings.durable_enqueue else None
    for start in range(0, len(calls), CHUNK):
        replies = yield from sent([*first, *calls[start : start + CHUNK]], confirm, "return")
        refused = next((r for r in replies[: len(first)] if isinstance(r, Exception)), None)
        done: list[Enqueued | ServerError] = replies[len(first) :]
        for i, (outcome, job) in enumerate(zip(done, jobs[start:], strict=False), start):
            if isinstance(outcome, Exception):
                refused = refused or outcome  # (the rest of the chunk is still noted)
                continue
            if outcome.existed and not ids_given:
                outcome = yield from _redraw(
                    job, settings, due_ms, delay_ms, confirm, trace, controls[i]
                )
            tasks.append(task_of(outcome, job))
            if batch is not None:
                batch.stored[i] = tasks[-1]
        if refused is not None:
            raise refused
        _registered.update((settings.redis_url, settings.prefix, q) for q in new_queues)
        first = []
    return tasks


def task_of(outcome: Enqueued, job: Enqueueable) -> Task:
    """The handle on the task an enqueue of ``job`` stored (or found)."""
    return Task(outcome.task_id, job.queue, job=type(job), deduped=outcome.deduped)


def _redraw(
    job: Enqueueable,
    settings: config.Settings,
    due_ms: int | None,
    delay_ms: int,
    confirm: Confirm | None,
    trace: str,
    control: FlowControl,
) -> Procedure[Enqueued]:
    """Enqueue ``job`` again under a new id: the id culex drew for it was taken.

    48 random bits, a counter and the clock make that all but impossible, short of a
    fork that copied this process's random state without reseeding it. But a taken id
    leaves the server's task as it was, and this job would be lost: so draw again.
    """
    while True:
        call = _call(job, settings, due_ms, delay_ms, new_id(), trace, control, drawn=True)
        outcome: Enqueued = (yield from sent([call], confirm))[0]
        if not outcome.existed:
            return outcome


def checked_params(job: Enqueueable, settings: config.Settings) -> str:
    """``job``'s params as stored; ValueError when they take more than max_payload_bytes."""
    params = job.params_json()
    # A character takes at most 4 bytes: most params are measured without encoding them.
    if len(params) * 4 > settings.max_payload_bytes:
        size = len(params.encode("utf-8", "surrogatepass"))
        if size > settings.max_payload_bytes:
            raise ValueError(
                f"{type(job).__name__}: params take {size} bytes, more than "
                f"max_payload_bytes ({settings.max_payload_bytes})"
            )
    return params


def _call(
    job: Enqueueable,
    settings: config.Settings,
    due_ms: int | None,
    delay_ms: int,
    task_id: str,
    trace: str,
    control: FlowControl,
    drawn: bool,
) -> Call[Enqueued]:
    """The call that enqueues ``job`` as ``task_id`` (``drawn``: by culex, never used)."""
    params = checked_params(job, settings)
    headers = ""
    if settings.middleware:  # (none: the common case costs this check)
        params, headers = enqueue_parts(settings, job, task_id, params)
    return enqueuing.enqueue(
        queue_keys(settings.prefix, job.queue),
        task_id,
        job.type_,
        params,
        due_ms=due_ms,
        delay_ms=delay_ms,
        max_retries=job.max_retries,
        trace=trace,
        priority=job.priority if control.priority is None else control.priority,
        dedupe_key=control.dedupe_key,
        group=control.group,
        drawn=drawn,
        expires_ms=(
            control.expires_ms
            if control.expires_ms is not None or job.expires is None
            else expires_ms(job.expires, f"{type(job).__name__}.expires")
        ),
        dedupe_for_ms=(
            None
            if not control.dedupe_key
            else control.dedupe_for_ms
            if control.dedupe_for_ms is not None or job.dedupe_for is None
            else dedupe_for_ms(job.dedupe_for, f"{type(job).__name__}.dedupe_for")
        ),
        events=settings.events,
        headers=headers,
    )
