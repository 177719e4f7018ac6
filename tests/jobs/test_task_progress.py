"""Progress and RetryLater checked before any I/O; progress outside a runner stores nothing;
Task.progress reads what a running attempt reported."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
import redis

import culex
from culex._redis import claims, reports
from culex._redis.keys import queue_keys
from culex.testing import perform_now

from ..conftest import driver_of


class PagesJob(culex.QueuedJob):
    queue = "pages"
    fraction: float = 0.5
    message: str | None = None

    def perform(self) -> bool:
        return self.progress(self.fraction, self.message)


@pytest.mark.parametrize(
    ("fraction", "message", "error", "text"),
    [
        (1.5, None, ValueError, "the fraction must be from 0 to 1, got 1.5"),
        (-0.1, None, ValueError, "the fraction must be from 0 to 1"),
        (math.nan, None, ValueError, "the fraction must be from 0 to 1, got nan"),
        (True, None, TypeError, "the fraction must be a number, got True"),
        ("0.5", None, TypeError, "the fraction must be a number"),
        (0.5, 42, TypeError, "the message must be a str or None, got 42"),
        (0.5, "x" * 1001, ValueError, "at most 1000 characters, got 1001"),
    ],
)
def test_progress_refuses_bad_arguments_with_a_clear_error(
    fraction: object, message: object, error: type[Exception], text: str
) -> None:
    job = PagesJob()
    with pytest.raises(error, match=text.replace("(", r"\(")):
        job.progress(fraction, message)  # type: ignore[arg-type]


def test_outside_a_runner_progress_stores_nothing_and_says_so() -> None:
    assert perform_now(PagesJob(fraction=0.25, message="x" * 1000)) is False


@pytest.mark.parametrize(
    ("delay", "error", "text"),
    [
        (-1, ValueError, "the delay must be from 0 to 31536000 s, got -1"),
        (timedelta(days=366), ValueError, "the delay must be from 0 to"),
        (math.inf, ValueError, "the delay must be from 0 to"),
        (math.nan, ValueError, "the delay must be from 0 to"),
        ("5", TypeError, "a timedelta or a number of seconds, got '5'"),
        (None, TypeError, "a timedelta or a number of seconds, got None"),
        (False, TypeError, "a timedelta or a number of seconds, got False"),
    ],
)
def test_retry_later_refuses_a_bad_delay_with_a_clear_error(
    delay: object, error: type[Exception], text: str
) -> None:
    with pytest.raises(error, match=text.replace("(", r"\(")):
        culex.RetryLater(delay)  # type: ignore[arg-type]


def test_retry_later_takes_a_timedelta_or_seconds() -> None:
    assert culex.RetryLater(timedelta(milliseconds=1500)).delay_ms == 1500
    assert culex.RetryLater(2).delay_ms == 2000
    assert culex.RetryLater(0).delay_ms == 0
    assert str(culex.RetryLater(0.25)) == "asked to run again in 0.25 s"


def test_task_progress_reads_the_last_report_and_none_before(r: redis.Redis) -> None:
    d = driver_of(r)
    task = PagesJob().enqueue()
    assert task.progress() is None
    keys = queue_keys("culex", "pages")
    claim = claims.claim(keys, limit=1, lease_ms=60_000, promote_limit=1, dead_ttl_ms=60_000)
    [claimed] = d.run(claim).tasks
    assert d.run(reports.progress(keys, task.id, claimed.attempt, 1 / 3, "a third"))
    found = task.progress()
    assert found is not None and found.fraction == pytest.approx(1 / 3)
    assert found == (found.fraction, "a third")
    assert culex.Task("nope", "pages").progress() is None  # no record
