"""Jobs: classes of code that run many times. ``QueuedJob`` runs on demand.

Params are class annotations (Mosquito's ``params`` macro): a typed keyword constructor is
built from them, checked when the job object is made, before anything reaches Redis.
"""

from __future__ import annotations

import copy
import logging
import typing
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any, NoReturn

from .. import config
from .._redis.priority import check_delay_ms
from ..errors import JobFailure, ServerError, short
from ..server.configured import run_one, sync_driver
from ..server.procedures import run_async, run_sync
from .batches import Batch
from .declaration import JobDeclaration, declare, is_culex_class
from .enqueue import enqueue_procedure, lone_call, task_of
from .progress import Reporting, areport, report
from .registry import registry
from .serialization import encode_result, params_text
from .steps import Durable
from .task import Task
from .task_logs import LogBuffer, send_now
from .upstream import Upstream, aupstreams, upstreams

logger = logging.getLogger("culex")


@typing.dataclass_transform(kw_only_default=True)
class Job(Durable, JobDeclaration):
    """Base class of every job. Subclass ``QueuedJob`` (or ``PeriodicJob``), not this. Its
    class attributes (policy: queue, max_retries, lease, ...) are declaration.py's."""

    # Set by the runner on the job object it runs.
    task_id: str
    attempt: int
    retry_count: int
    reporting_: Reporting  # where progress() stores (unset outside a runner: perform_now)
    # The attempt's log lines not sent yet (made by its first line), where the runner
    # wants that buffer (None outside a runner: lines are only logged), and whether log()
    # sends them itself (in a process child: culex.jobs.task_logs).
    log_buffer_: LogBuffer | None = None
    log_keep_: Callable[[LogBuffer], None] | None = None
    log_direct_: bool = False
    headers_: dict[str, str]  # the task's headers, when it has any (read as .headers)
    # Set by request_cancel_() when the task's cancel is requested while this attempt runs.
    _cancel_requested: bool = False

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if is_culex_class(cls):  # QueuedJob, PeriodicJob: bases with no params or queue
            return
        declare(cls, cls.perform, set(dir(Job)))
        if not abstract:
            registry.add(cls)

    def __init__(self, **params: Any) -> None:
        where = type(self).__name__
        declared = self.params_
        unknown = params.keys() - declared.keys()
        if unknown:
            raise TypeError(f"{where} got unknown params: {', '.join(sorted(unknown))}")
        for name, param in declared.items():
            if name in params:
                value = param.codec.validate(params[name], f"{where}.{name}")
            elif param.required:
                raise TypeError(f"{where} is missing the required param {short(name)}")
            else:
                value = copy.deepcopy(param.default)
            setattr(self, name, value)

    def __repr__(self) -> str:
        shown = ", ".join(f"{name}={getattr(self, name)!r}" for name in self.params_)
        return f"{type(self).__name__}({shown})"

    # -- what a job does ------------------------------------------------------------

    def perform(self) -> Any:
        """The work. May be ``async def``. Its return value is stored as the result."""
        raise NotImplementedError(f"{type(self).__name__} must define perform()")

    def before_perform(self) -> None:
        """Runs before perform; an exception here counts as a failed attempt."""

    def after_perform(self) -> None:
        """Runs after perform, whether it succeeded or not."""

    @property
    def headers(self) -> dict[str, str]:
        """The task's headers (str to str), as the middleware's ``on_enqueue`` wrote them
        at enqueue (docs/middleware.md); {} when it has none, or outside a runner."""
        return self.__dict__.get("headers_") or {}

    @property
    def cancelled(self) -> bool:
        """True once the task's cancel was requested while this attempt runs
        (``task.cancel()``; its runner learns it within about a second). A sync perform
        polls it and returns early: Python cannot stop a thread from outside. An async
        perform needs not look: it is cancelled (CancelledError at its next await), and a
        perform with ``isolation = "process"`` is killed. Either way the task goes to dead
        as "cancelled", whatever perform returns."""
        return self._cancel_requested

    def request_cancel_(self) -> bool:
        """Mark this attempt's cancel as requested (the runner calls it when the task's
        cancel is asked); False when it already was."""
        if self._cancel_requested:
            return False
        self._cancel_requested = True
        return True

    def log(self, message: str) -> None:
        """Log ``message`` as ``[JobName] message`` on the ``culex`` logger and, in a
        runner, keep it with the task (``task.logs()``: the newest 100 lines, 1,000
        characters each, sent with the runner's heartbeat and the attempt's report)."""
        logger.info("[%s] %s", self.type_, message)
        buffer = self.log_buffer_
        if buffer is None:
            if self.log_keep_ is None:
                return
            buffer = self.log_buffer_ = LogBuffer(self.attempt)
            self.log_keep_(buffer)
        buffer.add(str(message))
        if self.log_direct_:  # (a process child: no runner's heartbeat sees its lines)
            send_now(buffer, self.reporting_, self.task_id, due=True)

    def fail(self, reason: str = "", retry: bool = True) -> NoReturn:
        """End this attempt as failed; ``retry=False`` sends the task to dead at once."""
        raise JobFailure(reason, retry=retry)

    def progress(self, fraction: float, message: str | None = None) -> bool:
        """Report how far this attempt has got: ``fraction`` from 0 to 1, and a message of
        at most 1,000 characters; ``task.progress()`` reads it from anywhere.

        Blocking (a round trip): call it from a sync perform, including one in a child
        process; in an ``async def perform``, ``await self.aprogress(...)`` (this raises
        RuntimeError there). False when it was not stored: this attempt no longer holds
        the task (its lease was lost), or the job runs outside a runner (perform_now).
        A fraction outside 0..1, NaN, or a message that is not a str or too long raises
        ValueError or TypeError."""
        reporting = getattr(self, "reporting_", None)
        return report(reporting, self._task_id(), self._attempt(), fraction, message)

    async def aprogress(self, fraction: float, message: str | None = None) -> bool:
        """The async twin of :meth:`progress`, for an ``async def perform``."""
        reporting = getattr(self, "reporting_", None)
        return await areport(reporting, self._task_id(), self._attempt(), fraction, message)

    def upstream(self) -> dict[str, Upstream]:
        """In a workflow node's ``perform``: how each of its upstreams ended, by node name
        (``Upstream(state, result, error)``, the result typed by the upstream job's
        ``perform`` annotation). Blocking (a round trip); in an ``async def perform``,
        ``await self.aupstream()``. {} for a task that is no node, or outside a runner."""
        return upstreams(getattr(self, "reporting_", None), self._task_id(), self.outage_)

    async def aupstream(self) -> dict[str, Upstream]:
        """The async twin of :meth:`upstream`, for an ``async def perform``."""
        reporting = getattr(self, "reporting_", None)
        return await aupstreams(reporting, self._task_id(), self.outage_)

    def _task_id(self) -> str:
        return getattr(self, "task_id", "")  # (set by the runner; unset in perform_now)

    def _attempt(self) -> int:
        return getattr(self, "attempt", 0)

    def reschedule_interval(self, retry_count: int) -> timedelta:
        """How long to wait before retry number ``retry_count`` (1, 2, ...): 2 s x n²."""
        return timedelta(seconds=2 * retry_count**2)

    # -- used by the runner -----------------------------------------------------------

    def retry_delay_ms(self, retry_count: int, max_retries: int = -1) -> int | None:
        """The delay before the next attempt after failure ``retry_count``; None: dead.

        ``max_retries``: the task's own, as its hash holds it (written at enqueue from the
        class's, or by another producer); -1 (a hash without it): the class's. The hash's
        value decides, as it does when a lease is lost (reclaim.lua), so that a task retries
        the same way whichever runner runs it, and a deploy that changes the class's value
        applies to the tasks enqueued after it."""
        if retry_count > (max_retries if max_retries >= 0 else self.max_retries):
            return None
        allowed = self.rescheduleable
        if callable(allowed):
            allowed = allowed(retry_count)
        if not allowed:
            return None
        interval = self.reschedule_interval(retry_count)
        delay_ms = max(0, round(config.seconds(interval, "reschedule_interval()") * 1000))
        return check_delay_ms(delay_ms, "reschedule_interval()")

    def result_text(self, value: Any) -> str:
        """The JSON text stored as the task's result, typed by perform's return annotation.

        Never raises: perform has done its work. A value that does not fit the annotation
        is stored as plain JSON, and one that JSON cannot hold as its repr, with a warning
        in the log (serialization.encode_result).
        """
        return encode_result(
            value, self.result_codec_, f"the result of {type(self).__name__}.perform()"
        )

    @classmethod
    def from_params(cls, raw: object) -> Job:
        """Rebuild a job object from a task's stored params (raises ValueError on mismatch)."""
        if not isinstance(raw, dict):
            raise ValueError(f"{cls.__name__}: params must be a JSON object, got {raw!r:.80}")
        job = cls.__new__(cls)
        where = cls.__name__
        for name, param in cls.params_.items():
            if name in raw:
                value = param.codec.decode(raw[name], f"{where}.{name}")
            elif param.required:
                raise ValueError(
                    f"{where}: the task has no value for the required param {short(name)}"
                )
            else:
                value = copy.deepcopy(param.default)
            setattr(job, name, value)
        unknown = raw.keys() - cls.params_.keys()
        if unknown:
            raise ValueError(f"{where}: the task has unknown params: {', '.join(sorted(unknown))}")
        return job

    def params_json(self) -> str:
        """The params as the JSON object stored in the task hash."""
        encoded = {name: p.codec.encode(getattr(self, name)) for name, p in self.params_.items()}
        return params_text(encoded)


class QueuedJob(Job):
    """A job that runs on demand: now, after a delay, or at a time."""

    def enqueue(
        self,
        *,
        delay: timedelta | float | None = None,
        at: datetime | None = None,
        id: str | None = None,
        priority: int | None = None,
        dedupe_key: str | None = None,
        group: str | None = None,
        expires: timedelta | float | None = None,
        dedupe_for: timedelta | float | None = None,
    ) -> Task:
        """Store a task of this job in its queue; returns a handle on it.

        ``priority``: this task's, instead of the class's (-100 .. 100, higher runs first).
        ``dedupe_key``: while a task enqueued with this key in this queue is waiting,
        scheduled or running, nothing is stored and the handle is that task, with
        ``deduped`` True; once it has ended, the key is free again.
        ``dedupe_for``: seconds or a timedelta (up to 366 days), instead of the class's
        ``dedupe_for``: the key stays the task's that long after it ended (succeeded,
        dead or cancelled), and an enqueue with it in that time is deduped too.
        ``group``: the task's group (e.g. ``"customer:42"``): the queue's groups take turns,
        each within the queue's group limits (``group_concurrency``, ``group_rate_limit``).
        ``expires``: seconds or a timedelta from now, instead of the class's ``expires``: a
        task not started by then ends dead with last_error "expired"."""
        call = lone_call(self, (delay, at, id, priority, dedupe_key, group, expires, dedupe_for))
        if call is not None:  # (the most common enqueue: no procedure to drive)
            outcome = sync_driver().run(call)
            if not outcome.existed:
                return task_of(outcome, self)
        procedure = enqueue_procedure(
            [self],
            delay,
            at,
            id,
            priority=priority,
            dedupe_key=dedupe_key,
            group=group,
            expires=expires,
            dedupe_for=dedupe_for,
        )
        return run_sync(procedure)[0]

    async def aenqueue(
        self,
        *,
        delay: timedelta | float | None = None,
        at: datetime | None = None,
        id: str | None = None,
        priority: int | None = None,
        dedupe_key: str | None = None,
        group: str | None = None,
        expires: timedelta | float | None = None,
        dedupe_for: timedelta | float | None = None,
    ) -> Task:
        """The async twin of :meth:`enqueue`."""
        call = lone_call(self, (delay, at, id, priority, dedupe_key, group, expires, dedupe_for))
        if call is not None:  # (the most common enqueue: no procedure to drive)
            outcome = await run_one(call)
            if not outcome.existed:
                return task_of(outcome, self)
        procedure = enqueue_procedure(
            [self],
            delay,
            at,
            id,
            priority=priority,
            dedupe_key=dedupe_key,
            group=group,
            expires=expires,
            dedupe_for=dedupe_for,
        )
        return (await run_async(procedure))[0]


def enqueue_many(
    jobs: Iterable[QueuedJob],
    *,
    ids: Sequence[str] | None = None,
    delay: timedelta | float | None = None,
    at: datetime | None = None,
    priority: int | None = None,
    group: str | None = None,
    expires: timedelta | float | None = None,
    dedupe_keys: Sequence[str | None] | None = None,
    dedupe_for: timedelta | float | None = None,
) -> list[Task]:
    """Enqueue many job objects in few round trips (1,000 per pipeline); returns their tasks.
    ``ids``: the tasks' own ids, one per job (as ``enqueue(id=...)``: an id already stored
    changes nothing, so a batch sent again stores each task once). ``priority``: every
    task's, instead of its class's; ``group``: every task's group; ``expires``: every
    task's expiry from now, instead of its class's. ``dedupe_keys``: one per job (None for
    none), each as ``enqueue(dedupe_key=...)``: a deduped job's task is the task that holds
    its key (``deduped`` True), also when an earlier job of the batch took it;
    ``dedupe_for``: the window of every job with a key, instead of its class's.

    A batch the server stored only part of (out of memory, a lost connection) raises
    :class:`culex.EnqueueManyError`: its ``stored`` tasks and the ``failed`` ``(id, job)``
    pairs, whose ids (drawn by culex when ``ids`` is None) let you send them again."""
    listed = _checked(jobs)
    batch = Batch.of(listed, ids, dedupe_keys)
    procedure = enqueue_procedure(
        listed,
        delay,
        at,
        priority=priority,
        group=group,
        batch=batch,
        expires=expires,
        dedupe_for=dedupe_for,
    )
    try:
        return run_sync(procedure)
    except ServerError as exc:
        raise batch.error(listed, exc) from exc


async def aenqueue_many(
    jobs: Iterable[QueuedJob],
    *,
    ids: Sequence[str] | None = None,
    delay: timedelta | float | None = None,
    at: datetime | None = None,
    priority: int | None = None,
    group: str | None = None,
    expires: timedelta | float | None = None,
    dedupe_keys: Sequence[str | None] | None = None,
    dedupe_for: timedelta | float | None = None,
) -> list[Task]:
    """The async twin of :func:`enqueue_many`."""
    listed = _checked(jobs)
    batch = Batch.of(listed, ids, dedupe_keys)
    procedure = enqueue_procedure(
        listed,
        delay,
        at,
        priority=priority,
        group=group,
        batch=batch,
        expires=expires,
        dedupe_for=dedupe_for,
    )
    try:
        return await run_async(procedure)
    except ServerError as exc:
        raise batch.error(listed, exc) from exc


def _checked(jobs: Iterable[QueuedJob]) -> list[QueuedJob]:
    if isinstance(jobs, QueuedJob) or not isinstance(jobs, Iterable):
        raise TypeError("enqueue_many() takes an iterable of QueuedJob objects")
    listed = list(jobs)
    for job in listed:
        if not isinstance(job, QueuedJob):
            raise TypeError(f"enqueue_many() takes QueuedJob objects, got {type(job).__name__}")
    return listed
