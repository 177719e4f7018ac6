"""How an attempt ended (:class:`Outcome`), as the runner's loops hand it on to be
reported, and how logs name a claimed task."""

from __future__ import annotations

from datetime import timedelta

from .._redis.claims import Claimed
from ..jobs.task import task_name as named


class Outcome:
    """How an attempt ended: a result (success) with the job's own result_ttl, or an error
    with the retry delay (None: dead), and the exception behind it if any (for tracing)
    with its ``traceback`` (culex.jobs.failures; "" for none); or, with ``later_ms``, neither:
    the job asked to run again after that many ms (culex.RetryLater), which counts no
    failed attempt; or, with ``over``, nothing to report: a durable task suspended (a
    sleep, a wait for a signal) or found another attempt holds it (culex.jobs.steps).
    ``lines``: the attempt's log lines not sent yet, sent before its report."""

    __slots__ = (
        "claimed",
        "error",
        "exception",
        "later_ms",
        "lines",
        "over",
        "result_json",
        "result_ttl",
        "retry_delay_ms",
        "traceback",
    )

    def __init__(
        self,
        claimed: Claimed,
        result_json: str = "null",
        error: str | None = None,
        retry_delay_ms: int | None = None,
        result_ttl: float | timedelta | None = None,
        exception: BaseException | None = None,
        later_ms: int | None = None,
        traceback: str = "",
        over: str = "",
    ) -> None:
        self.claimed = claimed
        self.over = over  # why the attempt ended with nothing to report ("": it has one)
        self.traceback = traceback
        self.exception = exception
        self.result_json = result_json
        self.error = error
        self.retry_delay_ms = retry_delay_ms
        self.result_ttl = result_ttl
        self.later_ms = later_ms
        self.lines: list[str] = []


def task_name(claimed: Claimed) -> str:
    """How logs name a claimed task: ``emails<ID>``, as everywhere (culex.jobs.task.task_name),
    so that ``culex task`` takes the name as the log wrote it."""
    return named(claimed.queue, claimed.id)
