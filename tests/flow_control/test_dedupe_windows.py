"""A dedupe key kept after its task ended (issue 31): enqueue(dedupe_for=), the job's
dedupe_for, enqueue_many's dedupe_keys; the window on each way a task ends, past the task
hash's own expiry, and no longer; the windows pruned by later enqueues."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import redis

import culex
from culex._redis import interventions
from culex._redis.keys import queue_keys
from culex.testing import drain

from ..conftest import driver_of

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)

K = queue_keys("culex", "windows")


class WindowReportJob(culex.QueuedJob):
    queue = "windows"
    month: str = ""

    def perform(self) -> None:
        pass


class WindowDefaultJob(culex.QueuedJob):
    queue = "windows"
    dedupe_for = timedelta(hours=1)

    def perform(self) -> None:
        pass


class WindowFailingJob(culex.QueuedJob):
    queue = "windows"
    max_retries = 0

    def perform(self) -> None:
        raise RuntimeError("no")


def _close(r: redis.Redis, key: str) -> None:
    """Let the window of ``key`` end: its end moved to the server's past (no waiting)."""
    assert r.zscore(K.dedupe_windows, key) is not None
    r.zadd(K.dedupe_windows, {key: int(r.time()[0]) * 1000 - 1})


def test_within_the_window_the_ended_task_then_a_new_one(r: redis.Redis) -> None:
    first = WindowReportJob(month="11").enqueue(dedupe_key="m:11", dedupe_for=3600)
    assert first.info()["dedupe_for"] == "3600000"
    drain("windows")
    assert first.state() == "succeeded"
    again = WindowReportJob(month="other").enqueue(dedupe_key="m:11", dedupe_for=3600)
    assert (again, again.deduped) == (first, True)
    r.delete(K.task(first.id))  # the hash expired: the window holds on its own
    assert WindowReportJob().enqueue(dedupe_key="m:11").deduped
    _close(r, "m:11")
    fresh = WindowReportJob().enqueue(dedupe_key="m:11")
    assert fresh != first and not fresh.deduped
    assert r.zscore(K.dedupe_windows, "m:11") is None  # (the new task took the key)
    assert r.hget(K.dedupe, "m:11") == fresh.id.encode()


def test_without_a_window_the_key_is_free_at_the_end(r: redis.Redis) -> None:
    first = WindowReportJob().enqueue(dedupe_key="plain")
    drain("windows")
    assert WindowReportJob().enqueue(dedupe_key="plain") != first
    assert r.exists(K.dedupe_windows) == 0


def test_the_window_holds_after_dead_and_cancelled_not_after_delete(r: redis.Redis) -> None:
    dead = WindowFailingJob().enqueue(dedupe_key="dead", dedupe_for=60)
    drain("windows", fail_fast=False)
    assert dead.state() == "dead"
    assert WindowFailingJob().enqueue(dedupe_key="dead") == dead
    cancelled = WindowReportJob().enqueue(dedupe_key="cancelled", dedupe_for=60, delay=3600)
    assert cancelled.cancel()
    assert WindowReportJob().enqueue(dedupe_key="cancelled") == cancelled
    deleted = WindowReportJob().enqueue(dedupe_key="deleted", dedupe_for=60, delay=3600)
    driver_of(r).run(interventions.delete(K, [deleted.id]))
    assert WindowReportJob().enqueue(dedupe_key="deleted") != deleted


def test_the_window_holds_after_a_claim_buries_an_expired_task(r: redis.Redis) -> None:
    late = WindowReportJob().enqueue(dedupe_key="late", dedupe_for=60, expires=3600)
    r.hset(K.task(late.id), "expires_at", 1)  # (its expiry passed: no waiting for it)
    drain("windows")
    assert (late.state(), late.info()["last_error"]) == ("dead", "expired")
    assert WindowReportJob().enqueue(dedupe_key="late") == late


def test_the_class_window_and_enqueue_s_override(r: redis.Redis) -> None:
    by_class = WindowDefaultJob().enqueue(dedupe_key="a")
    by_call = WindowDefaultJob().enqueue(dedupe_key="b", dedupe_for=5)
    no_key = WindowDefaultJob().enqueue()
    assert by_class.info()["dedupe_for"] == "3600000"
    assert by_call.info()["dedupe_for"] == "5000"
    assert "dedupe_for" not in no_key.info()


def test_ended_windows_are_pruned_by_later_enqueues(r: redis.Redis) -> None:
    tasks = culex.enqueue_many(
        [WindowReportJob() for _ in range(6)], dedupe_keys=[f"k{i}" for i in range(6)],
        dedupe_for=60,
    )  # fmt: skip
    drain("windows")
    assert r.zcard(K.dedupe_windows) == 6
    for i in range(6):
        _close(r, f"k{i}")
    WindowReportJob().enqueue(dedupe_key="other")  # prunes up to 4
    WindowReportJob().enqueue(dedupe_key="another")
    assert r.zcard(K.dedupe_windows) == 0
    assert set(r.hkeys(K.dedupe)) == {b"other", b"another"}
    assert len({t.id for t in tasks}) == 6


def test_enqueue_many_with_keys_duplicates_in_one_batch_too(r: redis.Redis) -> None:
    held = WindowReportJob(month="held").enqueue(dedupe_key="held", delay=3600)
    tasks = culex.enqueue_many(
        [WindowReportJob(month=str(i)) for i in range(5)],
        dedupe_keys=["held", "x", None, "x", None],
    )
    assert [t.deduped for t in tasks] == [True, False, False, True, False]
    assert tasks[0] == held and tasks[3] == tasks[1]
    assert len({t.id for t in tasks}) == 4
    assert r.zcard(K.waiting) == 3


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [({"dedupe_for": 60}, TypeError, "dedupe_key"),
     ({"dedupe_key": "k", "dedupe_for": 0}, ValueError, "dedupe_for"),
     ({"dedupe_key": "k", "dedupe_for": -1}, ValueError, "dedupe_for"),
     ({"dedupe_key": "k", "dedupe_for": 367 * 86400}, ValueError, "366 days"),
     ({"dedupe_key": "k", "dedupe_for": "1h"}, ValueError, "dedupe_for")],
)  # fmt: skip
def test_bad_windows_are_refused_before_any_io(
    r: redis.Redis, options: dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        WindowReportJob().enqueue(**options)
    assert r.dbsize() == 0


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [({"dedupe_keys": "k"}, TypeError, "dedupe_keys"),
     ({"dedupe_keys": ["k"]}, ValueError, "one per job"),
     ({"dedupe_keys": ["k", ""]}, ValueError, "dedupe_key"),
     ({"dedupe_for": 5}, TypeError, "dedupe_key")],
)  # fmt: skip
def test_bad_batch_keys_are_refused_before_any_io(
    r: redis.Redis, options: dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        culex.enqueue_many([WindowReportJob(), WindowReportJob()], **options)
    assert r.dbsize() == 0


def test_a_bad_class_window_is_refused_when_the_class_is_defined() -> None:
    with pytest.raises(ValueError, match="dedupe_for"):

        class Bad(culex.QueuedJob, abstract=True):
            dedupe_for = 0

            def perform(self) -> None:
                pass
