"""Priorities and dedupe keys as a producer sees them (issue 18): the Job's setting and
enqueue's arguments, checked before any I/O; the Task handle of a deduped enqueue; the
latency and the listings of a queue whose tasks have priorities."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

import culex
from culex._redis import claims
from culex._redis.keys import queue_keys
from culex._redis.priority import priority_of
from culex.operations import inspection

from ..conftest import driver_of, snapshot

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)


class MonthlyReportJob(culex.QueuedJob):
    queue = "reports"
    priority = 3
    month: str = ""

    def perform(self) -> None:
        pass


class BacklogJob(culex.QueuedJob):
    queue = "reports"

    def perform(self) -> None:
        pass


K = queue_keys("culex", "reports")


@pytest.mark.parametrize(
    ("value", "error"), [(True, TypeError), ("1", TypeError), (1.0, TypeError), (101, ValueError),
                         (-101, ValueError)],
)  # fmt: skip
def test_a_bad_priority_is_refused_when_the_class_is_defined(value: Any, error: type) -> None:
    with pytest.raises(error, match="priority"):

        class Bad(culex.QueuedJob, abstract=True):
            priority = value

            def perform(self) -> None:
                pass


def test_a_periodic_job_takes_no_priority() -> None:
    with pytest.raises(TypeError, match="priority 0"):

        class Tick(culex.PeriodicJob, abstract=True):
            run_every = 60
            priority = 5

            def perform(self) -> None:
                pass


@pytest.mark.parametrize(
    ("options", "error", "match"),
    [({"priority": True}, TypeError, "priority"), ({"priority": 100.0}, TypeError, "priority"),
     ({"priority": 101}, ValueError, "-100 .. 100"), ({"dedupe_key": ""}, ValueError, "dedupe"),
     ({"dedupe_key": "k" * 501}, ValueError, "500"), ({"dedupe_key": 7}, TypeError, "dedupe")],
)  # fmt: skip
def test_bad_enqueue_arguments_are_refused_before_any_io(
    r: redis.Redis, options: dict[str, Any], error: type, match: str
) -> None:
    with pytest.raises(error, match=match):
        MonthlyReportJob().enqueue(**options)
    assert r.dbsize() == 0


def test_the_class_priority_and_enqueue_s_override(r: redis.Redis) -> None:
    by_class = MonthlyReportJob().enqueue()
    by_call = MonthlyReportJob().enqueue(priority=-4)
    many = culex.enqueue_many([BacklogJob(), BacklogJob()], priority=9)
    assert [int(t.info().get("priority", 0)) for t in (by_class, by_call, *many)] == [3, -4, 9, 9]
    assert [priority_of(r.zscore(K.waiting, t.id) or 0) for t in (by_class, by_call)] == [3, -4]
    assert BacklogJob().enqueue().info().get("priority") is None  # 0: no field


def test_a_backlog_runs_the_highest_priority_first_fifo_within_one(r: redis.Redis) -> None:
    low = [BacklogJob().enqueue(priority=-1) for _ in range(3)]
    plain = culex.enqueue_many([BacklogJob() for _ in range(3)])
    high = [MonthlyReportJob().enqueue(priority=50) for _ in range(3)]
    claimed = driver_of(r).run(
        claims.claim(K, limit=9, lease_ms=1000, promote_limit=9, dead_ttl_ms=1000)
    )
    assert [t.id for t in claimed.tasks] == [t.id for t in (*high, *plain, *low)]


def test_dedupe_returns_the_live_task_then_frees_the_key_when_it_ends(r: redis.Redis) -> None:
    first = MonthlyReportJob(month="2026-11").enqueue(dedupe_key="report:2026-11", delay=3600)
    assert not first.deduped
    before = snapshot(r)
    again = MonthlyReportJob(month="other").enqueue(dedupe_key="report:2026-11")
    assert (again, again.deduped) == (first, True)
    assert snapshot(r) == before
    assert first.cancel()
    assert r.exists(K.dedupe) == 0
    third = MonthlyReportJob().enqueue(dedupe_key="report:2026-11")
    assert third != first and not third.deduped


async def test_two_concurrent_producers_with_one_key_get_one_task(r: redis.Redis) -> None:
    tasks = await asyncio.gather(
        *(MonthlyReportJob(month=str(i)).aenqueue(dedupe_key="once") for i in range(20))
    )
    assert len({t.id for t in tasks}) == 1
    assert sum(not t.deduped for t in tasks) == 1
    assert r.zcard(K.waiting) == 1


def test_enqueue_many_takes_no_dedupe_key() -> None:
    with pytest.raises(TypeError, match="dedupe_key"):
        culex.enqueue_many([MonthlyReportJob()], dedupe_key="k")  # type: ignore[call-arg]


def test_latency_and_listings_read_the_ready_time_out_of_the_score(r: redis.Redis) -> None:
    now_ms = int(r.time()[0]) * 1000
    old = BacklogJob().enqueue(id="old")
    r.zadd(K.waiting, {old.id: now_ms - 60_000})  # priority 0, ready a minute ago
    urgent = MonthlyReportJob().enqueue(priority=100, id="urgent")
    latency = inspection.queue_latency(queues=["reports"])["reports"]
    # the task that runs next, ready since this test began: not "old", nor 2^42 ms off
    assert 0 <= latency < 60
    page = inspection.tasks("reports", "waiting", newest_first=False)
    assert [(row.id, row.priority) for row in page.rows] == [(urgent.id, 100), (old.id, 0)]
    assert page.rows[1].at == (now_ms - 60_000) / 1000
    assert page.rows[0].at == int(urgent.info()["enqueue_time"]) / 1000  # not its score
    found = inspection.find_task("reports", "urgent")
    assert found is not None and (found.priority, found.at) == (100, page.rows[0].at)
