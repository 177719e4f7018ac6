"""OpenTelemetry tracing (culex.tracing): the trace field an enqueue stores, the PRODUCER
span around it, and the CONSUMER span of each attempt (linked, or a child when the job
asks), checked with the SDK's in-memory exporter against the test server."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import textwrap
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import redis
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind, StatusCode

import culex
from culex import tracing
from culex._redis.keys import queue_keys

from .conftest import await_until, running
from .test_docs import python_blocks

QUEUE = "traced"
EXPORTER = InMemorySpanExporter()


def _provider() -> TracerProvider:
    """The process's one SDK provider (OpenTelemetry lets a process set it once)."""
    current = trace.get_tracer_provider()
    if isinstance(current, TracerProvider):
        return current
    provider = TracerProvider()
    trace.set_tracer_provider(provider)
    return provider


_provider().add_span_processor(SimpleSpanProcessor(EXPORTER))
tracer = trace.get_tracer("tests")

# What the performs saw as the current span, by task id.
seen: dict[str, SpanContext] = {}


class SyncTracedJob(culex.QueuedJob):
    queue = QUEUE
    n: int

    def perform(self) -> int:
        seen[self.task_id] = trace.get_current_span().get_span_context()
        return self.n


class AsyncTracedJob(culex.QueuedJob):
    queue = QUEUE
    n: int

    async def perform(self) -> int:
        seen[self.task_id] = trace.get_current_span().get_span_context()
        return self.n


class TracedChildJob(culex.QueuedJob):
    queue = QUEUE
    trace_as_child = True

    def perform(self) -> None:
        seen[self.task_id] = trace.get_current_span().get_span_context()


class TracedBrokenJob(culex.QueuedJob):
    queue = QUEUE
    max_retries = 0

    def perform(self) -> None:
        raise ValueError("no such user")


class TracedSlowJob(culex.QueuedJob):
    queue = QUEUE
    max_retries = 0
    timeout = 0.05

    async def perform(self) -> None:
        await asyncio.Event().wait()  # never set: the time limit ends it


started = asyncio.Event()


class TracedStuckJob(culex.QueuedJob):
    queue = QUEUE

    async def perform(self) -> None:
        started.set()
        await asyncio.Event().wait()  # never set: the runner's stop cuts it short


class UntracedJob(culex.QueuedJob):
    queue = "untraced"
    n: int

    def perform(self) -> int:
        return self.n * 2


class ContextJob(culex.QueuedJob):
    """Enqueued here, run by a process with no tracer provider (WITHOUT_A_PROVIDER)."""

    queue = "no_provider"

    def perform(self) -> None: ...


@pytest.fixture
def spans(r: redis.Redis) -> Iterator[InMemorySpanExporter]:
    EXPORTER.clear()
    seen.clear()
    yield EXPORTER
    EXPORTER.clear()


def finished(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [span for span in exporter.get_finished_spans() if span.name == name]


async def consumer_span(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    found: list[ReadableSpan] = await await_until(
        lambda: finished(exporter, name), what=f"the span {name!r}"
    )
    return found[0]


def ids(context: SpanContext | None) -> tuple[int, int]:
    assert context is not None
    return context.trace_id, context.span_id


def trace_field(r: redis.Redis, task: culex.Task) -> dict[str, str] | None:
    raw = r.hget(queue_keys("culex", task.queue).task(task.id), "trace")
    return None if raw is None else dict(json.loads(raw))


# -- enqueue ---------------------------------------------------------------------------


def test_enqueue_outside_a_span_stores_no_trace(
    r: redis.Redis, spans: InMemorySpanExporter
) -> None:
    task = SyncTracedJob(n=1).enqueue()
    many = culex.enqueue_many([SyncTracedJob(n=2), SyncTracedJob(n=3)])
    assert [trace_field(r, t) for t in [task, *many]] == [None, None, None]
    assert spans.get_finished_spans() == ()


def test_enqueue_inside_a_span_stores_its_producer_span(
    r: redis.Redis, spans: InMemorySpanExporter
) -> None:
    with tracer.start_as_current_span("request") as request:
        task = SyncTracedJob(n=1).enqueue()
    (producer,) = finished(spans, "enqueue SyncTracedJob")
    assert producer.kind is SpanKind.PRODUCER
    assert producer.parent == request.get_span_context()
    assert producer.context is not None
    assert dict(producer.attributes or {}) == {
        "messaging.system": "culex",
        "messaging.operation.type": "send",
        "messaging.operation.name": "enqueue",
        "messaging.destination.name": QUEUE,
        "messaging.message.id": task.id,
        "culex.job": "SyncTracedJob",
    }
    field = trace_field(r, task)
    assert field is not None
    ids = f"{producer.context.trace_id:032x}-{producer.context.span_id:016x}"
    assert field["traceparent"].startswith(f"00-{ids}-")  # then the flags


async def test_enqueue_many_inside_a_span_is_one_producer_span(
    r: redis.Redis, spans: InMemorySpanExporter
) -> None:
    with tracer.start_as_current_span("request"):
        tasks = await culex.aenqueue_many(
            [SyncTracedJob(n=i) for i in range(3)] + [TracedChildJob()]
        )
    (producer,) = finished(spans, "enqueue")
    assert producer.attributes is not None
    assert producer.attributes["messaging.batch.message_count"] == 4
    assert producer.attributes["culex.job"] == "SyncTracedJob,TracedChildJob"
    fields = [trace_field(r, task) for task in tasks]
    assert fields[0] is not None
    assert fields == [fields[0]] * 4


def test_a_failed_enqueue_ends_its_span_with_the_error(
    r: redis.Redis, spans: InMemorySpanExporter
) -> None:
    culex.configure(max_payload_bytes=10)
    with tracer.start_as_current_span("request"), pytest.raises(ValueError):
        SyncTracedJob(n=10**20).enqueue()
    (producer,) = finished(spans, "enqueue SyncTracedJob")
    assert producer.status.status_code is StatusCode.ERROR
    assert [event.name for event in producer.events] == ["exception"]


# -- attempts ----------------------------------------------------------------------------


@pytest.mark.parametrize("job", [SyncTracedJob, AsyncTracedJob])
async def test_an_attempt_is_a_consumer_span_linked_to_its_producer(
    r: redis.Redis, spans: InMemorySpanExporter, job: type[SyncTracedJob]
) -> None:
    with tracer.start_as_current_span("request"):
        task = await job(n=7).aenqueue()
    async with running(culex.Runner(run_from=[QUEUE])):
        assert await task.aresult(timeout=30) == 7
    (producer,) = finished(spans, f"enqueue {job.__name__}")
    span = await consumer_span(spans, f"perform {job.__name__}")
    assert span.kind is SpanKind.CONSUMER
    assert span.parent is None  # a trace of its own: a long wait does not stretch the request's
    assert producer.context is not None and span.context is not None
    assert span.context.trace_id != producer.context.trace_id
    assert [ids(link.context) for link in span.links] == [ids(producer.context)]
    assert dict(span.attributes or {}) == {
        "messaging.system": "culex",
        "messaging.operation.type": "process",
        "messaging.operation.name": "perform",
        "messaging.destination.name": QUEUE,
        "messaging.message.id": task.id,
        "culex.job": job.__name__,
        "culex.attempt": 1,
    }
    assert span.status.status_code is StatusCode.UNSET
    assert seen[task.id] == span.context  # current while perform ran (in its thread, too)


async def test_a_job_that_asks_runs_as_a_child_of_its_producer(
    r: redis.Redis, spans: InMemorySpanExporter
) -> None:
    with tracer.start_as_current_span("request"):
        task = await TracedChildJob().aenqueue()
    async with running(culex.Runner(run_from=[QUEUE])):
        await task.aresult(timeout=30)
    (producer,) = finished(spans, "enqueue TracedChildJob")
    span = await consumer_span(spans, "perform TracedChildJob")
    assert producer.context is not None and span.context is not None
    assert ids(span.parent) == ids(producer.context)
    assert span.context.trace_id == producer.context.trace_id
    assert span.links == ()
    assert seen[task.id] == span.context


async def test_a_task_without_a_trace_gets_a_new_trace_unlinked(
    r: redis.Redis, spans: InMemorySpanExporter
) -> None:
    task = await SyncTracedJob(n=1).aenqueue()
    async with running(culex.Runner(run_from=[QUEUE])):
        await task.aresult(timeout=30)
    span = await consumer_span(spans, "perform SyncTracedJob")
    assert span.parent is None
    assert span.links == ()


async def test_a_trace_field_not_understood_is_ignored(
    r: redis.Redis, spans: InMemorySpanExporter
) -> None:
    with tracer.start_as_current_span("request"):
        task = await SyncTracedJob(n=4).aenqueue()
    r.hset(queue_keys("culex", QUEUE).task(task.id), "trace", "not json")
    async with running(culex.Runner(run_from=[QUEUE])):
        assert await task.aresult(timeout=30) == 4
    span = await consumer_span(spans, "perform SyncTracedJob")
    assert span.links == ()


@pytest.mark.parametrize(
    ("job", "error_type", "status"),
    [
        (TracedBrokenJob, "ValueError", "ValueError: no such user"),
        (TracedSlowJob, "TimeoutError", "timed out after 0.05 s"),
    ],
)
async def test_a_failed_attempt_records_its_exception(
    r: redis.Redis,
    spans: InMemorySpanExporter,
    job: type[culex.QueuedJob],
    error_type: str,
    status: str,
) -> None:
    with tracer.start_as_current_span("request"):
        await job().aenqueue()
    async with running(culex.Runner(run_from=[QUEUE])):
        span = await consumer_span(spans, f"perform {job.__name__}")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description == status
    assert span.attributes is not None
    assert span.attributes["error.type"] == error_type
    (event,) = span.events
    assert event.name == "exception"
    assert event.attributes is not None
    assert event.attributes["exception.type"] == error_type


async def test_an_attempt_handed_back_at_stop_ends_its_span(
    r: redis.Redis, spans: InMemorySpanExporter
) -> None:
    started.clear()
    culex.configure(grace_period=0.05)
    task = await TracedStuckJob().aenqueue()
    async with running(culex.Runner(run_from=[QUEUE])):
        await asyncio.wait_for(started.wait(), 30)
    span = await consumer_span(spans, "perform TracedStuckJob")
    assert span.status.status_code is StatusCode.ERROR
    assert span.status.description is not None
    assert span.status.description.startswith("cut short (CancelledError)")
    assert await task.astate() is culex.TaskState.WAITING  # handed back, to run again


def test_trace_as_child_must_be_a_bool() -> None:
    with pytest.raises(TypeError, match="trace_as_child must be a bool"):

        class WrongJob(culex.QueuedJob, abstract=True):
            trace_as_child = "yes"  # type: ignore[assignment]


PAGE = Path(__file__).resolve().parent.parent / "docs" / "tracing.md"


async def test_the_page_examples_run(r: redis.Redis, spans: InMemorySpanExporter) -> None:
    module = types.ModuleType("culex_docs_tracing")
    sys.modules[module.__name__] = module  # job classes resolve their annotations here
    try:
        for block in python_blocks(PAGE):
            exec(compile(block, "tracing.md", "exec"), module.__dict__)
        async with running(culex.Runner(run_from=["docs_tracing"])):
            assert await module.resized.aresult(timeout=30) == "avatar.small.png"
            await module.welcome.aresult(timeout=30)
        request = finished(spans, "POST /signup")[0].context
        resize = await consumer_span(spans, "perform ResizeImageJob")
        welcome = await consumer_span(spans, "perform WelcomeEmailJob")
        assert ids(request)[0] != ids(resize.context)[0]
        assert ids(request)[0] == ids(welcome.context)[0]
    finally:
        del sys.modules[module.__name__]
        for job in list(culex.registry):
            if job.__module__ == module.__name__:
                culex.registry.remove(job)


# -- without OpenTelemetry -----------------------------------------------------------------

WITHOUT_OPENTELEMETRY = textwrap.dedent(
    """
    import asyncio, sys
    sys.modules["opentelemetry"] = None  # the import fails, as when it is not installed
    import culex
    from culex import tracing

    assert not tracing.AVAILABLE

    class UntracedJob(culex.QueuedJob):
        queue = "untraced"
        n: int

        def perform(self) -> int:
            return self.n * 2

    async def main() -> None:
        task = culex.Task(sys.argv[1], "untraced")
        runner = culex.Runner(run_from=["untraced"])
        run = asyncio.create_task(runner.arun())
        print(await task.aresult(timeout=30))
        runner.stop()
        await run
        print((await UntracedJob(n=1).aenqueue()).id)  # no trace field without OpenTelemetry

    asyncio.run(main())
    """
)


def test_a_traced_task_runs_where_opentelemetry_is_absent(
    r: redis.Redis, spans: InMemorySpanExporter
) -> None:
    with tracer.start_as_current_span("request"):
        task = UntracedJob(n=21).enqueue()
    assert trace_field(r, task) is not None
    result, untraced_id = in_a_process(WITHOUT_OPENTELEMETRY, task.id)
    assert result == "42"
    assert trace_field(r, culex.Task(untraced_id, "untraced")) is None


WITHOUT_A_PROVIDER = textwrap.dedent(
    """
    import asyncio, sys
    import culex
    from opentelemetry import trace

    class ContextJob(culex.QueuedJob):
        queue = "no_provider"
        trace_as_child = True

        async def perform(self) -> str:
            context = trace.get_current_span().get_span_context()
            return format(context.trace_id, "032x") if context.is_valid else "none"

    async def main() -> None:
        untraced = await ContextJob().aenqueue()
        runner = culex.Runner(run_from=["no_provider"])
        run = asyncio.create_task(runner.arun())
        for task_id in (sys.argv[1], untraced.id):
            print(await culex.Task(task_id, "no_provider").aresult(timeout=30))
        runner.stop()
        await run
        assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)  # (none set)

    asyncio.run(main())
    """
)


def test_without_a_provider_a_producer_context_is_still_current_in_perform(
    r: redis.Redis, spans: InMemorySpanExporter
) -> None:
    """The API installed, no SDK (an attempt then makes no span when nothing would see
    it): a task's producer context is still the current one in perform (calls there
    propagate it), and a task without one runs with no valid span."""
    with tracer.start_as_current_span("request") as request:
        task = ContextJob().enqueue()
    producer_trace = format(request.get_span_context().trace_id, "032x")
    assert in_a_process(WITHOUT_A_PROVIDER, task.id) == [producer_trace, "none"]


def in_a_process(script: str, *args: str) -> list[str]:
    """What ``script`` printed, run by a new interpreter on this one's path (it must end
    well), split into words."""
    env: dict[str, Any] = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    done = subprocess.run(
        [sys.executable, "-c", script, *args], capture_output=True, text=True, timeout=60, env=env
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_tracing_is_on_here() -> None:
    assert tracing.AVAILABLE
