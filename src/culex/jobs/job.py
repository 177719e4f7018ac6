"""Jobs: classes of code that run many times. ``QueuedJob`` runs on demand.

Params are class annotations (Mosquito's ``params`` macro): a typed keyword constructor is
built from them, checked when the job object is made, before anything reaches Redis.
"""

from __future__ import annotations

import copy
import functools
import inspect
import logging
import re
import typing
from collections.abc import Iterable, Iterator, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any, ClassVar, NoReturn

from .. import config
from .._redis.keys import check_queue_name
from .._redis.priority import check_delay_ms
from .._redis.scripts import MOST
from ..errors import JobFailure, ServerError, short
from ..operations.queue_control import QueueLimits, Rate, concurrency, rate
from ..server.procedures import run_async, run_sync
from .codecs import Codec, Deserializer, Serializer
from .enqueue import Batch, check_priority, enqueue_procedure
from .progress import Reporting, areport, report
from .registry import registry
from .serialization import codec_for, encode_result, params_text, result_codec
from .task import Task

logger = logging.getLogger("culex")

_MISSING: Any = object()


@functools.lru_cache(maxsize=1024)  # (each task's log lines name its job class this way)
def snake_case(name: str) -> str:
    """``SendWelcomeEmailJob`` -> ``send_welcome_email_job`` (the default queue name)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


_BASES = frozenset(
    {"culex.jobs.job.Job", "culex.jobs.job.QueuedJob", "culex.jobs.periodic.PeriodicJob"}
)


def _is_culex_class(cls: type) -> bool:
    """culex's own base classes (Job, QueuedJob, PeriodicJob) declare no params."""
    return f"{cls.__module__}.{cls.__qualname__}" in _BASES


class Param:
    """One declared param: its name, compiled codec and default."""

    __slots__ = ("codec", "default", "name")

    def __init__(self, name: str, codec: Codec, default: Any) -> None:
        self.name = name
        self.codec = codec
        self.default = default

    @property
    def required(self) -> bool:
        return self.default is _MISSING


class _JobHooks(Mapping[type, tuple[Serializer, Deserializer]]):
    """Mosquito's custom-type hooks: ``serialize_<type>`` / ``deserialize_<type>`` on the job."""

    def __init__(self, job: type) -> None:
        self.job = job

    def __getitem__(self, tp: type) -> tuple[Serializer, Deserializer]:
        name = snake_case(getattr(tp, "__name__", ""))
        serialize = getattr(self.job, f"serialize_{name}", None)
        deserialize = getattr(self.job, f"deserialize_{name}", None)
        if serialize is None or deserialize is None:
            raise KeyError(tp)
        return serialize, deserialize

    def __iter__(self) -> Iterator[type]:
        return iter(())

    def __len__(self) -> int:
        return 0


@typing.dataclass_transform(kw_only_default=True)
class Job:
    """Base class of every job. Subclass ``QueuedJob`` (or ``PeriodicJob``), not this."""

    # Policy belongs to the job (override in a subclass).
    queue: ClassVar[str] = ""
    queue_from_name_: ClassVar[bool] = False  # queue is the class name, not set: not inherited
    max_retries: ClassVar[int] = 4
    # An attribute, or a method taking the retry count: may this task run again?
    rescheduleable: ClassVar[bool] = True
    lease: ClassVar[float | timedelta | None] = None  # None: the runner's lease setting
    # how many stalls (expired leases) a task outlives; None: the runner's max_stalls setting
    max_stalls: ClassVar[int | None] = None
    timeout: ClassVar[float | timedelta | None] = None  # a time limit per attempt
    # how long a returned value is kept; None: the result_ttl setting; 0: successful_job_ttl
    result_ttl: ClassVar[float | timedelta | None] = None
    # "thread" (default) or "process": where a sync perform runs (see culex.isolation)
    isolation: ClassVar[str] = "thread"
    # Higher runs first within the queue (a whole number in -100 .. 100); FIFO by ready time
    # within one priority. QueuedJob.enqueue(priority=) overrides it for one task.
    priority: ClassVar[int] = 0
    # With OpenTelemetry: an attempt's span is a child of the enqueuing span (one trace),
    # not a new trace linked to it (the default; see docs/tracing.md)
    trace_as_child: ClassVar[bool] = False
    # Flow control, a property of the job's queue (docs/flow-control.md): at most this many
    # starts in any window ("100/s", "10/m", culex.Rate), and at most this many running at
    # once, across every runner. Job classes that share a queue declare the same or none.
    rate_limit: ClassVar[Rate | str | None] = None
    concurrency_limit: ClassVar[int | None] = None
    # The same, per group of the queue's tasks (enqueue(group=...)): each group on its own.
    group_rate_limit: ClassVar[Rate | str | None] = None
    group_concurrency: ClassVar[int | None] = None

    params_: ClassVar[dict[str, Param]] = {}
    # The task's ``type`` in Redis: ``name = "..."`` on the class, else the class name.
    type_: ClassVar[str] = ""
    async_perform_: ClassVar[bool] = False  # perform is ``async def`` (found once, at definition)
    result_codec_: ClassVar[Codec | None] = None  # by perform's return annotation; None: plain
    limits_: ClassVar[QueueLimits] = QueueLimits()  # rate_limit and concurrency_limit, checked

    # Set by the runner on the job object it runs.
    task_id: str
    attempt: int
    retry_count: int
    reporting_: Reporting  # where progress() stores (unset outside a runner: perform_now)
    # Set by request_cancel_() when the task's cancel is requested while this attempt runs.
    _cancel_requested: bool = False

    def __init_subclass__(cls, abstract: bool = False, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if _is_culex_class(cls):  # QueuedJob, PeriodicJob: bases with no params or queue
            return
        cls.params_ = _collect_params(cls)
        cls.type_ = _type_name(cls)
        cls.async_perform_ = inspect.iscoroutinefunction(cls.perform)
        cls.result_codec_ = _result_codec(cls)
        if "queue" not in cls.__dict__ or not cls.__dict__["queue"]:
            # A queue a base set (queue = "emails") is inherited; one a base took from its
            # own class name is not: this class's default queue is its own name.
            inherited = "" if cls.queue_from_name_ else cls.queue
            cls.queue = inherited or snake_case(cls.__name__)
            cls.queue_from_name_ = not inherited
        else:
            cls.queue_from_name_ = False
        check_queue_name(cls.queue)
        _check_policy(cls)
        cls.limits_ = _limits(cls)
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
        """Log ``message`` as ``[JobName] message`` on the ``culex`` logger."""
        logger.info("[%s] %s", self.type_, message)

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
    ) -> Task:
        """Store a task of this job in its queue; returns a handle on it.

        ``priority``: this task's, instead of the class's (-100 .. 100, higher runs first).
        ``dedupe_key``: while a task enqueued with this key in this queue is waiting,
        scheduled or running, nothing is stored and the handle is that task, with
        ``deduped`` True; once it has ended, the key is free again.
        ``group``: the task's group (e.g. ``"customer:42"``): the queue's groups take turns,
        each within the queue's group limits (``group_concurrency``, ``group_rate_limit``)."""
        procedure = enqueue_procedure(
            [self], delay, at, id, priority=priority, dedupe_key=dedupe_key, group=group
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
    ) -> Task:
        """The async twin of :meth:`enqueue`."""
        procedure = enqueue_procedure(
            [self], delay, at, id, priority=priority, dedupe_key=dedupe_key, group=group
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
) -> list[Task]:
    """Enqueue many job objects in few round trips (1,000 per pipeline); returns their tasks.
    ``ids``: the tasks' own ids, one per job (as ``enqueue(id=...)``: an id already stored
    changes nothing, so a batch sent again stores each task once). ``priority``: every
    task's, instead of its class's; ``group``: every task's group. (No ``dedupe_key``: one
    key names one task; enqueue each job that has one by itself.)

    A batch the server stored only part of (out of memory, a lost connection) raises
    :class:`culex.EnqueueManyError`: its ``stored`` tasks and the ``failed`` ``(id, job)``
    pairs, whose ids (drawn by culex when ``ids`` is None) let you send them again."""
    listed = _checked(jobs)
    batch = Batch.of(listed, ids)
    procedure = enqueue_procedure(listed, delay, at, priority=priority, group=group, batch=batch)
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
) -> list[Task]:
    """The async twin of :func:`enqueue_many`."""
    listed = _checked(jobs)
    batch = Batch.of(listed, ids)
    procedure = enqueue_procedure(listed, delay, at, priority=priority, group=group, batch=batch)
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


def _collect_params(cls: type[Job]) -> dict[str, Param]:
    """The params a job class declares: its annotations that are not ClassVars."""
    reserved = set(dir(Job))
    try:
        hints = typing.get_type_hints(cls)
    except Exception as exc:
        raise TypeError(f"{cls.__name__}: cannot resolve its param annotations: {exc}") from exc
    own: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or _is_culex_class(klass):
            continue
        for name in inspect.get_annotations(klass):
            if name.startswith("_") or typing.get_origin(hints.get(name)) is ClassVar:
                continue
            if hints.get(name) is ClassVar:
                continue
            if name in reserved:
                raise TypeError(
                    f"{cls.__name__}: {short(name)} is reserved by culex.Job, rename the param"
                )
            own[name] = hints[name]
    hooks = _JobHooks(cls)
    params: dict[str, Param] = {}
    for name, annotation in own.items():
        where = f"{cls.__name__}.{name}"
        codec = codec_for(annotation, hooks, where)
        default = _MISSING
        for klass in cls.__mro__:
            if name in klass.__dict__:
                default = klass.__dict__[name]
                break
        if default is not _MISSING:
            default = codec.validate(default, f"{where} (default)")
        params[name] = Param(name, codec, default)
    return params


def _type_name(cls: type[Job]) -> str:
    """The class's own ``name = "..."``, checked, else its class name. Not inherited: a
    subclass is another type. (A param called ``name`` stays a param.)"""
    given = cls.__dict__.get("name", _MISSING)
    if given is _MISSING or "name" in cls.params_ or hasattr(given, "__get__"):
        return cls.__name__  # (a method or property called name is no type name)
    if (
        not isinstance(given, str)
        or not given
        or not given.isprintable()
        or any(c.isspace() for c in given)
    ):
        raise TypeError(
            f"{cls.__name__}.name (the type of its tasks) must be a non-empty str of "
            f"printable characters without spaces, got {short(given)}"
        )
    return given


def _result_codec(cls: type[Job]) -> Codec | None:
    """The codec of perform's return annotation; None (plain JSON) where it cannot be
    resolved (a name imported only for type checkers) or typed: never an error, so that a
    module whose results were stored as plain JSON before still imports."""
    where = f"{cls.__name__}.perform()'s return annotation"
    try:
        annotation = typing.get_type_hints(cls.perform).get("return")
    except Exception:  # a NameError, say
        return None
    return result_codec(annotation, _JobHooks(cls), where)


def _check_policy(cls: type[Job]) -> None:
    """Reject policy attributes a runner could not use, when the class is defined."""
    name = cls.__name__
    if isinstance(cls.max_retries, bool) or not isinstance(cls.max_retries, int):
        raise TypeError(f"{name}.max_retries must be an int, got {short(cls.max_retries)}")
    if not 0 <= cls.max_retries <= MOST:
        raise ValueError(f"{name}.max_retries must be from 0 to {MOST}, got {cls.max_retries}")
    if not isinstance(cls.rescheduleable, bool) and not callable(cls.rescheduleable):
        raise TypeError(f"{name}.rescheduleable must be a bool or a method taking the retry count")
    check_priority(cls.priority, f"{name}.priority")
    if not isinstance(cls.trace_as_child, bool):
        raise TypeError(f"{name}.trace_as_child must be a bool, got {short(cls.trace_as_child)}")
    if cls.isolation not in ("thread", "process"):
        raise ValueError(
            f'{name}.isolation must be "thread" or "process", got {short(cls.isolation)}'
        )
    if cls.isolation == "process" and inspect.iscoroutinefunction(cls.perform):
        raise TypeError(f'{name}: isolation = "process" is for a sync perform, not async def')
    stalls = cls.max_stalls
    if stalls is not None and (isinstance(stalls, bool) or not isinstance(stalls, int)):
        raise TypeError(f"{name}.max_stalls must be an int or None, got {short(stalls)}")
    if stalls is not None and not 0 <= stalls <= MOST:  # (what reclaim.lua takes)
        raise ValueError(f"{name}.max_stalls must be from 0 to {MOST}, got {stalls}")
    for attr in ("lease", "timeout"):
        value = getattr(cls, attr)
        if value is not None:
            config.seconds(value, f"{name}.{attr}", minimum=0.001)
    if cls.result_ttl is not None:
        config.seconds(cls.result_ttl, f"{name}.result_ttl")


def _limits(cls: type[Job]) -> QueueLimits:
    """The flow-control limits ``cls`` declares for its queue, checked."""
    name = cls.__name__

    def checked_rate(attr: str) -> Rate | None:
        value = getattr(cls, attr)
        return None if value is None else rate(value, f"{name}.{attr}")

    def checked_concurrency(attr: str) -> int | None:
        value = getattr(cls, attr)
        return None if value is None else concurrency(value, f"{name}.{attr}")

    return QueueLimits(
        checked_rate("rate_limit"),
        checked_concurrency("concurrency_limit"),
        checked_rate("group_rate_limit"),
        checked_concurrency("group_concurrency"),
    )
