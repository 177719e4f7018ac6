"""OpenTelemetry tracing: a task carries its producer's trace context to its attempts.

Optional (``pip install culex[otel]``). An enqueue made inside a valid span opens a
PRODUCER span ``enqueue <Job>`` and stores its context in the task's ``trace`` field (the
propagator's carrier as a JSON object: W3C ``traceparent`` and ``tracestate`` by
default). Each attempt runs in a CONSUMER span ``perform <Job>``, current while the
job's hooks and perform run, linked to the producer's span (or its child, with
``trace_as_child = True`` on the job). Without OpenTelemetry, or outside a span, an
enqueue writes nothing and pays one check; a runner without OpenTelemetry ignores the
field. Attribute names follow OpenTelemetry's messaging semantic conventions.

This module is the producing half, and what both halves share: culex's tracer, the
carrier written and read back. It takes plain values (type names, a queue name, the
stored field). The performing half, the CONSUMER span around an attempt, is the runner's
(culex/runner/attempt_span.py).
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from types import TracebackType
from typing import Any

try:
    from opentelemetry import context as otel_context
    from opentelemetry import trace
except ImportError:  # the optional extra is not installed: tracing is off
    AVAILABLE = False
else:
    AVAILABLE = True  # opentelemetry-api is installed

logger = logging.getLogger("culex")

SYSTEM = "culex"  # messaging.system
TRACER = "culex"  # the instrumentation scope's name


_tracer: trace.Tracer | None = None
# What get_tracer_provider() gives while no SDK's provider is set: its spans record nothing.
NO_PROVIDER = (trace.ProxyTracerProvider, trace.NoOpTracerProvider) if AVAILABLE else ()


def get_tracer() -> trace.Tracer:
    """culex's tracer, made once: a provider set later is still used (the API's proxy
    tracer follows it), and making one per span would cost more than the span."""
    global _tracer
    if _tracer is None:
        _tracer = trace.get_tracer(TRACER)
    return _tracer


def in_span() -> bool:
    """Whether an enqueue made now is traced (a :class:`Producing` of its own): OpenTelemetry
    is there and a valid span is current. The one check an enqueue pays otherwise: an
    empty context (nothing set in it, the common case) answers without the span's look-up."""
    if not AVAILABLE:
        return False
    current = otel_context.get_current()
    return bool(current) and trace.get_current_span(current).get_span_context().is_valid


class Producing:
    """An enqueue's PRODUCER span (never made current: a procedure may yield in between) and
    the trace field its tasks carry. ``types``: the job types enqueued, each once, sorted;
    ``queue``: their queue, "" when they go to more than one; ``count``: how many tasks."""

    def __init__(self, types: Sequence[str], queue: str, count: int) -> None:
        attributes: dict[str, Any] = {
            "messaging.system": SYSTEM,
            "messaging.operation.type": "send",
            "messaging.operation.name": "enqueue",
            "culex.job": ",".join(types),
        }
        if queue:
            attributes["messaging.destination.name"] = queue
        if count > 1:
            attributes["messaging.batch.message_count"] = count
        name = f"enqueue {types[0]}" if len(types) == 1 else "enqueue"
        self.span = get_tracer().start_span(
            name, kind=trace.SpanKind.PRODUCER, attributes=attributes
        )
        from opentelemetry import propagate  # (its import reads entry points: when first used)

        carrier: dict[str, str] = {}
        propagate.inject(carrier, context=trace.set_span_in_context(self.span))
        self.field = json.dumps(carrier, separators=(",", ":")) if carrier else ""

    def __enter__(self) -> Producing:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if isinstance(exc, Exception):
            self.span.record_exception(exc)
            self.span.set_status(trace.StatusCode.ERROR, f"{type(exc).__name__}: {exc}")
        self.span.end()

    def sent(self, task_id: str) -> None:
        """Name the task on the span, when the enqueue stored one ("" when it stored many)."""
        if task_id:
            self.span.set_attribute("messaging.message.id", task_id)


def producer_context(field: str | bytes, task_id: str) -> otel_context.Context | None:
    """The context a task's producer stored in its trace ``field``, or None (no field, or
    one not understood: a task's trace never keeps it from running)."""
    if not field:
        return None
    from opentelemetry import propagate

    try:
        carrier = json.loads(field)
        if not isinstance(carrier, dict):
            raise ValueError("not a JSON object")
        found = propagate.extract(
            {str(k): str(v) for k, v in carrier.items()}, context=otel_context.Context()
        )
    except ValueError as exc:
        logger.debug("task %s: its trace field is ignored: %s", task_id, exc)
        return None
    if not trace.get_current_span(found).get_span_context().is_valid:
        return None
    return found
