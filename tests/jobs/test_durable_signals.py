"""Durable tasks against a real server: a wait for a signal holds its place (a receive
renamed under a waiting task ends it dead, naming both), places run one at a time, and
signals: what the task awaits in the reply, keeping only what is awaited, the bounds of
the kept signals and values JSON holds as given."""

from __future__ import annotations

import json

import pytest
import redis

import culex
from culex._redis import claims, scripts, steps
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


@pytest.mark.procedures
def test_kept_signals_are_bounded_by_count_and_bytes(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past either bound a signal is refused with the rule and nothing written; a signal of
    a name kept replaces it (the count stays); a receive that takes one frees its room;
    a signal the task awaits is always taken."""
    monkeypatch.setattr(steps, "MAX_KEPT_SIGNALS", 3)
    monkeypatch.setattr(steps, "MAX_KEPT_BYTES", 30)
    task = jobs.DurableApprovalJob().enqueue()
    for n in range(3):
        assert task.signal(f"s{n}", "x" * 5) == "kept"
    before = r.hgetall(K.task(task.id))
    assert before[b"signals_kept"] == b"3" and before[b"signals_kept_bytes"] == b"21"
    with pytest.raises(ValueError, match="a task keeps at most 3 signals that its receives"):
        task.signal("s3", 1)  # a fourth name
    assert task.signal("s0", "y" * 10) == "kept"  # (a name kept: replaced, 12 bytes now)
    assert r.hget(K.task(task.id), "signals_kept_bytes") == b"26"
    with pytest.raises(ValueError, match="30 bytes of values together: nothing kept"):
        task.signal("s1", "y" * 10)  # 26 - 7 + 12 bytes: past 30
    after = r.hgetall(K.task(task.id))
    assert after[b"signal:s1"] == b'"xxxxx"' and after[b"signals_kept_bytes"] == b"26"

    d = driver_of(r)
    d.run(claims.claim(K, limit=1, lease_ms=60_000, promote_limit=10, dead_ttl_ms=60_000))
    taken = steps.suspend(K, task.id, 1, 0, "receive", "s0", None, max_steps=9)
    assert d.run(taken) == ("signal", '"yyyyyyyyyy"')
    assert r.hmget(K.task(task.id), "signals_kept", "signals_kept_bytes") == [b"2", b"14"]
    assert task.signal("s3", 1) == "kept"  # (room again)
    waits = steps.suspend(K, task.id, 1, 1, "receive", "go", None, max_steps=9)
    assert d.run(waits)[0] == "suspended"
    with pytest.raises(ValueError, match="at most 3 signals"):
        task.signal("other", 1)
    assert task.signal("go", "z" * 20) == "delivered"  # awaited: taken past the bounds
    assert r.hmget(K.task(task.id), "signals_kept", "signals_kept_bytes") == [b"4", b"37"]


@pytest.mark.procedures
def test_the_reply_says_what_the_task_awaits_and_keep_false_keeps_only_that(
    r: redis.Redis,
) -> None:
    task = jobs.DurableApprovalJob().enqueue()
    reply = task.signal("early", 1, keep=False)  # not started: it awaits nothing yet
    assert (reply, reply.state, reply.awaiting) == ("skipped", "waiting", None)
    assert "signal:early" not in task.info()
    reply = task.signal("early", 1)  # (keep=True, the default: kept for a later receive)
    assert (reply, reply.state, reply.awaiting) == ("kept", "waiting", None)
    d = driver_of(r)
    d.run(claims.claim(K, limit=1, lease_ms=60_000, promote_limit=10, dead_ttl_ms=60_000))
    waits = steps.suspend(K, task.id, 1, 0, "receive", "approved", None, max_steps=9)
    assert d.run(waits)[0] == "suspended"
    reply = task.signal("aproved", 1, keep=False)  # a typo
    assert (reply, reply.state, reply.awaiting) == ("skipped", "scheduled", "approved")
    reply = task.signal("approved", {"by": "ops"}, keep=False)
    assert (reply, reply.state, reply.awaiting) == ("delivered", "scheduled", "approved")
    assert task.state() == culex.TaskState.WAITING
    reply = task.signal("approved", {"by": "ana"}, keep=False)  # awaited, not yet taken
    assert (reply, reply.state, reply.awaiting) == ("kept", "waiting", "approved")
    gone = culex.Task("no-such-task", jobs.QUEUE)
    reply = gone.signal("approved", 1)
    assert (reply, reply.state, reply.awaiting) == ("unknown", None, None)


@pytest.mark.procedures
def test_the_scripts_default_bounds_are_culexs_and_the_old_call_replies_one_string(
    r: redis.Redis,
) -> None:
    """signal.lua with its three first ARGV (as it was called before the bounds): the reply
    a string, and the bounds of culex.jobs.signals by default."""
    task = jobs.DurableApprovalJob().enqueue()
    keys = [K.task(task.id), K.scheduled, K.waiting, K.signal, K.groups_prefix]
    old = scripts.SIGNAL

    def send(name: str, value: str) -> object:
        return r.evalsha(old.sha, len(keys), *keys, name, value, 1 << 20)

    r.script_load(old.source)
    big = '"' + "x" * ((1 << 20) - 2) + '"'  # (1 MiB of JSON)
    bigs = [f"big{n}" for n in range(steps.MAX_KEPT_BYTES >> 20)]
    for name in bigs:
        assert send(name, big) == b"kept"
    assert send("one more", "1") == b"full"
    r.hdel(K.task(task.id), *[f"signal:{name}" for name in bigs])
    r.hdel(K.task(task.id), "signals_kept", "signals_kept_bytes")
    for n in range(steps.MAX_KEPT_SIGNALS):
        assert send(f"s{n}", "1") == b"kept"
    assert send("one more", "1") == b"full"


@pytest.mark.parametrize(
    "value",
    [{1: "a", "1": "b"}, {1: "a"}, (1, 2), [float("nan")], {"a": float("inf")}, {None: 1}],
)
def test_a_value_json_cannot_hold_as_given_is_refused_before_anything_is_sent(
    value: object, r: redis.Redis
) -> None:
    task = jobs.DurableApprovalJob().enqueue()
    with pytest.raises(TypeError, match=r"^signal: the value must be JSON as given \(str, int"):
        task.signal("approved", value)
    assert "signal:approved" not in task.info()
