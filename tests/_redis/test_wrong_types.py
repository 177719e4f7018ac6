"""A key of another type where a script expects a hash or a sorted set (written by
something else, or corrupted) never stops a script after its first write: each script
below once wrote, then failed on such a key, and left a task in no set or a lease lost."""

from __future__ import annotations

import redis

from culex._redis import claims, enqueuing, interventions
from culex._redis.keys import queue_keys

from ..conftest import driver_of, members

K = queue_keys("culex", "q")
DAY_MS = 86_400_000


def enqueue(r: redis.Redis, task_id: str, *, group: str = "", delay_ms: int = 0) -> None:
    driver_of(r).run(
        enqueuing.enqueue(
            K, task_id, "J", "{}", due_ms=None, delay_ms=delay_ms, max_retries=4, group=group
        )
    )


def test_a_claim_with_a_group_count_or_window_of_another_type_loses_no_task(
    r: redis.Redis,
) -> None:
    enqueue(r, "plain")
    enqueue(r, "grouped", group="g1")
    r.set(K.groups_prefix + "running", "not a hash")
    r.set(K.groups_prefix + "s:g1", "not a zset")
    claimed = driver_of(r).run(
        claims.claim(
            K, limit=10, lease_ms=30_000, promote_limit=10, dead_ttl_ms=DAY_MS,
            group_concurrency=1, group_rate=(5, 1000),
        )
    )  # fmt: skip
    assert sorted(t.id for t in claimed.tasks) == ["grouped", "plain"]
    assert members(r, K.pending) == ["grouped", "plain"]


def test_a_claim_that_promotes_an_id_whose_key_is_of_another_type_buries_it(
    r: redis.Redis,
) -> None:
    enqueue(r, "later", delay_ms=1)
    r.zadd(K.scheduled, {"odd": 0})
    r.set(K.task("odd"), "not a hash")
    r.zadd(K.scheduled, {"later": 0})  # (due now)
    reply = driver_of(r).run(
        claims.claim(K, limit=10, lease_ms=30_000, promote_limit=10, dead_ttl_ms=DAY_MS)
    )
    assert [t.id for t in reply.tasks] == ["later"]
    assert members(r, K.dead) == ["odd"]


def test_hasten_moves_the_others_past_an_id_whose_key_is_of_another_type(
    r: redis.Redis,
) -> None:
    enqueue(r, "later", delay_ms=60_000)
    r.zadd(K.scheduled, {"odd": 1})
    r.set(K.task("odd"), "not a hash")
    assert driver_of(r).run(interventions.hasten(K, limit=10)) == 2
    assert r.hget(K.task("later"), "state") == b"waiting"


def test_a_heartbeat_renews_the_others_past_a_key_of_another_type(r: redis.Redis) -> None:
    enqueue(r, "a")
    enqueue(r, "b")
    d = driver_of(r)
    held = {t.id: t.attempt for t in d.run(
        claims.claim(K, limit=10, lease_ms=1_000, promote_limit=10, dead_ttl_ms=DAY_MS)
    ).tasks}  # fmt: skip
    r.delete(K.task("a"))
    r.set(K.task("a"), "not a hash")
    before = r.zscore(K.pending, "b")
    lost = d.run(claims.heartbeat(K, 60_000, [("a", held["a"]), ("b", held["b"])]))
    assert lost == ["a"]
    assert (r.zscore(K.pending, "b") or 0) > (before or 0)  # renewed


def test_a_periodic_slot_goes_on_past_a_last_task_key_of_another_type(r: redis.Redis) -> None:
    d = driver_of(r)
    first = enqueuing.schedule(K, "P", "P:1000", slot_ms=1000, next_slot_ms=2000,
                               overlap=False, run_new=True, max_retries=0)  # fmt: skip
    d.run(first)
    r.delete(K.task("P:1000"))
    r.set(K.task("P:1000"), "not a hash")
    second = enqueuing.schedule(K, "P", "P:2000", slot_ms=2000, next_slot_ms=3000,
                                overlap=False, run_new=True, max_retries=0)  # fmt: skip
    d.run(second)
    assert r.hget(K.task("P:2000"), "state") == b"waiting"
