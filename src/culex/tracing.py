"""OpenTelemetry tracing: a task carries its producer's trace context to its attempts.

Optional (``pip install culex[otel]``). An enqueue made inside a valid span opens a
PRODUCER span ``enqueue <Job>`` and stores its context in the task's ``trace`` field (the
propagator's carrier as a JSON object: W3C ``traceparent`` and ``tracestate`` by
default). Each attempt runs in a CONSUMER span ``perform <Job>``, current while the
job's hooks and perform run, linked to the producer's span (or its child, with
``trace_as_child = True`` on the job). Without OpenTelemetry, or outside a span, an
enqueue writes nothing and pays one check; a runner without OpenTelemetry ignores the
field. Attribute names follow OpenTelemetry's messaging semantic conventions.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Awaitable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
except ImportError:  # the optional extra is not installed: tracing is off
    trace = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from ._redis.claims import Claimed
    from .jobs.job import Job
    from .jobs.task import Task
    from .runner.attempt import Outcome

logger = logging.getLogger("culex")

AVAILABLE = trace is not None  # opentelemetry-api is installed
SYSTEM = "culex"  # messaging.system
TRACER = "culex"  # the instrumentation scope's name


_tracer: trace.Tracer | None = None
# What get_tracer_provider() gives while no SDK's provider is set: its spans record nothing.
_NO_PROVIDER = () if trace is None else (trace.ProxyTracerProvider, trace.NoOpTracerProvider)


def _get_tracer() -> trace.Tracer:
    """culex's tracer, made once: a provider set later is still used (the API's proxy
    tracer follows it), and making one per span would cost more than the span."""
    global _tracer
    if _tracer is None:
        _tracer = trace.get_tracer(TRACER)
    return _tracer


class _Untraced:
    """What enqueue gets when there is nothing to trace: no field, nothing to end."""

    field = ""

    def __enter__(self) -> _Untraced:
        return self

    def __exit__(self, *exc: object) -> None:
        return None

    def sent(self, tasks: Sequence[Task]) -> None:
        return None


_UNTRACED = _Untraced()


class _Producing:
    """An enqueue's PRODUCER span (never made current: a procedure may yield in between) and
    the trace field its tasks carry."""

    def __init__(self, jobs: Sequence[Job]) -> None:
        types = sorted({job.type_ for job in jobs})
        queues = {job.queue for job in jobs}
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "send",
            "messaging.operation.name": "enqueue",
            "culex.job": ",".join(types),
        }
        if len(queues) == 1:
            attributes["messaging.destination.name"] = next(iter(queues))
        if len(jobs) > 1:
            attributes["messaging.batch.message_count"] = len(jobs)
        name = f"enqueue {types[0]}" if len(types) == 1 else "enqueue"
        self.span = _get_tracer().start_span(
            name, kind=trace.SpanKind.PRODUCER, attributes=attributes
        )
        from opentelemetry import propagate  # (its import reads entry points: when first used)

        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(self.span))
        self.field = json.dumps(carrier, separators=(",", ":")) if carrier else ""

    def __enter__(self) -> _Producing:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, Exception):
            self.span.record_exception(exc)
            self.span.set_status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}")
        self.span.end()

    def sent(self, tasks: Sequence[Task]) -> None:
        if len(tasks) == 1:
            self.span.set_attribute("messaging.message.id", tasks[0].id)


def producing(jobs: Sequence[Job]) -> _Producing | _Untraced:
    """A context manager for one enqueue of ``jobs``: ``.field`` is the trace field to
    store ("" for none), ``.sent(tasks)`` names the tasks on the span."""
    if trace is None or not trace.get_current_span().get_span_context().is_valid:
        return _UNTRACED
    return _Producing(jobs)


def performing(job: Job, claimed: Claimed, run: Awaitable[Outcome]) -> Awaitable[Outcome]:
    """``run`` (one attempt of ``job``) inside its CONSUMER span, current meanwhile; or
    ``run`` itself when no span would be seen: without OpenTelemetry, or with its API but
    no tracer provider set (every span would be a non-recording one), for a task with no
    producer context, run from a context with no span in it."""
    if trace is None or (
        not claimed.trace
        and isinstance(trace.get_tracer_provider(), _NO_PROVIDER)
        and not trace.get_current_span().get_span_context().is_valid
    ):
        return run
    return _performing(job, claimed, run)


async def _performing(job: Job, claimed: Claimed, run: Awaitable[Outcome]) -> Outcome:
    parent = otel_context.Context()  # a new trace by default, never the runner's context
    links: list[trace.Link] = []
    producer = _producer_context(claimed)
    if producer is not None:
        if job.trace_as_child:
            parent = producer
        else:
            links.append(trace.Link(trace.get_current_span(producer).get_span_context()))
    span = _get_tracer().start_span(
        f"perform {claimed.type}",
        context=parent,
        kind=trace.SpanKind.CONSUMER,
        links=links,
        attributes={
            "messaging.system": SYSTEM,
            "messaging.operation.type": "process",
            "messaging.operation.name": "perform",
            "messaging.destination.name": claimed.queue,
            "messaging.message.id": claimed.id,
            "culex.job": claimed.type,
            "culex.attempt": claimed.attempt,
        },
    )
    token = otel_context.attach(trace.set_span_in_context(span, parent))
    try:
        outcome = await run
    except BaseException as exc:  # cancelled: the runner stops and hands the task back
        span.set_status(trace.StatusCode.ERROR, f"cut short ({type(exc).__name__}): {exc}")
        span.set_attribute("error.type", type(exc).__name__)
        raise
    else:
        if outcome.error is not None:
            _failed(span, outcome)
        return outcome
    finally:
        otel_context.detach(token)
        span.end()


def _failed(span: trace.Span, outcome: Outcome) -> None:
    exc = outcome.exception
    if exc is not None:
        span.record_exception(exc)
    span.set_attribute("error.type", type(exc).__name__ if exc is not None else "_OTHER")
    span.set_status(trace.StatusCode.ERROR, outcome.error)


def _producer_context(claimed: Claimed) -> otel_context.Context | None:
    """The context the task's producer stored, or None (no field, or one not understood:
    a task's trace never keeps it from running)."""
    raw = claimed.trace
    if not raw:
        return None
    from opentelemetry import propagate

    try:
        carrier = json.loads(raw)
        if not isinstance(carrier, dict):
            raise ValueError("not a JSON object")
        found = propagate.extract(
            {str(k): str(v) for k, v in carrier.items()}, context=otel_context.Context()
        )
    except ValueError as exc:
        logger.debug("task %s: its trace field is ignored: %s", claimed.id, exc)
        return None
    if not trace.get_current_span(found).get_span_context().is_valid:
        return None
    return found
