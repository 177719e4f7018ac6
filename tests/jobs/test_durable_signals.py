"""Durable tasks against a real server: a wait for a signal holds its place (a receive
renamed under a waiting task ends it dead, naming both), places run one at a time, and
signals: what the task awaits in the reply, keeping only what is awaited, the bounds of
the kept signals and values JSON holds as given."""

from __future__ import annotations

import json

import pytest
import redis

import culex
from culex._redis import claims, steps
from culex._redis.keys import queue_keys

from ..conftest import await_until, driver_of, running
from . import durable_jobs as jobs

K = queue_keys("culex", jobs.QUEUE)


@pytest.fixture(autouse=True)
def fresh(r: redis.Redis) -> None:
    jobs.ran.clear()
    jobs.DurableRenamedReceiveJob.names[:] = ["approved"]


def runner() -> culex.Runner:
    return culex.Runner(run_from=[jobs.QUEUE])


async def test_a_receive_renamed_while_its_task_waits_ends_it_dead_naming_both() -> None:
    async with running(runner()):
        task = await jobs.DurableRenamedReceiveJob().aenqueue()
        await await_until(lambda: task.info().get("awaiting") == "approved", what="the wait")
        jobs.DurableRenamedReceiveJob.names[0] = "accepted"  # (a deploy renames it)
        assert await task.asignal("approved", "yes") == "delivered"
        with pytest.raises(culex.TaskFailed) as failed:
            await task.aresult(timeout=30)
    assert "place 1 recorded receive 'approved'" in failed.value.reason
    assert "reaches receive 'accepted'" in failed.value.reason
    info = task.info()
    assert info["attempt"] == "2" and info["awaiting"] == "approved"  # (not the new name)


async def test_steps_under_asyncio_gather_end_the_task_dead_one_at_a_time() -> None:
    async with running(runner()):
        task = await jobs.DurableGatherJob().aenqueue()
        with pytest.raises(culex.TaskFailed) as failed:
            await task.aresult(timeout=30)
    assert failed.value.reason == (
        "astep 'b' began while astep 'a' had not ended: a task's steps, sleeps and receives "
        "run one at a time (not under asyncio.gather, nor one inside another's function)"
    )
    assert task.info()["attempt"] == "1"  # dead at once, not retried
    assert jobs.ran[f"{task.id}:b"] == 0  # refused before its function ran


@pytest.mark.procedures
def test_a_place_where_a_receive_waits_is_a_conflict_for_any_other(r: redis.Redis) -> None:
    """step.lua and suspend.lua at the place a receive waits (the hash's awaiting): a
    conflict whose record names the awaited signal, and nothing written."""
    task = jobs.DurableRenamedReceiveJob().enqueue()
    d = driver_of(r)
    d.run(claims.claim(K, limit=1, lease_ms=60_000, promote_limit=10, dead_ttl_ms=60_000))
    waits = steps.suspend(K, task.id, 1, 0, "receive", "approved", None, max_steps=9)
    assert d.run(waits)[0] == "suspended"
    r.hset(K.task(task.id), "state", "pending")  # (as a claim of attempt 2 would leave it,
    r.hset(K.task(task.id), "attempt", "2")  # its awaiting kept)
    r.zadd(K.pending, {task.id: 1})
    before = r.hgetall(K.task(task.id))
    awaited = '{"awaiting":true,"kind":"receive","name":"approved"}'
    for call in (
        steps.suspend(K, task.id, 2, 0, "receive", "accepted", None, max_steps=9),
        steps.suspend(K, task.id, 2, 0, "sleep", "", 10, max_steps=9),
        steps.step(K, task.id, 2, 0, "s", "1", max_steps=9, max_step_bytes=9, max_task_bytes=9),
    ):
        reply = d.run(call)
        assert reply[0] == "conflict" and sorted_json(reply[1]) == awaited
        assert r.hgetall(K.task(task.id)) == before
    same = steps.suspend(K, task.id, 2, 0, "receive", "approved", None, max_steps=9)
    assert d.run(same)[0] == "suspended"  # (the same name waits on)


def sorted_json(text: str) -> str:
    return json.dumps(json.loads(text), sort_keys=True, separators=(",", ":"))
