"""Runs heal by themselves: a node that a runner of an older culex (from before workflows)
ended wrote no outbox entry, so neither its downstreams nor its run would learn of its end.
A runner's look at the unfinished runs (about once a lease) writes the entry, and the run
goes on; a cancel of such a run ends it. The older runner is played here by raw commands,
as its complete.lua and fail.lua wrote: the hash's state and the sets, and no entry."""

from __future__ import annotations

import logging
from decimal import Decimal

import pytest
import redis

import culex
from culex._redis import claims
from culex._redis.keys import queue_keys
from culex.workflows import enqueueing, release

from ..conftest import driver_of, running
from .jobs import Journal, a_runner, chain


def soon(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runners look at a run soon after its enqueue, and again soon after (in place of
    60 s, then every 30 s)."""
    monkeypatch.setattr(enqueueing, "STAGE_MS", 300)
    monkeypatch.setattr(release, "LEASE_MS", 300)


def ended_by_an_older_runner(r: redis.Redis, task: culex.Task, outcome: str) -> None:
    """Claim ``task`` (culex's claim, as the older runner's did), then end it as an older
    complete.lua or fail.lua did: its hash and its sets, no outbox entry."""
    keys = queue_keys("culex", task.queue)
    claim = claims.claim(keys, limit=1, lease_ms=30_000, promote_limit=10, dead_ttl_ms=60_000)
    assert [c.id for c in driver_of(r).run(claim).tasks] == [task.id]
    r.zrem(keys.pending, task.id)
    if outcome == "succeeded":
        r.hset(keys.task(task.id), mapping={"state": "succeeded", "result": '"0.05"'})
    else:
        r.hset(keys.task(task.id), mapping={"state": "dead", "last_error": "it broke"})
        r.zadd(keys.dead, {task.id: 1})
    assert r.zcard(keys.outbox) == 0


async def test_a_node_an_older_runner_completed_releases_its_downstream(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    soon(monkeypatch)
    wf, first, second = chain()
    run = await wf.aenqueue()
    ended_by_an_older_runner(r, first, "succeeded")
    with caplog.at_level(logging.WARNING, logger="culex"):
        async with running(a_runner()):
            assert await run.await_(timeout=30) == "succeeded"
    assert Journal.seen[second.id]["first"].result == Decimal("0.05")
    said = [m for m in caplog.messages if "ended without its end written" in m]
    assert said and f"node first ({first.id})" in said[0]


async def test_a_node_an_older_runner_failed_ends_the_run_failed_and_it_can_be_retried(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    soon(monkeypatch)
    wf, first, second = chain()
    run = await wf.aenqueue()
    ended_by_an_older_runner(r, first, "dead")
    async with running(a_runner()):
        assert await run.await_(timeout=30) == "failed"
        assert "upstream first" in (await second.ainfo())["last_error"]
        assert await run.aretry() == 2
        assert await run.await_(timeout=30) == "succeeded"


async def test_a_cancel_of_a_run_an_older_runner_held_up_ends_it(r: redis.Redis) -> None:
    """No look comes in the test's time (60 s after the enqueue): the cancel itself writes
    the end that was missing."""
    wf, first, second = chain()
    run = await wf.aenqueue()
    ended_by_an_older_runner(r, first, "succeeded")
    async with running(a_runner()):
        assert await run.acancel() is True
        assert await run.await_(timeout=10) == "cancelled"
    assert await second.astate() == culex.TaskState.DEAD
    assert r.zcard("culex:{workflows}:unfinished") == 0  # (an ended run needs no look)


async def test_a_node_that_waits_for_no_node_of_its_run_makes_its_run_fail(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A node whose `up` named an id that is no node of the run (written by hand) waits
    for it for ever: a look calls the run off, and it ends failed, naming the node."""
    soon(monkeypatch)
    wf, first, second = chain()
    run = await wf.aenqueue()
    r.sadd(queue_keys("culex", second.queue).waits(second.id), "ghost")
    async with running(a_runner()):
        assert await run.await_(timeout=30) == "failed"
    assert (
        run.info()["error"] == f"node second ({second.id}): it waits for ghost, no node of its run"
    )
    assert await first.astate() == culex.TaskState.SUCCEEDED
    assert await second.astate() == culex.TaskState.DEAD
