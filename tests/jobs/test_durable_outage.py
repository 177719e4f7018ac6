"""A durable task through a server outage: a step's record, a suspend (receive, sleep), a
read of the task's records and of its upstreams are held and sent again while the attempt's
lease holds, as a finished outcome is (tests/faults/test_out_of_memory.py): the outage
spends no retry, and a step's function runs once. Tested with the server out of memory
(the record is refused; heartbeat.lua, flagged allow-oom, keeps the lease) and with the
server SIGKILLed and started again on its append-only file. Only the lease running out ends
the attempt, as a stall; every job here has max_retries = 0, so a retry spent on the
outage would bury its task.

Each perform waits at a gate before the call the outage meets: the outage begins, the gate
opens, the call is refused, and only then does the server come back."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import os
import signal
import threading
from collections import Counter
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path

import pytest
import redis

import culex
from culex import config
from culex._redis import claims, steps
from culex._redis.keys import queue_keys
from culex.errors import AttemptOver, ServerUnavailable
from culex.jobs.progress import Reporting
from culex.server.data_folder import alive
from culex.server.embedded import EmbeddedServer
from culex.server.procedures import one_call, run_sync

from ..conftest import (
    await_until,
    private_tcp_server,
    running,
    server_ms,
    suite_binary,
    wait_until,
)
from ..faults.test_out_of_memory import give_it_back, take_the_memory

QUEUE = "durable_outage"
K = queue_keys("culex", QUEUE)
ran: Counter[str] = Counter()  # "<task id>:<what>" -> times it ran, outside Redis
gate = threading.Event()


def charge(task_id: str) -> str:
    ran[f"{task_id}:charge"] += 1
    gate.wait(30)
    return "charged"


async def acharge(task_id: str) -> str:
    ran[f"{task_id}:charge"] += 1
    await asyncio.to_thread(gate.wait, 30)
    return "charged"


class OutageJob(culex.QueuedJob, abstract=True):
    queue = QUEUE
    max_retries = 0

    def gated(self) -> None:
        """Count this perform, then wait at the gate (the outage begins meanwhile)."""
        ran[f"{self.task_id}:perform"] += 1
        gate.wait(30)


class OutageStepJob(OutageJob):
    """The outage meets the step's record: the function has run."""

    def perform(self) -> str:
        return self.step("charge", charge, self.task_id)


class OutageAsyncStepJob(OutageJob):
    async def perform(self) -> str:
        return await self.astep("charge", acharge, self.task_id)


class OutageReadJob(OutageJob):
    """The outage meets the first place's read of the task's records."""

    def perform(self) -> str:
        self.gated()
        return self.step("charge", lambda: "charged")


class OutageReceiveJob(OutageJob):
    """The outage meets a receive whose signal was sent before (suspend.lua takes it)."""

    def perform(self) -> str:
        self.gated()
        return str(self.receive("go")["by"])


class OutageSleepJob(OutageJob):
    """The outage meets a sleep (suspend.lua): the task then sleeps, and resumes after."""

    async def perform(self) -> str:
        await asyncio.to_thread(self.gated)
        await self.asleep(0)
        return "slept"


class OutageUpstreamJob(OutageJob):
    """The outage meets a read of the upstreams ({}: a task that is no node)."""

    def perform(self) -> str:
        self.gated()
        return f"{len(self.upstream())} upstreams"


forked = multiprocessing.get_context("fork")  # (shared with a job's child process)
entered, opened = forked.Event(), forked.Event()


def charge_in_child() -> str:
    entered.set()
    opened.wait(30)
    return "charged"


class OutageChildJob(OutageJob):
    """The outage meets a step's record sent from a child process."""

    isolation = "process"

    def perform(self) -> str:
        return self.step("charge", charge_in_child)


class Held(logging.Handler):
    """Sets ``held`` when culex says a call waits for the server, in this process or in a
    child forked from it (which has a copy of this handler, and shares the event)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.held = forked.Event()

    def emit(self, record: logging.LogRecord) -> None:
        if "waits for the server" in record.getMessage():
            self.held.set()


WHAT: dict[str, tuple[type[culex.QueuedJob], str, str]] = {  # job, what runs once, result
    "step": (OutageStepJob, "charge", "charged"),
    "async step": (OutageAsyncStepJob, "charge", "charged"),
    "read": (OutageReadJob, "perform", "charged"),
    "receive": (OutageReceiveJob, "perform", "ops"),
    "sleep": (OutageSleepJob, "perform", "slept"),
    "upstream": (OutageUpstreamJob, "perform", "0 upstreams"),
}
REFUSED_WHEN_FULL = ["step", "async step", "receive", "sleep"]  # (reads are served)


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    ran.clear()
    gate.clear()
    yield
    gate.set()  # (a perform still waiting ends)


def enqueue(what: str) -> culex.Task:
    job, _, _ = WHAT[what]
    task = job().enqueue()
    if what == "receive":
        assert task.signal("go", {"by": "ops"}) == "kept"
    return task


def started(task: culex.Task, what: str) -> bool:
    return ran[f"{task.id}:{WHAT[what][1]}"] == 1


def ran_once(task: culex.Task, what: str) -> None:
    """The task succeeded with no retry spent and no stall, and what runs once ran once."""
    info = task.info()
    assert info["state"] == "succeeded", info
    assert (info["retry_count"], info.get("stalls")) == ("0", None), info
    # (a sleep's resume is the one more attempt, and no failure)
    assert info["attempt"] == ("2" if what == "sleep" else "1"), info
    assert ran[f"{task.id}:{WHAT[what][1]}"] == (2 if what == "sleep" else 1)


@contextlib.asynccontextmanager
async def met_by_an_outage(
    task: culex.Task, what: str, begin: Callable[[], None], caplog: pytest.LogCaptureFixture
) -> AsyncIterator[None]:
    """A runner of the queue; once ``task``'s perform is at the gate, the outage
    begins (``begin``) and the gate opens; the block starts once the call met the outage:
    held, or, held no more, raised (a warning names the task). The block ends it."""
    with caplog.at_level(logging.WARNING, logger="culex"):
        async with running(culex.Runner(run_from=[QUEUE])):
            await await_until(lambda: started(task, what), what="the perform")
            begin()
            gate.set()
            await await_until(lambda: told(caplog, task), what="the call refused")
            yield


def told(caplog: pytest.LogCaptureFixture, task: culex.Task) -> bool:
    return any(task.id in r.getMessage() for r in caplog.records if r.module != "claimer")


# -- out of memory ----------------------------------------------------------------------

LEASE_FULL = 1.0


@pytest.fixture
def full_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[redis.Redis]:
    """A server of the test's own, whose memory it takes; culex pointed at it."""
    with private_tcp_server(tmp_path, "--maxmemory-policy", "noeviction") as port:
        client = redis.Redis(port=port)
        monkeypatch.setenv("CULEX_REDIS_URL", f"redis://127.0.0.1:{port}")
        config.reset()
        culex.configure(lease=LEASE_FULL)
        try:
            yield client
        finally:
            client.close()
            config.reset()


@pytest.mark.parametrize("what", REFUSED_WHEN_FULL)
async def test_a_call_refused_out_of_memory_is_held_and_spends_no_retry(
    full_server: redis.Redis, what: str, caplog: pytest.LogCaptureFixture
) -> None:
    r = full_server
    task = enqueue(what)
    async with met_by_an_outage(task, what, lambda: take_the_memory(r), caplog):
        # Three leases of the server's clock: the lease is renewed meanwhile, and the
        # call sent again and refused.
        start = server_ms(r)
        await await_until(
            lambda: server_ms(r) > start + 3 * LEASE_FULL * 1000, timeout=30, what="3 leases"
        )
        assert task.info()["state"] == "pending"
        give_it_back(r)
        assert await task.aresult(timeout=30) == WHAT[what][2]
    assert "waits for the server" in caplog.text and "out of memory" in caplog.text
    ran_once(task, what)


class Meanwhile:
    """An outage (the record refused: out of memory) in which ``what`` happens before the
    record is sent again: "landed", its first sending was stored and only the reply lost
    (the test stores it itself); "handed out", the lease passed and the task was reclaimed
    and claimed again (attempt 2)."""

    def __init__(self, r: redis.Redis, task_id: str, what: str) -> None:
        self.r, self.task_id, self.what = r, task_id, what
        self.pauses = 0

    def pause(self, error: ServerUnavailable) -> float:
        assert "out of memory" in str(error)
        self.pauses += 1
        give_it_back(self.r)
        if self.what == "landed":
            call = steps.step(K, self.task_id, 1, 0, "charge", '"charged"', max_steps=9,
                              max_step_bytes=99, max_task_bytes=99)  # fmt: skip
            assert run_sync(one_call(call)) == ("recorded",)
        else:
            self.r.zadd(K.pending, {self.task_id: 0}, xx=True)  # (its lease passed)
            reclaim = claims.reclaim(K, limit=9, dead_ttl_ms=60_000, dead_max=9)
            reclaimed = run_sync(one_call(reclaim))
            assert reclaimed == [(self.task_id, "waiting")]
            claim()
        return 0.0

    def passed(self) -> None:
        pass


def claim() -> None:
    run_sync(one_call(claims.claim(K, limit=1, lease_ms=60_000, promote_limit=10,
                                   dead_ttl_ms=60_000)))  # fmt: skip


@pytest.mark.parametrize("what", ["landed", "handed out"])
def test_a_record_sent_again_is_fenced_and_taken_once(full_server: redis.Redis, what: str) -> None:
    """The record sent again after an outage is fenced by the attempt, as the first was:
    refused when another attempt holds the task (the attempt stops, nothing written), and
    taken as stored when its first sending was (the step is not run again)."""
    r = full_server
    task = OutageStepJob().enqueue()
    claim()  # attempt 1
    job = OutageStepJob()
    job.task_id, job.attempt, job.reporting_ = task.id, 1, Reporting(None, K)
    job.outage_ = meanwhile = Meanwhile(r, task.id, what)
    gate.set()
    take_the_memory(r)
    if what == "landed":
        assert job.perform() == "charged"
        assert r.hget(K.task(task.id), "steps") == b"1"
    else:
        with pytest.raises(AttemptOver, match="stale"):
            job.perform()
        assert r.hmget(K.task(task.id), "attempt", "steps") == [b"2", None]
    assert meanwhile.pauses == 1
    assert ran[f"{task.id}:charge"] == 1


# -- killed and started again -----------------------------------------------------------

# A lease long enough that 0.8 of it spans a renewal lease/3 old, the first refusal (with
# redis-py's client, a call to a killed server is refused after socket_timeout, 5 s) and the
# restart.
LEASE_KILL = 15.0


@pytest.fixture
def own_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedServer]:
    """A server of the test's own (append-only file on), culex pointed at it."""
    server = EmbeddedServer(tmp_path / "server", binary=suite_binary())
    monkeypatch.setenv("CULEX_REDIS_URL", server.ensure_running())
    config.reset()
    try:
        yield server
    finally:
        server.stop()
        config.reset()


def kill(server: EmbeddedServer) -> None:
    pid = server.pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not alive(pid), what="the server gone")


@pytest.mark.parametrize("what", list(WHAT))
async def test_a_call_through_a_server_killed_and_started_again_spends_no_retry(
    own_server: EmbeddedServer, what: str, caplog: pytest.LogCaptureFixture
) -> None:
    culex.configure(lease=LEASE_KILL)
    task = enqueue(what)
    async with met_by_an_outage(task, what, lambda: kill(own_server), caplog):
        own_server.ensure_running()
        assert await task.aresult(timeout=30) == WHAT[what][2]
    assert "waits for the server" in caplog.text
    ran_once(task, what)


async def test_a_record_sent_from_a_child_process_is_held_through_a_restart(
    own_server: EmbeddedServer,
) -> None:
    """isolation = "process": the child holds the record (it counts the lease from the last
    renewal before it started) and the task succeeds on its first attempt."""
    culex.configure(lease=LEASE_KILL)
    entered.clear()
    opened.clear()
    told = Held()
    logging.getLogger("culex").addHandler(told)
    try:
        task = OutageChildJob().enqueue()
        async with running(culex.Runner(run_from=[QUEUE])):
            await await_until(entered.is_set, what="the step in the child")
            kill(own_server)
            opened.set()
            await await_until(told.held.is_set, what="the record held")
            own_server.ensure_running()
            assert await task.aresult(timeout=30) == "charged"
    finally:
        logging.getLogger("culex").removeHandler(told)
    info = task.info()
    assert (info["attempt"], info["retry_count"], info["steps"]) == ("1", "0", "1")
    assert info.get("stalls") is None


async def test_the_lease_running_out_in_the_outage_ends_the_attempt_as_a_stall(
    own_server: EmbeddedServer, caplog: pytest.LogCaptureFixture
) -> None:
    """Down past the lease: the attempt stops (its record was never stored, another runner
    may hold the task by now), and the task runs again after the lease as a stall, not a
    failed attempt: the step runs again, and the task succeeds with max_retries = 0."""
    culex.configure(lease=1.0)
    task = enqueue("step")
    with caplog.at_level(logging.WARNING, logger="culex"):
        async with running(culex.Runner(run_from=[QUEUE])):
            await await_until(lambda: started(task, "step"), what="the step")
            kill(own_server)
            gate.set()
            await await_until(lambda: "within its lease" in caplog.text, what="the stop")
            own_server.ensure_running()
            assert await task.aresult(timeout=30) == "charged"
    info = task.info()
    assert (info["state"], info["retry_count"], info["stalls"]) == ("succeeded", "0", "1")
    assert (info["attempt"], info["steps"]) == ("2", "1")
    assert ran[f"{task.id}:charge"] == 2  # its record was lost with the first attempt
