"""A durable call sent twice: the driver sends a call again, once, when the connection it
went on broke, and the server may have run the first one (its reply lost). The second then
finds the record the first made; it is the attempt's own, not a change of the code.

The jobs below make the first sending themselves, with the same script and arguments the
job's call then sends (the earlier place's function writes the record of the next place),
so the job's own call meets the record as a resent call would."""

from __future__ import annotations

import json

import pytest
import redis

import culex
from culex._redis import steps
from culex._redis.keys import queue_keys
from culex.server.procedures import one_call, run_sync

from ..conftest import running

QUEUE = "durable_resend"
K = queue_keys("culex", QUEUE)
ran: list[str] = []


def charge_recorded_first(task_id: str, attempt: int) -> str:
    """Runs as step 0, and records step 0 itself first, as a lost first sending would."""
    ran.append("charge")
    call = steps.step(K, task_id, attempt, 0, "charge", json.dumps("ok"), max_steps=1000,
                      max_step_bytes=1 << 20, max_task_bytes=16 << 20)  # fmt: skip
    assert run_sync(one_call(call)) == ("recorded",)
    return "ok"


def ask_received_first(task_id: str, attempt: int) -> str:
    """Runs as step 0, and makes its own record and place 1's receive itself, as lost
    first sendings would."""
    ran.append("ask")
    record = steps.step(K, task_id, attempt, 0, "ask", json.dumps("asked"), max_steps=1000,
                        max_step_bytes=1 << 20, max_task_bytes=16 << 20)  # fmt: skip
    assert run_sync(one_call(record)) == ("recorded",)
    call = steps.suspend(K, task_id, attempt, 1, "receive", "go", None, max_steps=1000)
    assert run_sync(one_call(call)) == ("signal", json.dumps({"by": "ops"}))
    return "asked"


class ResentStepJob(culex.QueuedJob):
    queue = QUEUE

    def perform(self) -> str:
        return self.step("charge", charge_recorded_first, self.task_id, self.attempt)


class ResentReceiveJob(culex.QueuedJob):
    queue = QUEUE

    def perform(self) -> str:
        self.step("ask", ask_received_first, self.task_id, self.attempt)
        got = self.receive("go")
        return f"go by {got['by']}"


@pytest.fixture(autouse=True)
def fresh(r: redis.Redis) -> None:
    ran.clear()


async def test_a_step_record_sent_twice_is_taken_as_recorded() -> None:
    async with running(culex.Runner(run_from=[QUEUE])):
        task = await ResentStepJob().aenqueue()
        assert await task.aresult(timeout=30) == "ok"  # not dead: "the steps changed"
    assert ran == ["charge"]
    info = task.info()
    assert (info["attempt"], info["steps"]) == ("1", "1")


async def test_a_receive_sent_twice_gets_the_signal_its_first_sending_took() -> None:
    task = ResentReceiveJob().enqueue()
    assert task.signal("go", {"by": "ops"}) == "kept"
    async with running(culex.Runner(run_from=[QUEUE])):
        assert await task.aresult(timeout=30) == "go by ops"
    assert ran == ["ask"]
    info = task.info()
    assert (info["attempt"], info["steps"], "signal:go" in info) == ("1", "2", False)
