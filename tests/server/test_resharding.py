"""A queue's slot moved to another master while producers enqueue and a runner runs: the
clients get ASK and TRYAGAIN replies while the keys move, then MOVED, and nothing is lost
or run twice (docs/production.md)."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

import culex
from culex import config
from culex._redis import commands, enqueuing, redispy_routing
from culex._redis.connections import ReplyError
from culex._redis.redispy import RedisPyAsyncDriver, RedisPySyncDriver

from ..conftest import await_until, running, wait_until
from ..topology import Cluster, Node, keyslot

QUEUE = "moving"
done_ids: list[str] = []  # the n of every task run, in the order they ran


class MovingJob(culex.QueuedJob):
    queue = QUEUE
    n: int

    async def perform(self) -> None:
        await asyncio.sleep(0.01)  # (tasks wait in the queue while its keys move)
        done_ids.append(str(self.n))


def node_id(cluster: Cluster, node: Node) -> str:
    return str(node.client().execute_command("CLUSTER", "MYID"))


def move_slot(
    cluster: Cluster,
    slot: int,
    source: Node,
    target: Node,
    batch: int = 5,
    before_handover: Callable[[], object] = lambda: None,
) -> int:
    """Move ``slot`` from ``source`` to ``target`` a few keys at a time, as a resharding
    tool does (CLUSTER SETSLOT IMPORTING / MIGRATING, MIGRATE, SETSLOT NODE); the number of
    keys moved. ``before_handover`` runs once every key is on the target and the slot is
    still migrating (a call there is sent along with ASK)."""
    source_id, target_id = node_id(cluster, source), node_id(cluster, target)
    src, dst = source.client(), target.client()
    dst.execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", source_id)
    src.execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", target_id)
    moved = 0
    while True:
        keys = src.execute_command("CLUSTER", "GETKEYSINSLOT", slot, batch)
        if not keys:
            break
        src.execute_command("MIGRATE", "127.0.0.1", target.port, "", 0, 5000, "KEYS", *keys)
        moved += len(keys)
        time.sleep(0.02)  # the clients meanwhile find some keys here and some there
    before_handover()
    for node in cluster.masters():
        node.client().execute_command("CLUSTER", "SETSLOT", slot, "NODE", target_id)
    return moved


@pytest.fixture
def queue_slot(private_cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setenv("CULEX_REDIS_URL", private_cluster.url)
    config.reset()
    done_ids.clear()
    return keyslot(f"culex:{{{QUEUE}}}:waiting")


async def test_a_queue_moved_to_another_master_under_load_loses_nothing(
    private_cluster: Cluster, queue_slot: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    refusals: list[str] = []  # the codes of the replies that sent a call elsewhere, or again
    settle = redispy_routing.Batch.settle

    def noting(batch: redispy_routing.Batch) -> bool:
        refusals.extend(
            r.code for r in (batch.replies[i] for i in batch.todo) if isinstance(r, ReplyError)
        )
        return settle(batch)

    monkeypatch.setattr(redispy_routing.Batch, "settle", noting)
    source = private_cluster.master_of_slot(queue_slot)
    target = next(node for node in private_cluster.masters() if node is not source)
    total = 600
    enqueued: list[str] = []
    errors: list[BaseException] = []

    def produce() -> None:
        for n in range(total):
            while True:
                try:  # a producer retries what could not be sent, with the same task id
                    MovingJob(n=n).enqueue(id=f"t{n}")
                    break
                except culex.ServerUnavailable as exc:
                    errors.append(exc)
                    time.sleep(0.05)
            enqueued.append(str(n))
            if n % 20 == 0:
                time.sleep(0.01)

    culex.configure(concurrency=20)
    async with running(culex.Runner(run_from=[QUEUE])):
        producer = threading.Thread(target=produce)
        producer.start()
        await await_until(lambda: len(done_ids) >= 50, what="the first tasks to run")
        # (the last keys may move between two calls of the clients: the handover waits for
        # one to be sent along with ASK, which any call of the slot is while it migrates)
        moved = await asyncio.to_thread(
            move_slot, private_cluster, queue_slot, source, target,
            before_handover=lambda: wait_until(
                lambda: "ASK" in refusals, timeout=30, what="an ASK while the slot migrates"
            ),
        )  # fmt: skip
        await asyncio.to_thread(producer.join, 60)
        await await_until(lambda: len(set(done_ids)) >= total, timeout=60, what="every task")
        assert moved > 0  # the slot held keys while it moved
    assert private_cluster.master_of_slot(queue_slot) is target
    assert sorted(set(done_ids), key=int) == enqueued  # every task ran
    assert len(done_ids) == total  # once: nothing that had run was sent again
    dead = target.client().zcard(f"culex:{{{QUEUE}}}:dead")
    pending = target.client().zcard(f"culex:{{{QUEUE}}}:pending")
    assert (dead, pending) == (0, 0)
    assert "ASK" in refusals  # the clients were sent along to the keys that had moved
    seen = {code: refusals.count(code) for code in sorted(set(refusals))}
    print(f"\nmoved {moved} keys; sent along: {seen}; producer retries: {len(errors)}")


@pytest.mark.parametrize("kind", ["redis-py sync", "redis-py async"])
async def test_a_call_refused_noscript_when_time_is_up_is_still_sent_as_eval(
    kind: str, cluster: Cluster
) -> None:
    """A runner's driver tries a call that did not run once more only (retry_for=0): after
    a MOVED (its slot map was out of date), the new master, whose scripts are gone (as a
    promoted replica's are), refuses it NOSCRIPT when the time is up already. It is sent
    as EVAL all the same: NOSCRIPT is never what a caller gets. (Seen failing without it:
    ServerError NOSCRIPT, the write and its WAIT lost.)"""
    from .._redis.test_drivers import KEYS, done, put

    slot = keyslot(KEYS.waiting)
    source = cluster.master_of_slot(slot)
    target = next(node for node in cluster.masters() if node is not source)
    make = RedisPySyncDriver if kind == "redis-py sync" else RedisPyAsyncDriver
    driver = make(cluster.url, retry_for=0)
    try:
        assert (await done(driver.run(put("t1")))).task_id == "t1"  # (the slot map read)
        move_slot(cluster, slot, source, target)
        target.client().script_flush()
        written, confirmed = await done(driver.run_many([put("t2"), commands.wait_replica(5000)]))
        assert written == enqueuing.Enqueued("t2", "waiting", False) and confirmed is True
    finally:
        await done(driver.close())
        move_slot(cluster, slot, target, source)
        cluster.wait_settled()


@pytest.mark.parametrize("kind", ["redis-py sync", "redis-py async"])
async def test_a_call_whose_master_died_goes_to_the_promoted_replica_as_eval(
    kind: str, private_cluster: Cluster
) -> None:
    """A call whose master could not be reached is sent again, after its replica took over,
    as EVAL at once: the promoted replica's script cache is empty, and no NOSCRIPT round
    trip is spent (nor a durable enqueue's WAIT behind a call that did not run). Seen
    failing without it: the new master replied NOSCRIPT first."""
    from .._redis.test_drivers import KEYS, done, put

    slot = keyslot(KEYS.waiting)
    master = private_cluster.master_of_slot(slot)
    make = RedisPySyncDriver if kind == "redis-py sync" else RedisPyAsyncDriver
    driver = make(private_cluster.url)
    try:
        assert (await done(driver.run(put("t1")))).task_id == "t1"  # (the slot map read)
        # (in threads: the loop runs meanwhile, and sees its connections to the dead master
        # closed, as a runner's would)
        await asyncio.to_thread(private_cluster.kill, master)
        promoted = await asyncio.to_thread(private_cluster.wait_failover, master, 60)
        assert (await done(driver.run(put("t2")))).task_id == "t2"
        errors = promoted.client().info("errorstats")
        assert "errorstat_NOSCRIPT" not in errors, errors
    finally:
        await done(driver.close())
