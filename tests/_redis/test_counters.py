"""The counters the scripts that end tasks write: state before -> call -> state after."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import pytest
import redis

from culex import ServerError
from culex._redis import operations
from culex._redis.drivers import SyncDriverProtocol
from culex._redis.keys import queue_keys

from ..conftest import driver_of, server_ms, snapshot

pytestmark = pytest.mark.flows  # also run through redis-py (README's test command)

K = queue_keys("culex", "q")
DAY_MS = 86_400_000


def put(d: SyncDriverProtocol, task_id: str, job: str = "NoopJob", max_retries: int = 4) -> None:
    d.run(
        operations.enqueue(K, task_id, job, "{}", due_ms=None, delay_ms=0, max_retries=max_retries)
    )


def claim(d: SyncDriverProtocol, limit: int = 100) -> list[operations.Claimed]:
    return d.run(
        operations.claim(K, limit=limit, lease_ms=30_000, promote_limit=100, dead_ttl_ms=DAY_MS)
    ).tasks


def started(r: redis.Redis, task_id: str, ms_ago: int) -> None:
    """Make the task's attempt look as if it started ``ms_ago`` ms ago."""
    r.hset(K.task(task_id), "started_at", server_ms(r) - ms_ago)


def counter_keys(r: redis.Redis) -> list[str]:
    return sorted(k.decode() for k in cast(list[bytes], r.keys("culex:{q}:stats:*")))


def buckets(r: redis.Redis) -> tuple[str, str, str]:
    """The minute bucket, the hour bucket and the totals the last write went to."""
    keys = counter_keys(r)
    minute = next(k for k in keys if ":stats:m:" in k)
    hour = next(k for k in keys if ":stats:h:" in k)
    assert len(keys) == 3, keys
    return minute, hour, K.stats_total


def fields(r: redis.Redis, key: str) -> dict[str, int]:
    raw = cast(dict[bytes, bytes], r.hgetall(key))
    return {k.decode(): int(v) for k, v in raw.items()}


def hincrbys(r: redis.Redis) -> int:
    stats = r.info("commandstats").get("cmdstat_hincrby", {"calls": 0})
    return int(stats["calls"])


def test_complete_counts_a_batch_once_per_field_in_three_hashes(r: redis.Redis) -> None:
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
    refused = d.run(operations.complete(K, [(t.id, t.attempt, "null", 1000) for t in tasks]))
    after = server_ms(r)
    assert refused == []
    minute, hour, total = buckets(r)
    assert minute == K.stats_minute(after // 1000 // 60 * 60)
    assert hour == K.stats_hour(after // 1000 // 3600 * 3600)
    counts = fields(r, total)
    a_ms = counts.pop("AJob|ms")
    assert 40 * 3000 <= a_ms < 40 * 5000
    assert 70 <= counts.pop("BJob|ms") <= 100
    assert counts == {"AJob|s9": 40, "BJob|s4": 1}
    assert fields(r, minute) == fields(r, hour) == fields(r, total)
    # 4 fields, each written once to each hash: not once per task
    assert hincrbys(r) - before == 4 * 3
    assert 2 * DAY_MS - 60_000 < r.pttl(minute) <= 2 * DAY_MS
    assert 8 * DAY_MS - 60_000 < r.pttl(hour) <= 8 * DAY_MS
    assert r.pttl(total) == -1  # never expires


def test_a_refused_report_counts_nothing(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "t")
    (task,) = claim(d)
    before = snapshot(r)
    assert d.run(operations.complete(K, [("t", task.attempt + 1, "null", 1000)])) == ["t"]
    stale = operations.fail(
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
    retry = operations.fail(
        K,
        "retried",
        tasks["retried"].attempt,
        "x",
        retry_delay_ms=5000,
        dead_ttl_ms=DAY_MS,
        dead_max=10,
    )
    assert d.run(retry) == "scheduled"
    _, _, total = buckets(r)
    counts = fields(r, total)
    assert 1500 <= counts.pop("NoopJob|ms") < 2500
    assert counts == {"NoopJob|f8": 1}
    bury = operations.fail(
        K,
        "buried",
        tasks["buried"].attempt,
        "x",
        retry_delay_ms=None,
        dead_ttl_ms=DAY_MS,
        dead_max=10,
    )
    assert d.run(bury) == "dead"
    minute, hour, total = buckets(r)
    counts = fields(r, total)
    assert 401_500 <= counts.pop("NoopJob|ms") < 403_000
    assert counts == {"NoopJob|f8": 1, "NoopJob|d14": 1}
    assert fields(r, minute) == fields(r, hour) == fields(r, total)


def test_a_task_without_started_at_is_counted_without_a_run_time(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "t")
    (task,) = claim(d)
    r.hset(K.task("t"), "started_at", "not a time")
    d.run(operations.complete(K, [("t", task.attempt, "null", 1000)]))
    assert fields(r, K.stats_total) == {"NoopJob|s": 1}


def test_a_run_time_of_0_ms_writes_no_sum_and_a_later_call_keeps_the_expiry(
    r: redis.Redis,
) -> None:
    d = driver_of(r)
    put(d, "t")
    put(d, "u")
    first, second = claim(d)
    r.hset(K.task("t"), "started_at", server_ms(r) + 60_000)  # (later than now: 0 ms)
    d.run(operations.complete(K, [("t", first.attempt, "null", 1000)]))
    minute, hour, total = buckets(r)
    assert fields(r, minute) == fields(r, hour) == fields(r, total) == {"NoopJob|s0": 1}
    r.pexpire(minute, 5_000)  # (set when the bucket was made; a later call leaves it)
    r.hset(K.task("u"), "started_at", server_ms(r) + 60_000)
    d.run(operations.complete(K, [("u", second.attempt, "null", 1000)]))
    if buckets(r)[0] == minute:  # (else the minute turned between the calls)
        assert fields(r, minute) == {"NoopJob|s0": 2} and 0 < r.pttl(minute) <= 5_000


def test_reclaim_counts_lost_attempts_without_a_run_time(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "again", "AJob")
    put(d, "gone", "BJob", max_retries=0)
    claim(d)
    r.zadd(K.pending, {"again": 1, "gone": 1})  # their leases expired long ago
    moved = d.run(operations.reclaim(K, limit=10, dead_ttl_ms=DAY_MS, dead_max=10))
    assert dict(moved) == {"again": "waiting", "gone": "dead"}
    minute, hour, total = buckets(r)
    assert fields(r, total) == {"AJob|f": 1, "BJob|d": 1}
    assert fields(r, minute) == fields(r, hour) == fields(r, total)


def test_reclaim_with_nothing_expired_writes_no_counters(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "t")
    claim(d)
    before = snapshot(r)
    assert d.run(operations.reclaim(K, limit=10, dead_ttl_ms=DAY_MS, dead_max=10)) == []
    assert snapshot(r) == before


def test_claim_counts_a_buried_task_as_dead(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "good", "AJob")
    put(d, "bad", "BJob")
    r.hset(K.task("bad"), "attempt", "x")  # not a whole number: buried
    r.zadd(K.waiting, {"ghost": 0})  # no hash at all: buried, job ""
    assert [t.id for t in claim(d)] == ["good"]
    assert fields(r, K.stats_total) == {"BJob|d": 1, "|d": 1}


def test_a_claim_that_buries_nothing_and_cancel_count_nothing(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "t")
    put(d, "u")
    claim(d, limit=1)
    cancel = operations.cancel(K, "u", "", dead_ttl_ms=DAY_MS, dead_max=10)
    assert d.run(cancel) == operations.CANCELLED
    assert counter_keys(r) == []


def test_a_counter_key_of_another_type_does_not_stop_a_report(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "t")
    (task,) = claim(d)
    r.set(K.stats_total, "not a hash")
    started(r, "t", 3000)
    assert d.run(operations.complete(K, [("t", task.attempt, "null", 1000)])) == []
    assert r.hget(K.task("t"), "state") == b"succeeded"
    assert r.get(K.stats_total) == b"not a hash"
    minute, hour = (k for k in counter_keys(r) if k != K.stats_total)
    counts = fields(r, minute)
    assert fields(r, hour) == counts and 3000 <= counts.pop("NoopJob|ms") < 5000
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
    calls: dict[str, Callable[[], operations.Call[Any]]] = {
        "claim": lambda: operations.claim(
            K, limit=1, lease_ms=1000, promote_limit=1, dead_ttl_ms=DAY_MS
        ),
        "complete": lambda: operations.complete(K, [("t", task.attempt, "null", 1000)]),
        "fail": lambda: operations.fail(
            K, "t", task.attempt, "x", retry_delay_ms=None, dead_ttl_ms=DAY_MS, dead_max=10
        ),
        "reclaim": lambda: operations.reclaim(K, limit=10, dead_ttl_ms=DAY_MS, dead_max=10),
    }
    call = calls[script]()
    before = snapshot(r)
    with pytest.raises(ServerError, match="counters prefix"):
        d.run(call._replace(keys=call.keys[:-1]))
    assert snapshot(r) == before
