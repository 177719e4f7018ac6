"""One attempt of one task: prepare it, run the job's hooks and perform, judge the outcome.

No Redis here: the runner turns an :class:`Outcome` into a fenced report.
"""

from __future__ import annotations

import asyncio
import contextvars
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from functools import partial
from typing import Any

from .. import logs
from .._redis.claims import Claimed
from .._redis.scripts import MOST
from ..config import seconds
from ..errors import AttemptOver, JobFailure, RetryLater, short
from ..jobs import retry_policy
from ..jobs.failures import folded, traceback_of
from ..jobs.job import Job
from ..jobs.progress import Reporting
from ..jobs.registry import JobRegistry
from ..jobs.task_logs import LogBuffer, unbeaten
from ..middleware.hooks import ParamsUnreadable, read_headers
from ..server.procedures import Outage
from .attempt_span import performing
from .isolation import ChildDied, ChildRaised, run_in_process
from .lease import LeaseKeeper
from .outcome import Outcome, task_name
from .wrapping import around_async, around_sync, configured, opened_params

logger = logging.getLogger("culex")


class Preparation:
    """How a claimed task becomes the job object its attempt runs, the same for a runner
    and for culex.testing's drain: decoded with the job class ``jobs`` knows for its type,
    its own lease checked (and given to ``hold`` when it is not ``default_lease_ms``), and
    told where its queue's progress goes (``reporting``, one per queue); its log lines'
    buffer is given to ``lines`` (the runner's heartbeat sends them); ``outage`` gives how
    its own calls are held through a server outage (None: they raise)."""

    __slots__ = (
        "default_lease_ms", "hold", "jobs", "lines", "max_payload_bytes", "outage", "reporting"
    )  # fmt: skip

    def __init__(
        self,
        jobs: JobRegistry,
        max_payload_bytes: int,
        reporting: Mapping[str, Reporting],
        *,
        default_lease_ms: int = 0,
        hold: Callable[[Claimed, int], object] | None = None,
        lines: Callable[[Claimed, LogBuffer], None] | None = None,
    ) -> None:
        self.jobs = jobs
        self.lines = lines
        self.max_payload_bytes = max_payload_bytes
        self.reporting = reporting
        self.default_lease_ms = default_lease_ms
        self.hold = hold  # (None: the lease outlasts the whole run, as a drain's does)
        self.outage: Callable[[Claimed], Outage] | None = None

    def keep(self, keeper: LeaseKeeper) -> None:
        """Leases held by ``keeper``: a job's own lease, its log lines, its calls held
        through a server outage."""
        self.hold, self.lines, self.outage = keeper.hold, keeper.keep_lines, keeper.outage

    def prepare(self, claimed: Claimed) -> Job | Outcome:
        """The job object to run, set up; or the dead Outcome of a broken task: whatever
        raises on the way (decode's own errors, a lease that is no duration) makes it
        broken, never escapes."""
        try:
            job = decode(claimed, self.jobs, self.max_payload_bytes)
            if isinstance(job, Outcome):
                return job
            if job.lease is not None:  # the job's own lease, checked and set at once
                # (at most the longest heartbeat.lua takes, as the setting is: config.py)
                lease_ms = min(MOST, round(seconds(job.lease, "lease") * 1000))
                if lease_ms != self.default_lease_ms and self.hold is not None:
                    self.hold(claimed, lease_ms)
            job.reporting_ = self.reporting[claimed.queue]
            if self.outage is not None:
                job.outage_ = self.outage(claimed)
            # (a buffer for its log lines is made by its first line: most tasks log none)
            job.log_keep_ = unbeaten if self.lines is None else partial(self.lines, claimed)
            if claimed.headers:  # (the middleware's, written at enqueue: ValueError if bad)
                job.headers_ = read_headers(claimed.headers)
        except Exception as exc:  # (decode's own are caught there: this is the rest)
            return broken(claimed, f"{type(exc).__name__}: {exc}", exc)
        return job


def decode(claimed: Claimed, registry: JobRegistry, max_payload_bytes: int) -> Job | Outcome:
    """The job object to run, or a dead Outcome when the task is broken (hworker's rule):
    whatever decoding raises (a RecursionError from params nested too deep, any error of a
    param's decoder or a ``deserialize_<type>`` hook) makes it broken, never escapes."""
    if len(claimed.params) > max_payload_bytes:
        return broken(
            claimed, f"params take {len(claimed.params)} bytes, more than max_payload_bytes"
        )
    job_class = registry.get(claimed.type)
    if job_class is None:
        return broken(claimed, f"unknown job type {short(claimed.type, 210)}")
    stored, plan = claimed.params, configured()
    if plan is not None and plan.openers:  # (opened by the middleware: decrypted)
        try:
            stored = opened_params(claimed, plan.openers)
        except ParamsUnreadable as exc:
            return broken(claimed, str(exc), exc.__cause__)
    try:
        raw = _params(stored)
    except ValueError as exc:  # also bytes that are not UTF-8
        return broken(claimed, f"params are not valid JSON: {exc}")
    except Exception as exc:  # a RecursionError: nested deeper than the decoder goes
        return broken(claimed, f"params cannot be read: {type(exc).__name__}: {exc}", exc)
    try:
        job = job_class.from_params(raw)
    except (ValueError, TypeError) as exc:  # (a hook's own error is its cause: traceback)
        if isinstance(raw, dict) and "$encrypted" in raw:  # (no middleware opened them)
            return broken(claimed, "params are encrypted and this runner has no "
                          "EncryptedParams to open them (docs/middleware.md)")  # fmt: skip
        return broken(claimed, str(exc), exc)
    except Exception as exc:  # whatever a param's decoder raises
        return broken(claimed, f"{type(exc).__name__}: {exc}", exc)
    job.task_id = claimed.id
    job.attempt = claimed.attempt
    job.retry_count = claimed.retry_count
    return job


_read_json = json.JSONDecoder().decode


def _params(stored: bytes) -> object:
    """The params a task stored: JSON in UTF-8 (wire-format.md); none is no params."""
    if not stored or stored == b"{}":  # (a job without params: the common case, no parse)
        return {}
    return _read_json(stored.decode())


def broken(claimed: Claimed, reason: str, raised: BaseException | None = None) -> Outcome:
    """The dead Outcome of a task that cannot run, logged, with the traceback of what
    ``raised`` if anything did."""
    reason = f"broken task: {reason}"
    stack = "" if raised is None else traceback_of(raised)
    logger.error(
        "task %s cannot run and goes to dead: %s%s",
        task_name(claimed),
        reason,
        _below(stack, claimed),
    )
    return Outcome(claimed, error=reason, traceback=stack)


def attempt(job: Job, claimed: Claimed, pool: Executor) -> Awaitable[Outcome]:
    """One attempt, judged, in its span when tracing is on. Its await never raises but
    for cancellation."""
    return performing(job, claimed, _judged(job, claimed, pool))


def with_lines(job: Job, outcome: Outcome) -> Outcome:
    """``outcome``, with the attempt's log lines not sent yet (they go before its report)."""
    if job.log_buffer_ is not None:
        outcome.lines = job.log_buffer_.take()
    return outcome


async def _judged(job: Job, claimed: Claimed, pool: Executor) -> Outcome:
    started = time.perf_counter()
    timeout = None if job.timeout is None else seconds(job.timeout, "timeout")
    plan = configured()
    try:
        if job.async_perform_:
            if plan is not None and plan.aaround:  # (around the hooks and perform)
                ran = await around_async(plan.aaround, job, lambda: _run_async(job, timeout))
            else:
                ran = await _run_async(job, timeout)
            result_json = job.result_text(ran)
        else:
            run = around_sync(plan.around, _run_sync) if plan and plan.around else _run_sync
            if job.isolation == "process":  # (the middleware runs in the child)
                loop = asyncio.get_running_loop()
                result_json = await loop.run_in_executor(pool, run_in_process, job, run, timeout)
            else:
                result_json = job.result_text(await _run_in_thread(job, pool, timeout, run))
    except AttemptOver as over:
        said = _OVER.get(over.why, over.why)
        logs.task_line(logger, "task %s %s, taking %s", task_name(claimed), said, _took(started))
        return Outcome(claimed, over=over.why)
    except JobFailure as exc:
        return _failed(job, claimed, exc.reason, exc.retry, started, exc)
    except RetryLater as exc:
        return _later(job, claimed, exc, started)
    except OverTime as exc:  # (reported as the TimeoutError it is, with the limit in it)
        reason = f"timed out after {timeout} s"
        limit = TimeoutError(reason).with_traceback(exc.__traceback__)
        return _failed(job, claimed, reason, True, started, limit)
    except TimeoutError as exc:  # (the process child, killed at the limit)
        if job.isolation == "process":
            return _failed(job, claimed, f"timed out after {timeout} s", True, started, exc)
        return _failed(job, claimed, f"{type(exc).__name__}: {exc}", True, started, exc)
    except (ChildRaised, ChildDied) as exc:
        return _failed(job, claimed, str(exc), True, started, exc)
    except Exception as exc:
        return _failed(job, claimed, f"{type(exc).__name__}: {exc}", True, started, exc)
    if logger.isEnabledFor(logging.INFO):
        logs.task_line(logger, "task %s succeeded, took %s", task_name(claimed), _took(started))
    return Outcome(claimed, result_json, result_ttl=job.result_ttl)


async def _run_in_thread(
    job: Job, pool: Executor, timeout: float | None, run: Callable[[Job], Any]
) -> Any:
    loop = asyncio.get_running_loop()
    context = contextvars.copy_context()
    future = loop.run_in_executor(pool, context.run, run, job)
    if timeout is None:
        return await future
    try:
        return await asyncio.wait_for(future, timeout)
    except TimeoutError:
        if not future.cancelled():  # (perform's own TimeoutError: a failure like any other)
            raise
        logger.warning(
            "[%s] timed out; its thread cannot be stopped and runs on "
            '(isolation = "process" kills the work at the limit)',
            job.type_,
        )
        raise OverTime from None


class OverTime(Exception):
    """A perform ran past its job's ``timeout`` (told apart from a TimeoutError that
    perform raised itself, e.g. a socket's, which fails the attempt with its own message)."""


def _run_sync(job: Job) -> Any:
    kind = type(job)  # (a hook the class leaves as Job's does nothing: it is not called)
    try:
        if kind.before_perform is not Job.before_perform:
            job.before_perform()
        return job.perform()
    finally:
        if kind.after_perform is not Job.after_perform:
            _after(job)


async def _run_async(job: Job, timeout: float | None) -> Any:
    kind = type(job)  # (a hook the class leaves as Job's does nothing: it is not called)
    try:
        if kind.before_perform is not Job.before_perform:
            await _maybe_await(job.before_perform)
        if timeout is None:
            return await job.perform()
        try:
            async with asyncio.timeout(timeout) as limit:
                return await job.perform()
        except TimeoutError:
            if limit.expired():
                raise OverTime from None
            raise  # (perform's own TimeoutError: a failure like any other)
    finally:
        if kind.after_perform is not Job.after_perform:
            await _maybe_await(_after, job)


def _after(job: Job) -> Any:
    # after_perform always runs; its own failure is logged and does not change the outcome.
    try:
        return job.after_perform()
    except Exception:
        logger.exception("[%s] after_perform raised", job.type_)
        return None


async def _maybe_await(hook: Callable[..., Any], *args: Any) -> None:
    result = hook(*args)
    if inspect.isawaitable(result):
        try:
            await result
        except Exception:
            if hook is _after:
                logger.exception("[%s] after_perform raised", args[0].type_)
            else:
                raise


def _failed(
    job: Job, claimed: Claimed, reason: str, retry: bool, started: float, raised: BaseException
) -> Outcome:
    reason = reason or "failed"
    delay_ms: int | None = None
    # retry_on: the child of a process job decided it (it had the exception); a child that
    # died raised nothing (a crash, as a stall, is not the policy's); self.fail()'s
    # JobFailure is the job's own decision (retry_policy.retries)
    if not retry or isinstance(raised, ChildDied):
        unlisted = False
    elif isinstance(raised, ChildRaised):
        unlisted = not raised.retries
    else:
        unlisted = not retry_policy.retries(job, raised)
    if retry and not unlisted:
        try:
            delay_ms = job.retry_delay_ms(claimed.retry_count + 1, claimed.max_retries)
            if delay_ms is not None:
                delay_ms = retry_policy.shaped_delay_ms(job, delay_ms)
        except Exception as exc:
            reason = f"{reason}; and the retry policy raised {type(exc).__name__}: {exc}"
    took = _took(started)
    # (a child process's own traceback: the one its ChildRaised has would be the parent's)
    stack = raised.traceback if isinstance(raised, ChildRaised) else traceback_of(raised)
    # (self.fail(reason) is the job's own decision, its reason all there is to say: one
    # line, no traceback; the task keeps it, for culex task)
    logged = "" if isinstance(raised, JobFailure) else stack
    if delay_ms is None:
        logger.warning(
            "Failure: task %s failed, taking %s and cannot be rescheduled%s (%s)%s",
            task_name(claimed),
            took,
            ": retry_on does not list it" if unlisted else "",
            reason,
            _below(logged, claimed),
        )
    else:
        logger.warning(
            "Failure: task %s failed, taking %s and will run again in %s (%s)%s",
            task_name(claimed),
            took,
            _clock(delay_ms),
            reason,
            _below(logged, claimed),
        )
    return Outcome(
        claimed, error=reason, retry_delay_ms=delay_ms, exception=raised, traceback=stack
    )


def _below(stack: str, claimed: Claimed) -> str:
    """A traceback on the lines below a log line's own ("" for none), culex's own frames
    before the job's folded (the task keeps it whole: ``culex task NAME --full``)."""
    if not stack:
        return ""
    return "\n" + folded(stack, f"culex task {task_name(claimed)} --full").rstrip("\n")


def _later(job: Job, claimed: Claimed, asked: RetryLater, started: float) -> Outcome:
    """The job pushed back: its task runs again after the delay, no failure counted. A
    RetryLater whose delay_ms is not a whole number >= 0 (a subclass that skipped its
    checks) fails the attempt as any error does."""
    delay_ms = getattr(asked, "delay_ms", None)
    if isinstance(delay_ms, bool) or not isinstance(delay_ms, int) or delay_ms < 0:
        reason = f"RetryLater without a usable delay_ms: {short(delay_ms)}"
        return _failed(job, claimed, reason, True, started, asked)
    logger.info(
        "task %s asked to run again in %s, taking %s (no failure counted)",
        task_name(claimed),
        _clock(delay_ms),
        _took(started),
    )
    return Outcome(claimed, later_ms=delay_ms)


_OVER = {
    "suspended": "suspended (it sleeps, or waits for a signal)",
    "stale": "stopped: another attempt holds it (its lease was lost)",
    "outage": "stopped: the server was out of reach past its lease (it runs again, as a stall)",
}


def _took(started: float) -> str:
    return f"{(time.perf_counter() - started) * 1000:.1f} ms"


def _clock(ms: int) -> str:
    """00:00:02 for 2 s, as Mosquito prints a retry delay."""
    total = ms // 1000
    return f"{total // 3600:02d}:{total % 3600 // 60:02d}:{total % 60:02d}"
