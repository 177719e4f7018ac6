"""The runner's collaborators on their own: its slots and its outbox (no server)."""

from __future__ import annotations

import asyncio

import culex
from culex._redis.claims import Claimed
from culex.runner.outbox import Outbox
from culex.runner.outcome import Outcome
from culex.runner.slots import Slots


def claimed(task_id: str) -> Claimed:
    return Claimed("q", [task_id.encode(), 1, b"J", b"{}", b"0", b"4", b"0"])


class Idle(culex.Job, abstract=True):
    def perform(self) -> None:
        return None


async def test_a_slot_frees_when_its_task_ends_and_a_running_attempt_is_found() -> None:
    slots = Slots(2)
    one, two = claimed("t1"), claimed("t2")
    ended = asyncio.Event()

    async def until_ended() -> None:
        await ended.wait()

    first = asyncio.create_task(until_ended())
    second = asyncio.create_task(asyncio.sleep(60))
    slots.take(first, one)
    slots.take(second, two)
    slots.threaded.add(one)
    job = Idle()
    slots.jobs[two] = job
    assert slots.free() == 0 and not slots.freed.is_set()
    assert slots.held() == [("q", "t2")]
    assert slots.find("q", "t2") == (second, job)
    assert slots.find("q", "t1") is None and slots.find("other", "t2") is None
    ended.set()
    await first
    await asyncio.sleep(0)  # (the done callback runs one step later)
    assert slots.free() == 1 and slots.freed.is_set() and not slots.threaded
    second.cancel()
    await asyncio.gather(second, return_exceptions=True)
    await asyncio.sleep(0)
    assert slots.free() == 2 and not slots.running


async def test_the_outbox_wakes_the_reporter_for_an_outcome_and_not_for_a_retry() -> None:
    outbox = Outbox()
    assert outbox.landed.is_set() and not outbox.ready.is_set()
    done = Outcome(claimed("t1"))
    outbox.put(done)
    assert outbox.ready.is_set()
    outbox.ready.clear()
    assert outbox.take() == [done] and outbox.outcomes == []
    outbox.extend([done])
    assert outbox.outcomes == [done] and not outbox.ready.is_set()
