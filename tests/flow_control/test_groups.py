"""Groups: a task enqueued with a group waits in its group's ready set; claim takes the
groups (and the tasks without a group) in turns, within each group's own limits."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

import culex
from culex._redis import claims, interventions, reports
from culex._redis.drivers import SyncDriverProtocol
from culex._redis.keys import queue_keys
from culex.errors import ConfigurationError
from culex.operations import bulk, inspection

from ..conftest import driver_of, server_ms

K = queue_keys("culex", "grouped")
G = K.groups_prefix
DAY_MS = 86_400_000


class GroupedJob(culex.QueuedJob):
    queue = "grouped"
    n: int = 0

    def perform(self) -> None:
        pass


@pytest.fixture
def d(r: redis.Redis) -> Iterator[SyncDriverProtocol]:
    yield driver_of(r)


def claim(
    d: SyncDriverProtocol,
    limit: int = 1,
    *,
    group_concurrency: int | None = None,
    group_rate: tuple[int, int] | None = None,
) -> claims.ClaimReply:
    return d.run(
        claims.claim(
            K, limit=limit, lease_ms=30_000, promote_limit=100, dead_ttl_ms=DAY_MS,
            group_concurrency=group_concurrency, group_rate=group_rate,
        )
    )  # fmt: skip


def enqueue(group: str | None, n: int) -> culex.Task:
    return GroupedJob(n=n).enqueue(group=group)


def groups_of(r: redis.Redis, tasks: list[claims.Claimed]) -> list[str]:
    found = [r.hget(K.task(t.id), "group") for t in tasks]
    return [g.decode() if isinstance(g, bytes) else "-" for g in found]


def test_a_task_of_a_group_waits_in_its_groups_set_and_counts_as_waiting(r: redis.Redis) -> None:
    task = enqueue("customer:42", 1)
    assert r.zscore(K.waiting, task.id) is None
    assert r.zscore(G + "g:customer:42", task.id) is not None
    assert r.zscore(K.grouped_ready, task.id) is not None
    assert r.zrange(G + "ring", 0, -1) == [b"customer:42"]
    assert r.hget(K.task(task.id), "group") == b"customer:42"
    assert task.state() is culex.TaskState.WAITING
    assert inspection.queue_counts(queues=["grouped"])["grouped"]["waiting"] == 1
    assert inspection.queue_latency(queues=["grouped"])["grouped"] >= 0
    page = inspection.tasks("grouped", "waiting")
    assert [row.id for row in page.rows] == [task.id] and page.total == 1
    found = inspection.find_task("grouped", task.id)
    assert found is not None and found.state == "waiting"


def test_no_group_no_ring_the_claim_is_as_before(r: redis.Redis, d: SyncDriverProtocol) -> None:
    enqueue(None, 1)
    assert r.exists(G + "ring") == 0
    assert len(claim(d, 10).tasks) == 1
    assert [k for k in r.keys("*groups*")] == []


def test_groups_and_the_tasks_without_one_take_turns(r: redis.Redis, d: SyncDriverProtocol) -> None:
    for n in range(5):
        enqueue("busy", n)
    enqueue(None, 10)
    enqueue(None, 11)
    enqueue("quiet", 20)
    taken = [claim(d).tasks[0] for _ in range(8)]
    order = groups_of(r, taken)
    # the busy group came first, and still the quiet group and the tasks without a group
    # are not kept waiting behind it: each lane takes one turn in three
    assert sorted(order[:3]) == ["-", "busy", "quiet"] and order[0] == "busy"
    assert sorted(order) == sorted(["busy"] * 5 + ["-"] * 2 + ["quiet"])
    assert claim(d).tasks == [] and r.exists(G + "ring") == 0


def test_a_group_concurrency_limit_holds_while_other_groups_run(
    r: redis.Redis, d: SyncDriverProtocol
) -> None:
    for n in range(3):
        enqueue("a", n)
    enqueue("b", 10)
    first = claim(d, 10, group_concurrency=1).tasks
    assert sorted(groups_of(r, first)) == ["a", "b"]  # one of a, though three are ready
    assert r.hgetall(G + "running") == {b"a": b"1", b"b": b"1"}
    assert claim(d, 10, group_concurrency=1).tasks == []
    assert r.zrange(G + "ring", 0, -1) == []  # a waits for its running task to end
    held = next(t for t in first if groups_of(r, [t]) == ["a"])
    r.delete(K.signal)
    assert d.run(reports.complete(K, [(held.id, held.attempt, "null", 1000)])) == []
    assert r.llen(K.signal) == 1  # a's turn came back: an idle runner is woken
    assert r.hgetall(G + "running") == {b"b": b"1"}
    assert groups_of(r, claim(d, 10, group_concurrency=1).tasks) == ["a"]


def test_a_group_rate_limit_holds_the_group_back_until_its_window_moves_on(
    r: redis.Redis, d: SyncDriverProtocol
) -> None:
    for n in range(3):
        enqueue("a", n)
    enqueue("b", 10)
    started = server_ms(r)
    taken = claim(d, 10, group_rate=(2, 60_000))
    assert sorted(groups_of(r, taken.tasks)) == ["a", "a", "b"]
    later = claim(d, 10, group_rate=(2, 60_000))
    assert later.tasks == []
    assert r.zrange(G + "delayed", 0, -1) == [b"a"]
    # the claim says when a may start again: a minute after its first start
    assert started <= later.next_due_ms - 60_000 <= started + 100  # type: ignore[operator]


def test_a_retried_released_or_reclaimed_task_goes_back_to_its_group(
    r: redis.Redis, d: SyncDriverProtocol
) -> None:
    enqueue("a", 1)
    enqueue("a", 2)
    (one,) = claim(d, 1, group_concurrency=1).tasks
    assert d.run(reports.release(K, one.id, one.attempt))
    assert r.zscore(G + "g:a", one.id) is not None and r.exists(G + "running") == 0
    (again,) = claim(d, 1, group_concurrency=1).tasks
    retried = d.run(
        reports.fail(K, again.id, again.attempt, "x", retry_delay_ms=0, dead_ttl_ms=DAY_MS,
                     dead_max=10)
    )  # fmt: skip
    assert retried == "scheduled" and r.exists(G + "running") == 0
    # the retry is promoted into its group by the next claim, and leases run out
    lost = claim(d, 2, group_concurrency=2).tasks
    assert groups_of(r, lost) == ["a", "a"]
    r.zadd(K.pending, {t.id: 1 for t in lost})  # (their leases ran out)
    assert len(d.run(claims.reclaim(K, limit=10, dead_ttl_ms=DAY_MS, dead_max=10))) == 2
    assert r.exists(G + "running") == 0


def test_cancel_and_delete_take_a_waiting_task_out_of_its_group(r: redis.Redis) -> None:
    cancelled, deleted, kept = enqueue("a", 1), enqueue("a", 2), enqueue("a", 3)
    assert cancelled.cancel()
    assert bulk.apply("delete", "grouped", ids=[deleted.id]) == 1
    assert r.zrange(G + "g:a", 0, -1) == [kept.id.encode()]
    assert r.zrange(K.grouped_ready, 0, -1) == [kept.id.encode()]


def test_a_bad_group_is_refused_before_anything_is_written(r: redis.Redis) -> None:
    for bad, error in (("", ValueError), ("x" * 501, ValueError), (42, TypeError)):
        with pytest.raises(error, match="group"):
            GroupedJob().enqueue(group=bad)  # type: ignore[arg-type]
    assert r.dbsize() == 0


def test_group_limits_are_declared_by_the_queues_jobs_and_set_at_run_time(r: redis.Redis) -> None:
    class PerCustomerJob(culex.QueuedJob):
        queue = "per_customer"
        group_concurrency = 1
        group_rate_limit = "10/m"

    limits = culex.registry.queue_limits("per_customer")
    assert (limits.group_concurrency, str(limits.group_rate)) == (1, "10/m")
    with pytest.raises(ConfigurationError, match="group_concurrency"):

        class BadGroupJob(culex.QueuedJob):
            group_concurrency = -1

    state = culex.limit("per_customer", group_concurrency=2, group_rate="5/s")
    assert (state.group_concurrency, str(state.group_rate)) == (2, "5/s")
    culex.registry.remove(PerCustomerJob)


def test_a_pages_cursor_crosses_from_waiting_into_the_groups(r: redis.Redis) -> None:
    plain = [enqueue(None, n).id for n in range(3)]
    grouped = [enqueue(f"g{n}", n).id for n in range(3)]
    seen: list[str] = []
    cursor = None
    while True:
        page = inspection.tasks("grouped", "waiting", newest_first=False, limit=2, cursor=cursor)
        assert page.total == 6
        seen += [row.id for row in page.rows]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == plain + grouped
    newest = inspection.tasks("grouped", "waiting", limit=6)
    assert [row.id for row in newest.rows] == grouped[::-1] + plain[::-1]
    # each row says its group ("": none), as a task found by id does
    assert [row.group for row in newest.rows] == ["g2", "g1", "g0", "", "", ""]
    found = inspection.find_task("grouped", grouped[1])
    assert found is not None and found.group == "g1"


def test_a_cancelled_running_task_of_a_group_frees_its_place(
    r: redis.Redis, d: SyncDriverProtocol
) -> None:
    first, second = enqueue("a", 1), enqueue("a", 2)
    (running,) = claim(d, 10, group_concurrency=1).tasks
    assert running.id == first.id and claim(d, 10, group_concurrency=1).tasks == []
    cancel = interventions.cancel(K, first.id, "", dead_ttl_ms=DAY_MS, dead_max=10)
    assert d.run(cancel) == interventions.CANCELLING
    ended = reports.fail(
        K, first.id, running.attempt, "stopped", retry_delay_ms=0, dead_ttl_ms=DAY_MS, dead_max=10
    )
    assert d.run(ended) == "dead"  # (a cancelled task is never retried)
    assert r.exists(G + "running") == 0
    assert [t.id for t in claim(d, 10, group_concurrency=1).tasks] == [second.id]


def test_once_the_groups_are_done_the_claim_pops_waiting_again(
    r: redis.Redis, d: SyncDriverProtocol
) -> None:
    enqueue("a", 1)
    for n in range(3):
        enqueue(None, n)
    assert sorted(groups_of(r, claim(d, 2).tasks)) == ["-", "a"]
    assert r.zrange(G + "ring", 0, -1) == [b""]  # only the turn of the tasks without a group
    assert len(claim(d, 10).tasks) == 2
    assert r.exists(G + "ring") == 0


# -- counts that heal: reclaim sets right what admission trusts ---------------------------------


def reclaim(d: SyncDriverProtocol, heal_ms: int | None = 60_000) -> claims.Reclaimed:
    return d.run(claims.reclaim(K, limit=100, dead_ttl_ms=DAY_MS, dead_max=10, heal_ms=heal_ms))


def test_a_running_count_left_by_an_older_runner_heals_and_its_group_runs_again(
    r: redis.Redis, d: SyncDriverProtocol
) -> None:
    """An older runner's complete never touches the count: g1 says 2 running, none is, and
    g1 left the ring at its limit. Reclaim sets the count from pending and puts g1 back."""
    for n in range(3):
        enqueue("g1", n)
    enqueue("g2", 10)
    first = claim(d, 10, group_concurrency=2).tasks
    assert sorted(groups_of(r, first)) == ["g1", "g1", "g2"]
    for t in first:  # ended as a runner that knows no groups ends them
        r.zrem(K.pending, t.id)
        r.hset(K.task(t.id), "state", "succeeded")
    r.hset(G + "running", "g3", 4)  # and a count of a group with nothing pending at all
    assert claim(d, 10, group_concurrency=2).tasks == []  # g1 is held back for ever
    assert r.zrange(G + "ring", 0, -1) == []
    r.delete(K.signal)

    healed = reclaim(d)
    assert healed == [] and sorted(healed.healed) == [("g1", 2, 0), ("g2", 1, 0), ("g3", 4, 0)]
    assert r.exists(G + "running") == 0
    assert r.zrange(G + "ring", 0, -1) == [b"g1"] and r.llen(K.signal) == 1
    assert groups_of(r, claim(d, 10, group_concurrency=2).tasks) == ["g1"]
    assert reclaim(d).healed == []  # checked once per heal_ms: the next pass looks at nothing
    r.delete(G + "healed")
    assert reclaim(d).healed == []  # and a true count is left as it is
    assert r.hgetall(G + "running") == {b"g1": b"1"}


def test_a_count_below_what_runs_heals_too(r: redis.Redis, d: SyncDriverProtocol) -> None:
    """With a task ready, a count too low would let g1 run past its limit."""
    for n in range(3):
        enqueue("g1", n)
    claim(d, 2)
    r.hdel(G + "running", "g1")
    assert reclaim(d).healed == [("g1", 0, 2)]
    assert r.hgetall(G + "running") == {b"g1": b"2"}


def test_reclaim_without_heal_ms_checks_no_count_and_replies_as_before(
    r: redis.Redis, d: SyncDriverProtocol
) -> None:
    enqueue("g1", 0)
    claim(d)
    r.hset(G + "running", "g1", 5)
    reply = reclaim(d, heal_ms=None)
    assert reply == [] and reply.healed == []
    assert r.hget(G + "running", "g1") == b"5" and r.exists(G + "healed") == 0


def test_a_stale_blocked_mark_is_cleared_and_a_runner_woken(
    r: redis.Redis, d: SyncDriverProtocol
) -> None:
    r.hset(K.control, "blocked", "1")  # left by a claim; the task's end was reported
    r.delete(K.signal)  # by a runner that knows no concurrency limit
    reclaim(d)
    assert r.hget(K.control, "blocked") is None and r.llen(K.signal) == 1


async def test_a_runner_heals_a_corrupt_count_within_about_a_lease(r: redis.Redis) -> None:
    """The whole way: a runner with a short lease finds g1's count wrong and runs its
    tasks, which never ran before."""
    from ..conftest import running

    culex.configure(lease=0.6)
    culex.limit("grouped", group_concurrency=1)
    tasks = [await GroupedJob(n=n).aenqueue(group="g1") for n in range(3)]
    r.hset(G + "running", "g1", 1)  # as an older runner leaves it
    r.zrem(G + "ring", "g1")
    async with running(culex.Runner(run_from=["grouped"])):
        for task in tasks:
            assert await task.aresult(timeout=30) is None
    assert r.exists(G + "running") == 0


def test_a_running_count_that_is_no_number_stops_no_script_half_way(
    r: redis.Redis, d: SyncDriverProtocol
) -> None:
    # Corrupted by hand (or written by something else): claim and complete still move the
    # task whole; the count starts again from what runs, and the task's end drops it.
    task = enqueue("g1", 1)
    r.hset(G + "running", "g1", "abc")
    (claimed,) = claim(d).tasks
    assert claimed.id == task.id
    assert r.zscore(K.pending, task.id) is not None
    assert r.hget(G + "running", "g1") == b"1"
    r.hset(G + "running", "g1", "1.5")
    assert d.run(reports.complete(K, [(task.id, claimed.attempt, "null", 60_000)])) == []
    assert r.hget(K.task(task.id), "state") == b"succeeded"
    assert r.zscore(K.pending, task.id) is None
    assert r.hget(G + "running", "g1") is None
