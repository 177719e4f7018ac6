"""A workflow node (a task whose hash has `run`) that ends, in any of the ways a task ends,
gets its outbox entry from the very script that ends it (lua/include/workflow.lua); an
ordinary task ended the same way writes none, and a refused report writes nothing."""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

import pytest
import redis

from culex._redis import interventions, reports
from culex._redis.drivers import SyncDriverProtocol

from ..conftest import field, members, score, server_ms, snapshot
from .test_scripts import DAY_MS, DEAD, K, claim, drive, put, reclaim

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)

BASE = K.task_prefix.removesuffix("task:")  # <prefix>:{<queue>}:
OUTBOX = BASE + "outbox"
RUN = "run-7"
DOWN = '[["q", "after"]]'


def entry_key(task_id: str) -> str:
    return f"{BASE}outbox:{task_id}"


def make(
    r: redis.Redis, d: SyncDriverProtocol, task_id: str, *, node: bool, delay_ms: int = 0
) -> None:
    """Enqueue an ordinary task; a node also gets the fields a workflow writes."""
    put(d, task_id, delay_ms=delay_ms)
    if node:
        r.hset(K.task(task_id), mapping={"run": RUN, "node": "send", "down": DOWN, "on_end": "1"})


def block(r: redis.Redis, task_id: str) -> None:
    """Make waiting node ``task_id`` one that waits for its upstream ``up1``: in no set."""
    r.zrem(K.waiting, task_id)
    r.hset(K.task(task_id), "state", "blocked")
    r.sadd(f"{BASE}waits:{task_id}", "up1")
    r.hset(f"{BASE}upstream:{task_id}", "up0", "succeeded")


def cancel(d: SyncDriverProtocol, task_id: str) -> str:
    return d.run(interventions.cancel(K, task_id, "enough", dead_ttl_ms=DAY_MS, dead_max=10))


# Each way a task ends: how it is made (its delay), and the call that ends it, which replies
# the state it ended in and the entry's result or error.
Ending = Callable[[redis.Redis, SyncDriverProtocol, str], tuple[str, str]]


def by_complete(r: redis.Redis, d: SyncDriverProtocol, task_id: str) -> tuple[str, str]:
    held = claim(d).tasks[0]
    assert d.run(reports.complete(K, [(task_id, held.attempt, '{"sent":true}', 60_000)])) == []
    return "succeeded", '{"sent":true}'


def by_fail(r: redis.Redis, d: SyncDriverProtocol, task_id: str) -> tuple[str, str]:
    held = claim(d).tasks[0]
    failed = reports.fail(
        K, task_id, held.attempt, "boom", retry_delay_ms=None, dead_ttl_ms=DAY_MS, dead_max=10
    )
    assert d.run(failed) == "dead"
    return "dead", "boom"


def by_fail_of_a_cancelled(r: redis.Redis, d: SyncDriverProtocol, task_id: str) -> tuple[str, str]:
    held = claim(d).tasks[0]
    assert cancel(d, task_id) == "cancelling"
    failed = reports.fail(
        K, task_id, held.attempt, "stopped", retry_delay_ms=1000, dead_ttl_ms=DAY_MS, dead_max=10
    )
    assert d.run(failed) == "dead"
    return "dead", "cancelled: enough"


def by_reclaim(r: redis.Redis, d: SyncDriverProtocol, task_id: str) -> tuple[str, str]:
    claim(d, lease_ms=0)
    assert reclaim(d, max_stalls=0) == {task_id: "dead"}
    return "dead", "lease expired (runner lost): stall 1, past max_stalls (0)"


def by_reclaim_of_a_cancelled(
    r: redis.Redis, d: SyncDriverProtocol, task_id: str
) -> tuple[str, str]:
    claim(d, lease_ms=0)
    assert cancel(d, task_id) == "cancelling"
    assert reclaim(d) == {task_id: "dead"}
    return "dead", "cancelled: enough"


def by_claim_of_a_broken(r: redis.Redis, d: SyncDriverProtocol, task_id: str) -> tuple[str, str]:
    r.hset(K.task(task_id), "attempt", "not a number")
    assert claim(d).tasks == []
    return "dead", "broken task: attempt is not a whole number"


def by_claim_of_a_cancelled(r: redis.Redis, d: SyncDriverProtocol, task_id: str) -> tuple[str, str]:
    r.hset(K.task(task_id), "cancel_requested", "cancelled: earlier")  # (put back by an old runner)
    assert claim(d).tasks == []
    return "dead", "cancelled: earlier"


def by_retry_later_of_a_cancelled(
    r: redis.Redis, d: SyncDriverProtocol, task_id: str
) -> tuple[str, str]:
    held = claim(d).tasks[0]
    assert cancel(d, task_id) == "cancelling"
    assert d.run(reports.retry_later(K, task_id, held.attempt, 1000, **DEAD))
    assert r.hget(K.task(task_id), "state") == b"dead"
    return "dead", "cancelled: enough"


def by_cancel(r: redis.Redis, d: SyncDriverProtocol, task_id: str) -> tuple[str, str]:
    assert cancel(d, task_id) == "cancelled"
    return "dead", "cancelled: enough"


def by_delete(r: redis.Redis, d: SyncDriverProtocol, task_id: str) -> tuple[str, str]:
    assert d.run(interventions.delete(K, [task_id])).deleted == [task_id]
    return "dead", "deleted"


ENDINGS: dict[str, tuple[int, Ending]] = {
    "complete": (0, by_complete),
    "fail": (0, by_fail),
    "fail-cancelled": (0, by_fail_of_a_cancelled),
    "reclaim": (0, by_reclaim),
    "reclaim-cancelled": (0, by_reclaim_of_a_cancelled),
    "claim-broken": (0, by_claim_of_a_broken),
    "claim-cancelled": (0, by_claim_of_a_cancelled),
    "retry_later-cancelled": (0, by_retry_later_of_a_cancelled),
    "cancel-waiting": (0, by_cancel),
    "cancel-scheduled": (60_000, by_cancel),
    "delete-waiting": (0, by_delete),
    "delete-scheduled": (60_000, by_delete),
}


def assert_entry(
    r: redis.Redis, task_id: str, state: str, text: str, since: int, until: int, **fields: str
) -> None:
    """The entry of ``task_id`` holds exactly what a runner needs, and the outbox lists it
    from its time, by the server's clock."""
    at = int(field(r, entry_key(task_id), "at"))
    expected = {"run": RUN, "node": "send", "down": DOWN, "type": "NoopJob", **fields}
    expected |= {"state": state, "at": str(at)}
    expected["result" if state == "succeeded" else "error"] = text
    stored = {
        k.decode(): v.decode()
        for k, v in cast(dict[bytes, bytes], r.hgetall(entry_key(task_id))).items()
    }
    assert stored == expected
    assert since <= at <= until
    assert score(r, OUTBOX, task_id) == at
    if r.exists(K.task(task_id)):  # (the same now as the task's own change)
        assert field(r, K.task(task_id), "finished_at") == str(at).encode()


@pytest.mark.parametrize("how", list(ENDINGS))
def test_a_node_that_ends_gets_its_outbox_entry(r: redis.Redis, how: str) -> None:
    d = drive(r)
    delay_ms, end = ENDINGS[how]
    make(r, d, "n", node=True, delay_ms=delay_ms)
    since = server_ms(r)
    state, text = end(r, d, "n")
    assert_entry(r, "n", state, text, since, server_ms(r))
    assert members(r, OUTBOX) == ["n"]


@pytest.mark.parametrize("how", list(ENDINGS))
def test_an_ordinary_task_that_ends_the_same_way_writes_no_entry(r: redis.Redis, how: str) -> None:
    d = drive(r)
    delay_ms, end = ENDINGS[how]
    make(r, d, "t", node=False, delay_ms=delay_ms)
    r.hset(K.task("t"), "on_end", "1")  # (read by complete: still no node without `run`)
    end(r, d, "t")
    assert r.keys(OUTBOX + "*") == []


def test_a_refused_report_and_an_end_that_is_not_one_write_no_entry(r: redis.Redis) -> None:
    """A stall within max_stalls and a failure with a retry do not end a node; a report of
    an attempt that is no longer the node's is refused and writes nothing at all."""
    d = drive(r)
    make(r, d, "n", node=True)
    first = claim(d, lease_ms=0).tasks[0]
    assert reclaim(d) == {"n": "waiting"}
    second = claim(d).tasks[0]
    retried = reports.fail(
        K, "n", second.attempt, "flaky", retry_delay_ms=0, dead_ttl_ms=DAY_MS, dead_max=10
    )
    assert d.run(retried) == "scheduled"
    third = claim(d).tasks[0]
    assert r.keys(OUTBOX + "*") == []
    before = snapshot(r)
    assert d.run(reports.complete(K, [("n", first.attempt, "1", 60_000)])) == [("n", 1)]
    stale = reports.fail(
        K, "n", second.attempt, "late", retry_delay_ms=None, dead_ttl_ms=DAY_MS, dead_max=10
    )
    assert d.run(stale) is None
    assert not d.run(reports.retry_later(K, "n", first.attempt, 0, **DEAD))
    assert snapshot(r) == before
    assert d.run(reports.complete(K, [("n", third.attempt, "1", 60_000)])) == []
    assert members(r, OUTBOX) == ["n"]


def test_a_blocked_node_can_be_cancelled_and_waits_for_nothing_any_more(r: redis.Redis) -> None:
    d = drive(r)
    make(r, d, "n", node=True)
    block(r, "n")
    since = server_ms(r)
    assert cancel(d, "n") == "cancelled"
    h = r.hgetall(K.task("n"))
    assert h[b"state"] == b"dead" and h[b"last_error"] == b"cancelled: enough"
    assert h[b"failed_at"] == h[b"finished_at"]
    assert score(r, K.dead, "n") == int(h[b"finished_at"])
    assert 0 < r.pttl(K.task("n")) <= DAY_MS
    assert r.exists(f"{BASE}waits:n") == 0
    assert r.exists(f"{BASE}upstream:n") == 1  # (the entry, once applied, lets it expire)
    assert_entry(r, "n", "dead", "cancelled: enough", since, server_ms(r))
    assert cancel(d, "n") == "dead"  # (a second cancel changes nothing)


def test_a_blocked_node_can_be_deleted_but_not_by_a_walk_of_a_set(r: redis.Redis) -> None:
    d = drive(r)
    make(r, d, "n", node=True)
    block(r, "n")
    assert d.run(interventions.delete(K, ["n"], only=K.dead)).skipped == ["n"]
    assert r.keys(OUTBOX + "*") == []
    since = server_ms(r)
    assert d.run(interventions.delete(K, ["n"])).deleted == ["n"]
    assert r.exists(K.task("n"), f"{BASE}waits:n") == 0
    assert_entry(r, "n", "dead", "deleted", since, server_ms(r))


def test_a_dead_node_deleted_gets_a_new_entry_in_place_of_the_old(r: redis.Redis) -> None:
    """An older entry of the id goes first: the new one holds no field of the old."""
    d = drive(r)
    make(r, d, "n", node=True)
    by_fail(r, d, "n")
    r.hset(entry_key("n"), "left", "over")
    since = server_ms(r)
    by_delete(r, d, "n")
    assert_entry(r, "n", "dead", "deleted", since, server_ms(r))


def test_a_node_without_node_or_down_gets_its_id_and_no_downstreams(r: redis.Redis) -> None:
    d = drive(r)
    put(d, "n")
    r.hset(K.task("n"), mapping={"run": RUN, "on_end": "1"})
    since = server_ms(r)
    state, text = by_complete(r, d, "n")
    assert_entry(r, "n", state, text, since, server_ms(r), node="n", down="[]")


def test_claim_hands_out_the_run_of_a_node_and_nothing_for_another_task(r: redis.Redis) -> None:
    d = drive(r)
    make(r, d, "n", node=True)
    make(r, d, "t", node=False)
    assert {t.id: t.run for t in claim(d).tasks} == {"n": RUN, "t": ""}


def test_an_outbox_of_another_type_does_not_stop_the_end(r: redis.Redis) -> None:
    d = drive(r)
    make(r, d, "n", node=True)
    r.set(OUTBOX, "not a zset")
    by_complete(r, d, "n")
    assert r.hget(K.task("n"), "state") == b"succeeded"
    assert field(r, entry_key("n"), "state") == b"succeeded"
    assert r.get(OUTBOX) == b"not a zset"
