"""hasten.lua: state before, the call, state after (drain's way to skip a back-off)."""

from __future__ import annotations

import pytest
import redis

from culex._redis import enqueuing, interventions
from culex._redis.keys import queue_keys
from culex.errors import ServerError

from ..conftest import driver_of, members, score, server_ms, snapshot, writes

K = queue_keys("culex", "q")
HOUR_MS = 3_600_000


def put(r: redis.Redis, task_id: str, delay_ms: int) -> None:
    driver_of(r).run(
        enqueuing.enqueue(K, task_id, "J", "{}", due_ms=None, delay_ms=delay_ms, max_retries=4)
    )


def test_hasten_moves_every_scheduled_task_to_waiting_due_now(r: redis.Redis) -> None:
    put(r, "ready", 0)
    # (ready a ms before the hasten: in the same ms, the two would tie and sort by id)
    r.zadd(K.waiting, {"ready": server_ms(r) - 1})
    put(r, "later", HOUR_MS)
    put(r, "past", 1)
    r.zadd(K.scheduled, {"past": 5})  # due long ago (as a retry a claim has not promoted)
    r.delete(K.signal)
    before = server_ms(r)
    assert driver_of(r).run(interventions.hasten(K, limit=100)) == 2
    after = server_ms(r)
    assert members(r, K.scheduled) == []
    assert members(r, K.waiting) == ["past", "ready", "later"]  # by ready time
    assert score(r, K.waiting, "past") == 5  # a due task keeps its ready time
    assert before <= score(r, K.waiting, "later") <= after  # a later one is ready now
    assert r.hget(K.task("later"), "state") == b"waiting"
    assert r.hget(K.task("later"), "due_at") == str(int(score(r, K.waiting, "later"))).encode()
    assert r.llen(K.signal) == 1  # a runner is woken


def test_hasten_moves_at_most_limit_tasks_soonest_due_first(r: redis.Redis) -> None:
    put(r, "b", 2 * HOUR_MS)
    put(r, "a", HOUR_MS)
    assert driver_of(r).run(interventions.hasten(K, limit=1)) == 1
    assert (members(r, K.waiting), members(r, K.scheduled)) == (["a"], ["b"])


def test_hasten_with_nothing_scheduled_writes_nothing(r: redis.Redis) -> None:
    put(r, "ready", 0)
    r.delete(K.signal)
    before, count = snapshot(r), writes(r)
    assert driver_of(r).run(interventions.hasten(K, limit=10)) == 0
    assert (snapshot(r), writes(r)) == (before, count)


@pytest.mark.parametrize("limit", [0, -1])
def test_hasten_refuses_a_limit_below_one_before_any_write(r: redis.Redis, limit: int) -> None:
    put(r, "later", HOUR_MS)
    before = snapshot(r)
    with pytest.raises(ServerError, match="ARGV"):
        driver_of(r).run(interventions.hasten(K, limit=limit))
    assert snapshot(r) == before
