"""The scripts' optional events key (include/events.lua): state before -> call -> the
stream's entries after, for each script that changes a task's state; no key, no entry;
a key of another type stops nothing; the stream is bounded and expires."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from culex._redis import claims, enqueuing, interventions, reports
from culex._redis.drivers import SyncDriverProtocol

from .test_scripts import DAY_MS, DEAD, K, drive

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)


def entries(r: redis.Redis) -> list[tuple[str, str, str, str]]:
    """(task, job, kind, attempt) of each entry of the queue's stream, oldest first."""
    found: list[Any] = r.xrange(K.events)  # type: ignore[assignment]
    return [
        (f[b"task"].decode(), f[b"job"].decode(), f[b"kind"].decode(), f[b"attempt"].decode())
        for _, f in found
    ]


def put(d: SyncDriverProtocol, task_id: str, *, events: bool = True, max_retries: int = 4) -> None:
    call = enqueuing.enqueue(
        K, task_id, "EvJob", '{"secret": 1}', due_ms=None, delay_ms=0,
        max_retries=max_retries, drawn=True, events=events,
    )  # fmt: skip
    d.run(call)


def claim(d: SyncDriverProtocol, lease_ms: int = 30_000) -> claims.ClaimReply:
    call = claims.claim(
        K, limit=10, lease_ms=lease_ms, promote_limit=100, dead_ttl_ms=DAY_MS, events=True
    )
    return d.run(call)


def test_each_script_writes_its_kind_with_the_attempt(r: redis.Redis) -> None:
    d = drive(r)
    for task_id in ("ok", "retried", "doomed", "later", "later-cancelled"):
        put(d, task_id)
    attempts = {c.id: c.attempt for c in claim(d).tasks}
    done = [("ok", attempts["ok"], '"a result"', 1000)]
    assert d.run(reports.complete(K, done, events=True)) == []
    fail = reports.fail(
        K, "retried", attempts["retried"], "boom", retry_delay_ms=0, dead_ttl_ms=DAY_MS,
        dead_max=10, events=True,
    )  # fmt: skip
    assert d.run(fail) == "scheduled"
    fail = reports.fail(
        K, "doomed", attempts["doomed"], "boom", retry_delay_ms=None, dead_ttl_ms=DAY_MS,
        dead_max=10, events=True,
    )  # fmt: skip
    assert d.run(fail) == "dead"
    later = reports.retry_later(K, "later", attempts["later"], 0, **DEAD, events=True)
    assert d.run(later) is True
    cancel = interventions.cancel(
        K, "later-cancelled", "", dead_ttl_ms=DAY_MS, dead_max=10, events=True
    )
    assert d.run(cancel) == "cancelling"  # (running: no event until its runner ends it)
    attempt = attempts["later-cancelled"]
    assert d.run(reports.retry_later(K, "later-cancelled", attempt, 0, **DEAD, events=True))
    ids = ["ok", "retried", "doomed", "later", "later-cancelled"]
    found = entries(r)
    assert found[:5] == [(t, "EvJob", "enqueued", "0") for t in ids]
    # (claim takes tasks ready in the same ms in the order of their ids)
    assert sorted(found[5:10]) == [(t, "EvJob", "started", "1") for t in sorted(ids)]
    assert found[10:] == [
        ("ok", "EvJob", "succeeded", "1"),
        ("retried", "EvJob", "failed", "1"),
        ("doomed", "EvJob", "dead", "1"),
        ("later", "EvJob", "failed", "1"),
        ("later-cancelled", "EvJob", "dead", "1"),
    ]  # fmt: skip
    # no params, result or error in any entry
    assert not any("secret" in v or "result" in v or "boom" in v for e in entries(r) for v in e)


def test_reclaim_writes_failed_for_a_stall_and_dead_past_max_stalls(r: redis.Redis) -> None:
    d = drive(r)
    put(d, "stalls")
    claim(d, lease_ms=0)
    call = claims.reclaim(K, limit=10, dead_ttl_ms=DAY_MS, dead_max=10, events=True)
    moved: claims.Reclaimed = d.run(call)
    assert moved == [("stalls", "waiting")]
    claim(d, lease_ms=0)
    call = claims.reclaim(K, limit=10, dead_ttl_ms=DAY_MS, dead_max=10, max_stalls=1, events=True)
    moved = d.run(call)
    assert moved == [("stalls", "dead")]
    kinds = [(kind, attempt) for _, _, kind, attempt in entries(r)]
    assert kinds == [
        ("enqueued", "0"), ("started", "1"), ("failed", "1"), ("started", "2"), ("dead", "2"),
    ]  # fmt: skip


def test_cancel_of_a_waiting_task_and_claim_burying_write_dead(r: redis.Redis) -> None:
    d = drive(r)
    put(d, "waits")
    cancel = interventions.cancel(K, "waits", "", dead_ttl_ms=DAY_MS, dead_max=10, events=True)
    assert d.run(cancel) == "cancelled"
    r.zadd(K.waiting, {"no-hash": 1})  # an id without a task hash: claim buries it
    assert claim(d).tasks == []
    assert entries(r) == [
        ("waits", "EvJob", "enqueued", "0"),
        ("waits", "EvJob", "dead", "0"),
        ("no-hash", "", "dead", "0"),
    ]


def test_a_periodic_jobs_slot_and_trigger_write_enqueued(r: redis.Redis) -> None:
    d = drive(r)
    common: dict[str, Any] = {"next_slot_ms": None, "overlap": True, "run_new": True}
    slot = d.run(
        enqueuing.schedule(K, "EvPeriodic", "EvPeriodic:1000", slot_ms=1000, max_retries=0,
                           events=True, **common)
    )  # fmt: skip
    trigger = d.run(
        enqueuing.schedule(K, "EvPeriodic", "EvPeriodic:trigger:1", slot_ms=None, max_retries=0,
                           events=True, **common)
    )  # fmt: skip
    assert (slot.outcome, trigger.outcome) == ("enqueued", "enqueued")
    assert entries(r) == [
        ("EvPeriodic:1000", "EvPeriodic", "enqueued", "0"),
        ("EvPeriodic:trigger:1", "EvPeriodic", "enqueued", "0"),
    ]


def test_a_bulk_cancel_with_events_still_refuses_a_running_task(r: redis.Redis) -> None:
    d = drive(r)
    put(d, "runs")
    claim(d)
    cancel = interventions.cancel(
        K, "runs", "", dead_ttl_ms=DAY_MS, dead_max=10, running=False, events=True
    )
    assert d.run(cancel) == "pending"
    assert r.hget(K.task("runs"), "cancel_requested") is None and not r.exists(K.cancels)
    assert [kind for _, _, kind, _ in entries(r)] == ["enqueued", "started"]


def test_without_the_key_nothing_is_written(r: redis.Redis) -> None:
    d = drive(r)
    put(d, "quiet", events=False)
    d.run(claims.claim(K, limit=10, lease_ms=30_000, promote_limit=100, dead_ttl_ms=DAY_MS))
    d.run(reports.complete(K, [("quiet", 1, "null", 1000)]))
    assert r.hget(K.task("quiet"), "state") == b"succeeded"
    assert not r.exists(K.events)


def test_an_events_key_of_another_type_stops_no_change(r: redis.Redis) -> None:
    d = drive(r)
    r.set(K.events, "not a stream")
    put(d, "t")
    assert [c.id for c in claim(d).tasks] == ["t"]
    assert d.run(reports.complete(K, [("t", 1, "null", 1000)], events=True)) == []
    assert r.hget(K.task("t"), "state") == b"succeeded"
    assert r.get(K.events) == b"not a stream"


def test_the_stream_is_bounded_and_expires_a_day_after_its_last_entry(r: redis.Redis) -> None:
    d = drive(r)
    for i in range(10_250):  # (MAXLEN ~ 10000 trims whole nodes: about that many stay)
        put(d, f"t{i}")
    assert 10_000 <= r.xlen(K.events) < 10_250
    assert 0 < r.pttl(K.events) <= DAY_MS
    # Entries older than a day (a whole node of them: ~ trims whole nodes) go, at the
    # latest after about 100 entries more (the age trim runs about once in 100, by the
    # server's clock): look until they have gone.
    r.delete(K.events)
    for i in range(100):
        r.xadd(
            K.events, {"task": "old", "job": "", "kind": "enqueued", "attempt": "0"}, id=f"1-{i}"
        )
    i = 0
    while r.xrange(K.events, "-", "1-99"):
        put(d, f"more{i}")
        i += 1
        assert i < 100_000
