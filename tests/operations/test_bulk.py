"""Bulk actions (culex.operations.bulk): retry, delete and cancel on ids or on every task of a state
(and job type), in chunks with progress; delete.lua (state before -> call -> state after)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, cast

import pytest
import redis

from culex import ServerError, config
from culex._redis import claims, enqueuing, interventions, reads, reports
from culex._redis.keys import queue_keys
from culex.operations import bulk, inspection
from culex.operations.browsing import state_set
from culex.server import configured

from ..conftest import driver_of, members, wait_until
from ..topology import Cluster

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)

Q = "bulky"
K = queue_keys("culex", Q)
T0 = 1_700_000_000_000


def put(r: redis.Redis, state: str, ids: Iterable[str], job: str = "J", at: int = T0) -> None:
    """Tasks in the wire format, in the set of ``state`` (scores from ``at`` on, 1 ms apart)."""
    pipe = r.pipeline(transaction=False)
    for n, task_id in enumerate(ids):
        record: dict[Any, Any] = {
            "id": task_id, "type": job, "queue": Q, "params": "{}", "enqueue_time": at,
            "retry_count": 4, "attempt": 5, "max_retries": 4, "state": state,
        }  # fmt: skip
        pipe.hset(K.task(task_id), mapping=record)
        pipe.zadd(state_set(K, state), {task_id: at + n})
    pipe.execute()


def states(r: redis.Redis, *ids: str) -> list[str]:
    return [cast(bytes, r.hget(K.task(i), "state") or b"").decode() for i in ids]


def test_retry_by_ids_in_chunks_with_progress(r: redis.Redis) -> None:
    ids = [f"d{i}" for i in range(1200)]
    put(r, "dead", ids)
    put(r, "pending", ["p"])
    seen: list[tuple[int, int]] = []
    changed = bulk.apply("retry", Q, ids=[*ids, "p", "unknown", "d0"], progress=_to(seen))
    assert changed == 1200
    assert seen == [(500, 1202), (1000, 1202), (1202, 1202)]  # each id once
    assert r.zcard(K.dead) == 0 and r.zcard(K.waiting) == 1200
    assert states(r, "d7", "p") == ["waiting", "pending"]
    assert r.hget(K.task("d7"), "retry_count") == b"0"


def test_retry_every_dead_task_of_a_job_oldest_first(r: redis.Redis) -> None:
    put(r, "dead", [f"j{i}" for i in range(1300)], job="J")
    put(r, "dead", [f"k{i}" for i in range(700)], job="K", at=T0 + 650)  # among the J ones
    seen: list[tuple[int, int]] = []
    assert bulk.apply("retry", Q, job="K", progress=_to(seen)) == 700
    assert sorted(members(r, K.waiting)) == sorted(f"k{i}" for i in range(700))
    assert r.zcard(K.dead) == 1300 and seen[-1] == (2000, 2000)
    assert [done for done, _ in seen] == sorted(done for done, _ in seen)
    assert bulk.apply("retry", Q) == 1300 and r.zcard(K.dead) == 0


def test_a_walk_never_goes_past_what_the_state_held_at_the_start(r: redis.Redis) -> None:
    put(r, "dead", [f"old{i}" for i in range(1200)])

    def more_die(done: int, total: int) -> None:  # tasks die while the walk goes on
        if done < total:
            put(r, "dead", [f"new{done}-{i}" for i in range(300)], at=T0 + 10_000 + done)

    assert bulk.apply("retry", Q, progress=more_die) == 1200
    assert r.zcard(K.dead) == 600 and all(m.startswith("new") for m in members(r, K.dead))


def test_delete_removes_tasks_that_are_not_running(r: redis.Redis) -> None:
    put(r, "waiting", ["w"])
    put(r, "scheduled", ["s"])
    put(r, "dead", ["d", "gone"])
    put(r, "pending", ["p"])
    r.delete(K.task("gone"))  # expired: only its id is left in dead
    r.hset(K.task("done"), mapping={"state": "succeeded"})
    d = driver_of(r)
    assert d.run(reads.wait(K, "w")).state == "waiting"  # a producer waits for w

    reply = d.run(interventions.delete(K, ["w", "s", "d", "gone", "p", "done", "nobody"]))
    assert reply == interventions.DeleteReply(["w", "s", "d", "gone"], ["p", "done", "nobody"])
    for task_id in ("w", "s", "d", "gone"):
        assert not r.exists(K.task(task_id))
    assert r.zcard(K.waiting) + r.zcard(K.scheduled) + r.zcard(K.dead) == 0
    assert r.lrange(K.done("w"), 0, -1) == [b"done"] and 0 < r.pttl(K.done("w")) <= 60_000
    assert not r.exists(K.done("s"))  # nobody waited for s
    assert states(r, "p", "done") == ["pending", "succeeded"] and r.zcard(K.pending) == 1


def test_delete_every_task_of_a_state_and_job(r: redis.Redis) -> None:
    put(r, "scheduled", [f"a{i}" for i in range(600)], job="A")
    put(r, "scheduled", [f"b{i}" for i in range(10)], job="B")
    assert bulk.apply("delete", Q, state="scheduled", job="A") == 600
    assert members(r, K.scheduled) == [f"b{i}" for i in range(10)]
    assert not r.exists(K.task("a5"))
    assert bulk.apply("delete", Q, state="waiting") == 0  # an empty state


def test_an_id_enqueued_again_after_its_dead_hash_expired_leaves_dead(r: redis.Redis) -> None:
    """invoice-42 dies with failed_job_ttl 1 ms: its hash expires, its id stays in dead until
    the next death trims it. Enqueued again (ids are the producer's idempotency key), it is
    in scheduled only, and a purge of dead leaves it."""
    d = driver_of(r)
    d.run(enqueuing.enqueue(K, "invoice-42", "J", "{}", due_ms=None, delay_ms=0, max_retries=0))
    d.run(claims.claim(K, limit=1, lease_ms=60_000, promote_limit=0, dead_ttl_ms=1))
    d.run(reports.fail(K, "invoice-42", 1, "boom", retry_delay_ms=None, dead_ttl_ms=1,
                       dead_max=10))  # fmt: skip
    wait_until(lambda: not r.exists(K.task("invoice-42")), what="the dead hash to expire")
    assert members(r, K.dead) == ["invoice-42"]

    again = enqueuing.enqueue(K, "invoice-42", "J", "{}", due_ms=None, delay_ms=60_000,
                              max_retries=0)  # fmt: skip
    assert d.run(again).state == "scheduled"
    assert members(r, K.dead) == [] and members(r, K.scheduled) == ["invoice-42"]
    assert bulk.apply("delete", Q, state="dead") == 0
    assert states(r, "invoice-42") == ["scheduled"]


def test_a_delete_of_a_state_deletes_only_tasks_whose_hash_says_it(r: redis.Redis) -> None:
    """An id left in dead beside a live scheduled task (enqueued by a producer of an older
    version, whose enqueue sends no dead key): deleting every dead task, or these ids as
    dead ones, leaves the scheduled task."""
    d = driver_of(r)
    r.zadd(K.dead, {"invoice-42": T0 - 1})  # (its hash expired)
    older = enqueuing.enqueue(K, "invoice-42", "J", "{}", due_ms=None, delay_ms=60_000,
                              max_retries=0)  # fmt: skip
    assert d.run(older._replace(keys=older.keys[:7])).state == "scheduled"
    put(r, "dead", ["d1", "d2"])

    assert bulk.apply("delete", Q, ids=["invoice-42", "d1"], state="dead") == 1
    assert bulk.apply("delete", Q, state="dead") == 1
    assert states(r, "invoice-42", "d1", "d2") == ["scheduled", "", ""]
    assert members(r, K.scheduled) == ["invoice-42"]
    # delete.lua: KEYS[8] names the set walked; a key that is none of the queue's is refused
    call = interventions.delete(K, ["invoice-42"], only=K.pending)
    with pytest.raises(ServerError, match=r"KEYS\[8\] must be the waiting, scheduled, dead"):
        d.run(call)
    assert bulk.apply("delete", Q, ids=["invoice-42"]) == 1  # (no state: any it is in)
    assert members(r, K.scheduled) == []


async def test_cancel_every_waiting_task_and_aapply(r: redis.Redis) -> None:
    put(r, "waiting", [f"w{i}" for i in range(750)])
    put(r, "pending", ["p"])
    seen: list[tuple[int, int]] = []
    assert await bulk.aapply("cancel", Q, state="waiting", progress=_to(seen)) == 750
    assert seen == [(500, 750), (750, 750)]
    assert r.zcard(K.waiting) == 0 and r.zcard(K.dead) == 750
    assert r.hget(K.task("w3"), "last_error") == b"cancelled"
    assert bulk.apply("cancel", Q, ids=["w3", "p"]) == 0  # dead, and running: left alone
    assert states(r, "p") == ["pending"]


@pytest.mark.parametrize(
    ("action", "options", "error", "message"),
    [
        ("run", {}, ValueError, "an action must be one of retry, delete, cancel"),
        ("cancel", {"state": "pending"}, ValueError, "a state must be one of waiting, scheduled"),
        ("delete", {"state": "pending"}, ValueError, "a state must be one of"),
        ("retry", {"state": "waiting"}, ValueError, "a state must be one of dead"),
        ("delete", {}, ValueError, "delete needs ids, or a state"),
        ("retry", {"ids": ["a"], "job": "J"}, ValueError, "give ids, or state and job"),
        ("retry", {"ids": "abc"}, TypeError, "ids must be a list"),
        ("retry", {"ids": ["a b"]}, ValueError, "a task id"),
        ("retry", {"job": ""}, ValueError, "a job type"),
        ("retry", {"progress": 3}, TypeError, "progress must be a function"),
        ("retry", {"queue": "{q}"}, ValueError, "a queue name"),
    ],
)
def test_bad_input_is_refused_before_anything_changes(
    r: redis.Redis, action: str, options: dict[str, Any], error: type[Exception], message: str
) -> None:
    put(r, "dead", ["a"])
    given = {"queue": Q, **options}
    with pytest.raises(error, match=message):
        bulk.apply(action, **given)  # type: ignore[arg-type]
    assert states(r, "a") == ["dead"]


def test_pages_and_bulk_actions_on_a_cluster(cluster: Cluster) -> None:
    """Six queues over three masters: every call stays in its queue's slot (no CROSSSLOT)."""
    settings = config.settings(redis_url=cluster.url)
    driver = configured.sync_driver(cluster.url)
    queues = ("emails", "reports", "images", "search", "billing", "exports")
    for queue in queues:
        keys = queue_keys("culex", queue)
        for n in range(3):
            driver.run(enqueuing.enqueue(keys, f"{queue}-{n}", "J", "{}", due_ms=None,
                                         delay_ms=0, max_retries=4))  # fmt: skip
    for queue in queues:
        page = inspection.tasks(queue, "waiting", settings, job="J", limit=2)
        assert len(page.rows) == 2 and page.total == 3 and page.next_cursor is not None
        found = inspection.find_task(queue, f"{queue}-1", settings)
        assert found is not None and found.state == "waiting"
        assert bulk.apply("cancel", queue, settings, state="waiting") == 3
        assert bulk.apply("retry", queue, settings, job="J") == 3
        assert bulk.apply("delete", queue, settings, ids=[f"{queue}-0", f"{queue}-9"]) == 1
        assert inspection.tasks(queue, "waiting", settings).total == 2


def _to(seen: list[tuple[int, int]]) -> bulk.Progress:
    return lambda done, total: seen.append((done, total))
