"""The performing half of tracing: each attempt in a CONSUMER span ``perform <Job>``,
current while the job's hooks and perform run, linked to its producer's span (or its
child, with ``trace_as_child = True`` on the job). The producing half, culex's tracer and
the carrier are culex/tracing.py's; docs/tracing.md tells the whole.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Protocol, TypeVar

from .._redis.claims import Claimed
from ..jobs.job import Job
from ..tracing import AVAILABLE, NO_PROVIDER, SYSTEM, get_tracer, producer_context

if AVAILABLE:
    from opentelemetry import context as otel_context
    from opentelemetry import trace


class Ended(Protocol):
    """What the span reads of an attempt's end (runner.outcome.Outcome): its error, if it
    failed, and the exception behind it."""

    @property
    def error(self) -> str | None: ...

    @property
    def exception(self) -> BaseException | None: ...


E = TypeVar("E", bound=Ended)


def performing(job: Job, claimed: Claimed, run: Awaitable[E]) -> Awaitable[E]:
    """``run`` (one attempt of ``job``) inside its CONSUMER span, current meanwhile; or
    ``run`` itself when no span would be seen: without OpenTelemetry, or with its API but
    no tracer provider set (every span would be a non-recording one), for a task with no
    producer context, run from a context with no span in it."""
    if not AVAILABLE or (
        not claimed.trace
        and isinstance(trace.get_tracer_provider(), NO_PROVIDER)
        and not trace.get_current_span().get_span_context().is_valid
    ):
        return run
    return _performing(job, claimed, run)


async def _performing(job: Job, claimed: Claimed, run: Awaitable[E]) -> E:
    parent = otel_context.Context()  # a new trace by default, never the runner's context
    links: list[trace.Link] = []
    producer = producer_context(claimed.trace, claimed.id)
    if producer is not None:
        if job.trace_as_child:
            parent = producer
        else:
            links.append(trace.Link(trace.get_current_span(producer).get_span_context()))
    span = get_tracer().start_span(
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
    # (with no SDK, an older API (1.20) starts an invalid span where a newer one carries the
    # parent's context: the parent is the current context in perform either way)
    valid = span.get_span_context().is_valid
    token = otel_context.attach(trace.set_span_in_context(span, parent) if valid else parent)
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


def _failed(span: trace.Span, outcome: Ended) -> None:
    exc = outcome.exception
    if exc is not None:
        span.record_exception(exc)
    span.set_attribute("error.type", type(exc).__name__ if exc is not None else "_OTHER")
    span.set_status(trace.StatusCode.ERROR, outcome.error)
