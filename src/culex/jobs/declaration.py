"""What a job class declares, checked when the class is defined: its policy (queue,
retries, lease, timeout, limits...) and what culex derives from it once (``params_``,
``type_``, ``async_perform_``, ``result_codec_``, ``limits_``).

``Job`` (culex/jobs/job.py) is a :class:`JobDeclaration`: there, what a job does and the
fields the runner sets on the job object it runs; here, what its class says.
"""

from __future__ import annotations

import functools
import inspect
import re
import typing
from collections.abc import Callable, Iterator, Mapping
from datetime import timedelta
from typing import Any, ClassVar

from .. import config
from .._redis.keys import check_queue_name
from .._redis.scripts import MOST
from ..errors import short
from .codecs import Codec, Deserializer, Serializer
from .enqueue_options import check_priority, dedupe_for_ms
from .limits import QueueLimits, Rate, concurrency, rate
from .serialization import codec_for, result_codec

MISSING: Any = object()  # a param's default when it has none


@functools.lru_cache(maxsize=1024)  # (each task's log lines name its job class this way)
def snake_case(name: str) -> str:
    """``SendWelcomeEmailJob`` -> ``send_welcome_email_job`` (the default queue name)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()


# culex's own base classes, by module and qualified name: keep it so when one moves.
BASES = frozenset(
    {
        "culex.jobs.declaration.JobDeclaration",
        "culex.jobs.job.Job",
        "culex.jobs.job.QueuedJob",
        "culex.jobs.periodic.PeriodicJob",
        "culex.jobs.steps.Durable",
    }
)


def is_culex_class(cls: type) -> bool:
    """culex's own base classes (JobDeclaration, Job, QueuedJob, PeriodicJob, and Job's
    Durable) declare no params."""
    return f"{cls.__module__}.{cls.__qualname__}" in BASES


class Param:
    """One declared param: its name, compiled codec and default."""

    __slots__ = ("codec", "default", "name")

    def __init__(self, name: str, codec: Codec, default: Any) -> None:
        self.name = name
        self.codec = codec
        self.default = default

    @property
    def required(self) -> bool:
        return self.default is MISSING


class JobHooks(Mapping[type, tuple[Serializer, Deserializer]]):
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


class JobDeclaration:
    """The class attributes a job class declares, and those culex derives from them when
    the class is defined (:func:`declare`). Subclass ``QueuedJob`` (or ``PeriodicJob``)."""

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
    # "thread" (default) or "process": where a sync perform runs (see culex.runner.isolation)
    isolation: ClassVar[str] = "thread"
    # A task not started this long after its enqueue ends dead, last_error "expired"
    # (seconds or a timedelta; None: never). QueuedJob.enqueue(expires=) overrides it.
    expires: ClassVar[float | timedelta | None] = None
    # An enqueue with a dedupe key keeps the key this long after its task ended (seconds or
    # a timedelta, up to 366 days; None: freed at the end). enqueue(dedupe_for=) overrides it.
    dedupe_for: ClassVar[float | timedelta | None] = None
    # The retry policy (docs/guide.md#the-retry-policy): the exceptions that retry (None:
    # every exception; () none); each delay drawn at random from half of it to all of it;
    # the most a delay may be (seconds or a timedelta; None: no cap).
    retry_on: ClassVar[tuple[type[BaseException], ...] | None] = None
    retry_jitter: ClassVar[bool] = False
    max_retry_delay: ClassVar[float | timedelta | None] = None
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


def declare(cls: type[JobDeclaration], perform: Callable[..., Any], reserved: set[str]) -> None:
    """Derive what ``cls`` declares (its params, type name, perform's kind and result
    codec, queue, limits) and check its policy: a class a runner could not use is refused
    when it is defined. ``perform``: its perform; ``reserved``: names a param may not take."""
    cls.params_ = _collect_params(cls, reserved)
    cls.type_ = _type_name(cls)
    cls.async_perform_ = inspect.iscoroutinefunction(perform)
    cls.result_codec_ = _result_codec(cls, perform)
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


def _collect_params(cls: type[JobDeclaration], reserved: set[str]) -> dict[str, Param]:
    """The params a job class declares: its annotations that are not ClassVars, none of
    them a name of ``reserved`` (culex.Job's own)."""
    try:
        hints = typing.get_type_hints(cls)
    except Exception as exc:
        raise TypeError(f"{cls.__name__}: cannot resolve its param annotations: {exc}") from exc
    own: dict[str, Any] = {}
    for klass in reversed(cls.__mro__):
        if klass is object or is_culex_class(klass):
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
    hooks = JobHooks(cls)
    params: dict[str, Param] = {}
    for name, annotation in own.items():
        where = f"{cls.__name__}.{name}"
        codec = codec_for(annotation, hooks, where)
        default = MISSING
        for klass in cls.__mro__:
            if name in klass.__dict__:
                default = klass.__dict__[name]
                break
        if default is not MISSING:
            default = codec.validate(default, f"{where} (default)")
        params[name] = Param(name, codec, default)
    return params


def _type_name(cls: type[JobDeclaration]) -> str:
    """The class's own ``name = "..."``, checked, else its class name. Not inherited: a
    subclass is another type. (A param called ``name`` stays a param.)"""
    given = cls.__dict__.get("name", MISSING)
    if given is MISSING or "name" in cls.params_ or hasattr(given, "__get__"):
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


def _result_codec(cls: type[JobDeclaration], perform: Callable[..., Any]) -> Codec | None:
    """The codec of perform's return annotation; None (plain JSON) where it cannot be
    resolved (a name imported only for type checkers) or typed: never an error, so that a
    module whose results were stored as plain JSON before still imports."""
    where = f"{cls.__name__}.perform()'s return annotation"
    try:
        annotation = typing.get_type_hints(perform).get("return")
    except Exception:  # a NameError, say
        return None
    return result_codec(annotation, JobHooks(cls), where)


def _check_policy(cls: type[JobDeclaration]) -> None:
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
    if cls.isolation == "process" and cls.async_perform_:
        raise TypeError(f'{name}: isolation = "process" is for a sync perform, not async def')
    stalls = cls.max_stalls
    if stalls is not None and (isinstance(stalls, bool) or not isinstance(stalls, int)):
        raise TypeError(f"{name}.max_stalls must be an int or None, got {short(stalls)}")
    if stalls is not None and not 0 <= stalls <= MOST:  # (what reclaim.lua takes)
        raise ValueError(f"{name}.max_stalls must be from 0 to {MOST}, got {stalls}")
    _check_retry_policy(cls)
    if cls.expires is not None:
        config.seconds(cls.expires, f"{name}.expires", minimum=0.001)
    if cls.dedupe_for is not None:
        dedupe_for_ms(cls.dedupe_for, f"{name}.dedupe_for")
    for attr in ("lease", "timeout"):
        value = getattr(cls, attr)
        if value is not None:
            config.seconds(value, f"{name}.{attr}", minimum=0.001)
    if cls.result_ttl is not None:
        config.seconds(cls.result_ttl, f"{name}.result_ttl")


def _check_retry_policy(cls: type[JobDeclaration]) -> None:
    """Reject a retry_on, retry_jitter or max_retry_delay a runner could not use."""
    name = cls.__name__
    retry_on = cls.retry_on
    if retry_on is not None and (
        not isinstance(retry_on, tuple)
        or not all(isinstance(k, type) and issubclass(k, BaseException) for k in retry_on)
    ):
        raise TypeError(
            f"{name}.retry_on must be a tuple of exception classes (e.g. (ConnectionError,)) "
            f"or None, got {short(retry_on)}"
        )
    if not isinstance(cls.retry_jitter, bool):
        raise TypeError(f"{name}.retry_jitter must be True or False, got {short(cls.retry_jitter)}")
    if cls.max_retry_delay is not None:
        config.seconds(cls.max_retry_delay, f"{name}.max_retry_delay")


def _limits(cls: type[JobDeclaration]) -> QueueLimits:
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
