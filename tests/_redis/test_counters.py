"""The counters the scripts that end tasks write: state before -> call -> state after."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
import redis

from culex import ServerError
from culex._redis import claims, enqueuing, interventions, reports
from culex._redis.calls import Call
from culex._redis.drivers import SyncDriverProtocol
from culex._redis.keys import queue_keys

from ..conftest import driver_of, server_ms, snapshot

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)

K = queue_keys("culex", "q")
DAY_MS = 86_400_000


def put(d: SyncDriverProtocol, task_id: str, job: str = "NoopJob", max_retries: int = 4) -> None:
    d.run(
        enqueuing.enqueue(K, task_id, job, "{}", due_ms=None, delay_ms=0, max_retries=max_retries)
    )


def claim(d: SyncDriverProtocol, limit: int = 100) -> list[claims.Claimed]:
    return d.run(
        claims.claim(K, limit=limit, lease_ms=30_000, promote_limit=100, dead_ttl_ms=DAY_MS)
    ).tasks


def started(r: redis.Redis, task_id: str, ms_ago: int) -> None:
    """Make the task's attempt look as if it started ``ms_ago`` ms ago."""
    r.hset(K.task(task_id), "started_at", server_ms(r) - ms_ago)


def counter_keys(r: redis.Redis) -> list[str]:
    return sorted(k.decode() for k in cast(list[bytes], r.keys("culex:{q}:stats:*")))


def this_minute(r: redis.Redis) -> str:
    """The minute bucket the scripts write to now (the test fails if there is another)."""
    (minute,) = (k for k in counter_keys(r) if ":stats:m:" in k)
    return minute


def fields(r: redis.Redis, key: str) -> dict[str, int]:
    """A counters hash's counts (the totals' own field ``minute`` left out)."""
    raw = cast(dict[bytes, bytes], r.hgetall(key))
    return {k.decode(): int(v) for k, v in raw.items() if k != b"minute"}


def unfolded(r: redis.Redis) -> int:
    """The minute the totals name as not yet added to its hour and to them."""
    return int(r.hget(K.stats_total, "minute") or -1)


def hincrbys(r: redis.Redis) -> int:
    stats = r.info("commandstats").get("cmdstat_hincrby", {"calls": 0})
    return int(stats["calls"])


def test_complete_counts_a_batch_once_per_field_in_the_minute(r: redis.Redis) -> None:
    d = driver_of(r)
    for i in range(40):
        put(d, f"a{i}", "AJob")
    put(d, "b0", "BJob")
    tasks = claim(d)
    for i in range(40):
        started(r, f"a{i}", 3000)  # (2.5, 5] s: bucket 9
    started(r, "b0", 70)  # (50, 100] ms: bucket 4
    assert counter_keys(r) == []
    before = hincrbys(r)
    refused = d.run(reports.complete(K, [(t.id, t.attempt, "null", 1000) for t in tasks]))
    after = server_ms(r)
    assert refused == []
    minute = this_minute(r)
    assert minute == K.stats_minute(after // 1000 // 60 * 60)
    counts = fields(r, minute)
    a_ms = counts.pop("AJob|ms")
    assert 40 * 3000 <= a_ms < 40 * 5000
    assert 70 <= counts.pop("BJob|ms") <= 100
    assert counts == {"AJob|s9": 40, "BJob|s4": 1}
    # 4 fields, each written once: not once per task; the hour and the totals get the
    # minute once a later one is counted
    assert hincrbys(r) - before == 4
    assert counter_keys(r) == sorted([minute, K.stats_total])
    assert fields(r, K.stats_total) == {} and unfolded(r) == after // 1000 // 60 * 60
    assert r.pttl(minute) == -1 and r.pttl(K.stats_total) == -1  # (until it is folded)


def test_the_first_count_of_a_later_minute_folds_the_last_one_into_its_hour_and_the_totals(
    r: redis.Redis,
) -> None:
    d = driver_of(r)
    old = (server_ms(r) // 1000 // 3600 - 5) * 3600 + 120  # a minute 5 hours ago
    r.hset(K.stats_minute(old), mapping={"AJob|s3": 2, "AJob|ms": 70, "AJob|f": 1})
    r.hset(K.stats_hour(old - 120), mapping={"AJob|s3": 5})  # the minutes before it
    r.hset(K.stats_total, mapping={"AJob|s3": 9, "minute": old})
    put(d, "t")
    (task,) = claim(d)
    started(r, "t", 3000)
    d.run(reports.complete(K, [("t", task.attempt, "null", 1000)]))
    assert fields(r, K.stats_hour(old - 120)) == {"AJob|s3": 7, "AJob|ms": 70, "AJob|f": 1}
    assert fields(r, K.stats_total) == {"AJob|s3": 11, "AJob|ms": 70, "AJob|f": 1}
    assert 8 * DAY_MS - 60_000 < r.pttl(K.stats_hour(old - 120)) <= 8 * DAY_MS
    assert 2 * DAY_MS - 60_000 < r.pttl(K.stats_minute(old)) <= 2 * DAY_MS
    current = unfolded(r)
    assert current > old
    counts = fields(r, K.stats_minute(current))
    assert 3000 <= counts.pop("NoopJob|ms") < 5000 and counts == {"NoopJob|s9": 1}
    assert r.pttl(K.stats_minute(current)) == -1


def test_a_clock_that_went_back_counts_in_the_hour_and_totals_at_once(r: redis.Redis) -> None:
    d = driver_of(r)
    later = (server_ms(r) // 1000 // 60 + 600) * 60  # the totals name a minute 10 h on
    r.hset(K.stats_total, "minute", later)
    put(d, "t")
    (task,) = claim(d)
    started(r, "t", 3000)
    d.run(reports.complete(K, [("t", task.attempt, "null", 1000)]))
    minute = next(k for k in counter_keys(r) if ":stats:m:" in k)
    start = int(minute.rsplit(":", 1)[1])
    counts = fields(r, minute)
    assert fields(r, K.stats_hour(start - start % 3600)) == counts
    assert fields(r, K.stats_total) == counts and unfolded(r) == later
    assert 2 * DAY_MS - 60_000 < r.pttl(minute) <= 2 * DAY_MS


def test_a_refused_report_counts_nothing(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "t")
    (task,) = claim(d)
    before = snapshot(r)
    late = [("t", task.attempt + 1, "null", 1000)]
    assert d.run(reports.complete(K, late)) == [("t", task.attempt + 1)]
    stale = reports.fail(
        K, "t", task.attempt + 1, "x", retry_delay_ms=0, dead_ttl_ms=DAY_MS, dead_max=10
    )
    assert d.run(stale) is None
    assert snapshot(r) == before


def test_fail_counts_failed_with_a_retry_and_dead_without(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "retried")
    put(d, "buried")
    tasks = {t.id: t for t in claim(d)}
    started(r, "retried", 1500)  # (1, 2.5] s: bucket 8
    started(r, "buried", 400_000)  # above 300 s: bucket 14
    retry = reports.fail(
        K,
        "retried",
        tasks["retried"].attempt,
        "x",
        retry_delay_ms=5000,
        dead_ttl_ms=DAY_MS,
        dead_max=10,
    )
    assert d.run(retry) == "scheduled"
    minute = this_minute(r)
    counts = fields(r, minute)
    assert 1500 <= counts.pop("NoopJob|ms") < 2500
    assert counts == {"NoopJob|f8": 1}
    bury = reports.fail(
        K,
        "buried",
        tasks["buried"].attempt,
        "x",
        retry_delay_ms=None,
        dead_ttl_ms=DAY_MS,
        dead_max=10,
    )
    assert d.run(bury) == "dead"
    assert this_minute(r) == minute
    counts = fields(r, minute)
    assert 401_500 <= counts.pop("NoopJob|ms") < 403_000
    assert counts == {"NoopJob|f8": 1, "NoopJob|d14": 1}
    assert fields(r, K.stats_total) == {}  # (until a later minute is counted)


def test_a_task_without_started_at_is_counted_without_a_run_time(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "t")
    (task,) = claim(d)
    r.hset(K.task("t"), "started_at", "not a time")
    d.run(reports.complete(K, [("t", task.attempt, "null", 1000)]))
    assert fields(r, this_minute(r)) == {"NoopJob|s": 1}


def test_a_run_time_of_0_ms_writes_no_sum(
    r: redis.Redis,
) -> None:
    d = driver_of(r)
    put(d, "t")
    put(d, "u")
    first, second = claim(d)
    r.hset(K.task("t"), "started_at", server_ms(r) + 60_000)  # (later than now: 0 ms)
    d.run(reports.complete(K, [("t", first.attempt, "null", 1000)]))
    minute = this_minute(r)
    assert fields(r, minute) == {"NoopJob|s0": 1}
    r.hset(K.task("u"), "started_at", server_ms(r) + 60_000)
    d.run(reports.complete(K, [("u", second.attempt, "null", 1000)]))
    if this_minute(r) == minute:  # (else the minute turned between the calls)
        assert fields(r, minute) == {"NoopJob|s0": 2}


def test_reclaim_counts_lost_attempts_without_a_run_time(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "again", "AJob")
    put(d, "gone", "BJob")
    r.hset(K.task("gone"), "stalls", 3)  # its last stall allowed
    claim(d)
    r.zadd(K.pending, {"again": 1, "gone": 1})  # their leases expired long ago
    moved = d.run(claims.reclaim(K, limit=10, dead_ttl_ms=DAY_MS, dead_max=10))
    assert dict(moved) == {"again": "waiting", "gone": "dead"}
    assert fields(r, this_minute(r)) == {"AJob|f": 1, "BJob|d": 1}


def test_reclaim_with_nothing_expired_writes_no_counters(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "t")
    claim(d)
    before = snapshot(r)
    assert d.run(claims.reclaim(K, limit=10, dead_ttl_ms=DAY_MS, dead_max=10)) == []
    assert snapshot(r) == before


def test_claim_counts_a_buried_task_as_dead(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "good", "AJob")
    put(d, "bad", "BJob")
    r.hset(K.task("bad"), "attempt", "x")  # not a whole number: buried
    r.zadd(K.waiting, {"ghost": 0})  # no hash at all: buried, job ""
    assert [t.id for t in claim(d)] == ["good"]
    assert fields(r, this_minute(r)) == {"BJob|d": 1, "|d": 1}


def test_a_claim_that_buries_nothing_and_cancel_count_nothing(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "t")
    put(d, "u")
    claim(d, limit=1)
    cancel = interventions.cancel(K, "u", "", dead_ttl_ms=DAY_MS, dead_max=10)
    assert d.run(cancel) == interventions.CANCELLED
    assert counter_keys(r) == []


def test_a_counter_key_of_another_type_does_not_stop_a_report(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "t")
    (task,) = claim(d)
    r.set(K.stats_total, "not a hash")
    started(r, "t", 3000)
    assert d.run(reports.complete(K, [("t", task.attempt, "null", 1000)])) == []
    assert r.hget(K.task("t"), "state") == b"succeeded"
    assert r.get(K.stats_total) == b"not a hash"
    counts = fields(r, this_minute(r))
    assert 0 < r.pttl(this_minute(r)) <= 2 * DAY_MS  # (no totals to fold it into: it ends)
    assert 3000 <= counts.pop("NoopJob|ms") < 5000
    assert counts == {"NoopJob|s9": 1}


@pytest.mark.parametrize("script", ["claim", "complete", "fail", "reclaim"])
def test_a_call_without_the_counters_prefix_is_refused_before_any_write(
    r: redis.Redis, script: str
) -> None:
    d = driver_of(r)
    put(d, "t")
    if script != "claim":
        (task,) = claim(d)
        r.zadd(K.pending, {"t": 1})  # (expired: reclaim has work)
    calls: dict[str, Callable[[], Call[Any]]] = {
        "claim": lambda: claims.claim(
            K, limit=1, lease_ms=1000, promote_limit=1, dead_ttl_ms=DAY_MS
        ),
        "complete": lambda: reports.complete(K, [("t", task.attempt, "null", 1000)]),
        "fail": lambda: reports.fail(
            K, "t", task.attempt, "x", retry_delay_ms=None, dead_ttl_ms=DAY_MS, dead_max=10
        ),
        "reclaim": lambda: claims.reclaim(K, limit=10, dead_ttl_ms=DAY_MS, dead_max=10),
    }
    call = calls[script]()
    before = snapshot(r)
    with pytest.raises(ServerError, match="counters prefix"):
        # (the keys before it: the dedupe hash, an optional key, comes after it)
        d.run(call._replace(keys=call.keys[: call.keys.index(K.stats_prefix)]))
    assert snapshot(r) == before
