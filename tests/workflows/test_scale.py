"""Workflows at scale, run to the end by a real runner: a chord of 10,000 upstreams into one
node, a fan-out of one root into 100,000 downstreams (its nodes stored in chunks, its
downstreams released in batches); and the keys a run leaves: once its ttl has passed, none
of its own, and no workflow key without an expiry, however many runs were made. No
timings here (bench/workflows.py prints them)."""

from __future__ import annotations

import asyncio
import collections
import functools
from collections.abc import Iterator
from typing import ClassVar

import pytest
import redis

import culex
from culex._redis.keys import queue_keys, run_keys

from ..conftest import await_until, running, wait_until

QUEUE = "wf-scale"
CHORD = 10_000
FAN_OUT = 100_000


class Tally:
    """What the no-op nodes saw, outside Redis."""

    done: ClassVar[int] = 0  # performs ended
    early: ClassVar[int] = 0  # performs that began before their upstream ended
    root_done: ClassVar[bool] = False
    body_saw: ClassVar[int] = -1  # the ends counted when the chord's body began


@pytest.fixture(autouse=True)
def fresh(r: redis.Redis) -> Iterator[None]:
    Tally.done, Tally.early, Tally.root_done, Tally.body_saw = 0, 0, False, -1
    yield


class Member(culex.QueuedJob):
    """A no-op that counts itself."""

    queue = QUEUE

    async def perform(self) -> None:
        Tally.done += 1


class Body(culex.QueuedJob):
    """The chord's body: notes how many members had ended when it began."""

    queue = QUEUE

    async def perform(self) -> None:
        Tally.body_saw = Tally.done


class Root(culex.QueuedJob):
    queue = QUEUE

    async def perform(self) -> None:
        Tally.root_done = True


class Leaf(culex.QueuedJob):
    """A downstream of the root: counts itself, and whether the root had ended."""

    queue = QUEUE

    async def perform(self) -> None:
        Tally.early += not Tally.root_done
        Tally.done += 1


def runner() -> culex.Runner:
    return culex.Runner(run_from=[QUEUE], concurrency=50)


def ended_states(r: redis.Redis, run: culex.WorkflowRun) -> dict[str, int]:
    """How many of the run's nodes ended in each state (its record's `ended` hash)."""
    states = r.hvals(run_keys("culex", run.id).ended)
    return dict(collections.Counter(v.decode() if isinstance(v, bytes) else v for v in states))


def workflow_leftovers(r: redis.Redis) -> list[str]:
    """Keys of the queue's node machinery still there: upstream sets, outbox entries."""
    keys = queue_keys("culex", QUEUE)
    base = keys.task_prefix.removesuffix("task:")
    found = [k.decode() for k in r.scan_iter(match=f"{base}waits:*", count=10_000)]
    found += [k.decode() for k in r.scan_iter(match=f"{base}outbox*", count=10_000)]
    return found


async def test_a_chord_of_ten_thousand_upstreams_into_one_node(r: redis.Redis) -> None:
    wf = culex.group(*(Member() for _ in range(CHORD))).then(Body())
    body = next(node.task for node in wf.nodes.values() if node.after)
    run = await wf.aenqueue()
    assert r.scard(queue_keys("culex", QUEUE).waits(body.id)) == CHORD
    async with running(runner()):
        assert await run.await_(timeout=300) == "succeeded"
    assert Tally.done == CHORD and Tally.body_saw == CHORD
    assert ended_states(r, run) == {"succeeded": CHORD + 1}
    assert r.hlen(queue_keys("culex", QUEUE).upstream(body.id)) == CHORD  # every end copied
    assert workflow_leftovers(r) == []


async def test_a_fan_out_of_a_hundred_thousand_downstreams(r: redis.Redis) -> None:
    wf = culex.Workflow()
    root = wf.add(Root(), name="root")
    for _ in range(FAN_OUT):
        wf.add(Leaf(), after=[root])
    run = await wf.aenqueue()
    assert r.zcard(queue_keys("culex", QUEUE).waiting) == 1  # the root only
    async with running(runner()):
        assert await run.await_(timeout=600) == "succeeded"
    assert Tally.done == FAN_OUT and Tally.early == 0
    assert ended_states(r, run) == {"succeeded": FAN_OUT + 1}
    assert workflow_leftovers(r) == []


class Brittle(culex.QueuedJob):
    queue = QUEUE

    async def perform(self) -> None:
        self.fail("brittle", retry=False)


class Endless(culex.QueuedJob):
    queue = QUEUE

    async def perform(self) -> None:
        await asyncio.Event().wait()


def diamond(ttl: float) -> culex.Workflow:
    wf = culex.Workflow(ttl=ttl)
    top = wf.add(Member())
    sides = [wf.add(Member(), after=[top]), wf.add(Brittle(), after=[top])]
    wf.add(Member(), after=sides)
    wf.add(Member(), after=sides, if_upstream_fails="run")
    return wf


async def some_runs(count: int) -> list[culex.WorkflowRun]:
    """``count`` rounds of: a diamond that fails, a chord that succeeds, a run cancelled
    while a node runs (its downstream blocked); all ended."""
    runs = []
    async with running(runner()):
        for _ in range(count):
            failed = await diamond(ttl=1).aenqueue()
            chord = culex.Workflow(ttl=1)
            members = [chord.add(Member()), chord.add(Member())]
            chord.add(Member(), after=members)
            succeeded = await chord.aenqueue()
            wf = culex.Workflow(ttl=1)
            endless = wf.add(Endless())
            wf.add(Member(), after=[endless])
            cancelled = await wf.aenqueue()
            await await_until(functools.partial(running_now, endless), what="the endless to run")
            assert await cancelled.acancel() is True
            assert await failed.await_(timeout=30) == "failed"
            assert await cancelled.await_(timeout=30) == "cancelled"
            assert await succeeded.await_(timeout=30) == "succeeded"
            runs += [failed, succeeded, cancelled]
    return runs


async def running_now(task: culex.Task) -> bool:
    return await task.astate() == culex.TaskState.PENDING


def expired(r: redis.Redis, run: culex.WorkflowRun) -> bool:
    return not r.exists(run_keys("culex", run.id).record)


def lasting_keys(r: redis.Redis) -> set[str]:
    """The keys without an expiry, the counters of the current minute aside (they are per
    minute, not per run, and expire once folded)."""
    return {
        k.decode()
        for k in r.scan_iter(count=10_000)
        if r.pttl(k) == -1 and ":stats:m:" not in k.decode()
    }


async def test_a_run_leaves_no_key_once_its_ttl_has_passed(r: redis.Redis) -> None:
    first = await some_runs(1)
    lasting = lasting_keys(r)
    later = await some_runs(3)
    for run in first + later:  # (ttl=1: a bound on a wait, not a timing)
        wait_until(functools.partial(expired, r, run), what=f"the expiry of run {run.id}")
    for run in first + later:
        assert not list(r.scan_iter(match=f"*{{run:{run.id}}}*"))
    assert lasting_keys(r) == lasting  # nothing more lasts after more runs
    assert not any(
        part in key
        for key in lasting
        for part in (":waits:", ":upstream:", ":outbox", "{run:", "{workflows}", ":task:")
    ), lasting
    assert workflow_leftovers(r) == []
