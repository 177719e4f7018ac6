"""culex through sentinels (``redis+sentinel://S1,S2,S3/SERVICE``): enqueue, run, results and
dead on a master the sentinels name; durable enqueues that wait for the replica; and a
failover under load, with runner processes and the chaos ledger's check, then the killed
master back (a master, for a while, that no client of culex may write to).
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis

import culex
from culex import config
from culex.jobs import durability

from .._redis import test_drivers
from ..chaos import chaos_jobs
from ..chaos.chaos_jobs import ChaosJob, SyncChaosJob
from ..chaos.fleet import Fleet
from ..chaos.ledger import SUCCEEDED, Execution, Ledger
from ..chaos.workload import Producer, drain, publish
from ..conftest import running, wait_until
from ..topology import Node, SentinelSetup

# This process only enqueues the chaos jobs (as tests/chaos/conftest.py says): runners of
# other tests in this process must not think they serve them.
for _job in chaos_jobs.JOBS:
    culex.registry.remove(_job)


class GreetJob(culex.QueuedJob):
    queue = "sentinel_greet"
    name: str

    async def perform(self) -> str:
        return f"hello {self.name}"


class DoomedJob(culex.QueuedJob):
    """Always raises: one retry, then dead."""

    queue = "sentinel_doomed"
    max_retries = 1

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(milliseconds=50)

    def perform(self) -> None:
        raise RuntimeError("doomed")


def point_at(monkeypatch: pytest.MonkeyPatch, setup: SentinelSetup, durable: bool) -> None:
    """This process's culex settings: the sentinels' URL (in the environment, which beats
    configure() and holds the test session's server), ``durable_enqueue``."""
    monkeypatch.setenv("CULEX_REDIS_URL", setup.url)
    config.reset()
    culex.configure(durable_enqueue=durable)


@pytest.fixture
def through(
    sentinel_setup: SentinelSetup, monkeypatch: pytest.MonkeyPatch
) -> Iterator[SentinelSetup]:
    """culex pointed at the shared sentinel setup for the test."""
    point_at(monkeypatch, sentinel_setup, durable=False)
    try:
        yield sentinel_setup
    finally:
        config.reset()


def data_client(node: Node) -> redis.Redis:
    """A redis-py client of one server whose replies are bytes (as the ledger reads them)."""
    return redis.Redis(host="127.0.0.1", port=node.port, socket_timeout=5.0)


# -- the basics ------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", ["redis-py sync", "redis-py async"])
async def test_the_drivers_conform_through_the_sentinels(
    kind: str, sentinel_setup: SentinelSetup
) -> None:
    """The conformance tests of tests/_redis/test_drivers.py, on the master the sentinels
    name (a closed driver, sentinels' connections too, can still be used)."""
    r = data_client(sentinel_setup.master())
    try:
        await test_drivers.test_a_driver_runs_a_call_a_batch_and_the_refused(
            kind, r, sentinel_setup.url
        )
        r.flushall()
        await test_drivers.test_a_driver_loads_scripts_the_server_lost(kind, r, sentinel_setup.url)
    finally:
        r.close()


async def test_a_task_is_stored_on_the_master_runs_and_has_its_result(
    through: SentinelSetup,
) -> None:
    task = GreetJob(name="sentinel").enqueue()
    master, replica = through.master(), through.replica()
    key = f"culex:{{{GreetJob.queue}}}:task:{task.id}"
    assert master.client().hget(key, "state") == "waiting"
    async with running(culex.Runner(run_from=[GreetJob.queue])):
        assert await task.aresult(timeout=10) == "hello sentinel"
    assert await task.astate() == culex.TaskState.SUCCEEDED
    wait_until(
        lambda: replica.client().hget(key, "state") == "succeeded",
        what="the replica to have the task's end",
    )


async def test_a_task_that_keeps_failing_is_dead_and_can_be_retried(
    through: SentinelSetup,
) -> None:
    task = DoomedJob().enqueue()
    async with running(culex.Runner(run_from=[DoomedJob.queue])):
        with pytest.raises(culex.TaskFailed, match="doomed"):
            await task.aresult(timeout=10)
    dead = culex.dead_tasks(DoomedJob.queue)
    assert [(d.id, d.retry_count) for d in dead] == [(task.id, 2)]
    assert "RuntimeError: doomed" in dead[0].error
    assert culex.retry_dead(DoomedJob.queue) == [task.id]
    assert task.state() == culex.TaskState.WAITING


# -- durable enqueue waits for the replica -----------------------------------------------------


def test_a_durable_enqueue_is_confirmed_only_by_the_replica(
    private_sentinel_setup: SentinelSetup, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The servers have appendonly on, and Valkey has WAITAOF: a durable enqueue that only
    waited for the master's fsync would return while the replica, the one a failover
    promotes, lacks the task. It must wait for the replica (WAIT 1)."""
    setup = private_sentinel_setup
    monkeypatch.setattr(durability, "DURABLE_TIMEOUT_MS", 300)
    point_at(monkeypatch, setup, durable=True)
    replica = setup.replica()
    assert replica.process is not None
    try:
        first = GreetJob(name="confirmed").enqueue()
        assert replica.client().exists(f"culex:{{{GreetJob.queue}}}:task:{first.id}")
        replica.process.send_signal(signal.SIGSTOP)  # it takes no more of the stream
        try:
            with pytest.raises(culex.ServerError, match="no replica confirmed the write"):
                GreetJob(name="unconfirmed").enqueue(id="unconfirmed")
        finally:
            replica.process.send_signal(signal.SIGCONT)
        # The task was stored; sent again with its id, it is confirmed once the replica is back.
        GreetJob(name="unconfirmed").enqueue(id="unconfirmed")
        assert replica.client().exists(f"culex:{{{GreetJob.queue}}}:task:unconfirmed")
    finally:
        config.reset()


# -- a failover under load ----------------------------------------------------------------------

RUNNERS = 2
RATE = 80.0  # tasks per second, above what the fleet runs (a backlog is waiting at the kill)
TASKS = 1200
ACKED_BEFORE_KILL = 400  # about 5 s of load: a backlog is waiting when the master dies


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    kept = Ledger(tmp_path / "ledger")
    try:
        yield kept
    finally:
        kept.close()


def first_starts(executions: list[Execution], after: float) -> dict[int, float]:
    """Per runner pid, the seconds from ``after`` to its first execution that started then."""
    found: dict[int, float] = {}
    for e in sorted(executions, key=lambda e: e.start):
        if e.start >= after and e.pid not in found:
            found[e.pid] = round(e.start - after, 3)
    return found


@pytest.mark.timeout(300)
def test_a_failover_under_load_loses_no_durable_enqueue(
    private_sentinel_setup: SentinelSetup,
    ledger: Ledger,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Durable producers and runner processes through the sentinels; the master is
    SIGKILLed. After the failover nothing acknowledged is lost, no attempt ran twice, and
    every runner runs tasks again. Then the killed master comes back (as a master, until a
    sentinel demotes it): no task is lost or dead because of it."""
    setup = private_sentinel_setup
    point_at(monkeypatch, setup, durable=True)
    fleet = Fleet(ledger, setup.url, tmp_path / "fleet", concurrency=4, log_level="WARNING")
    work = [
        (f"failover-{n:05d}", (SyncChaosJob if n % 3 == 0 else ChaosJob)(ms=100 + n % 150))
        for n in range(TASKS)
    ]
    producer = Producer(ledger, [(i, job, SUCCEEDED) for i, job in work], RATE)
    try:
        for _ in range(RUNNERS):
            fleet.start()
        producer.start()
        wait_until(
            lambda: len(ledger.acked) >= ACKED_BEFORE_KILL,
            timeout=60,
            what=f"{ACKED_BEFORE_KILL} acknowledged enqueues",
        )
        old = setup.master()
        killed_at = time.time()
        setup.kill_master()
        new = setup.wait_failover(old)
        failed_over_at = time.time()
        pids = {runner.pid for runner in fleet.runners}
        wait_until(
            lambda: set(first_starts(ledger.executions(), failed_over_at)) == pids,
            timeout=60,
            what="every runner to run a task after the failover",
        )
        recovered = first_starts(ledger.executions(), failed_over_at)
        since_kill = first_starts(ledger.executions(), killed_at)
        acked_at_failover = len(ledger.acked)

        restarted_at = time.time()
        setup.set_down_after(60_000)  # no second failover while the old master syncs
        setup.restart(old)  # a master for a while, then a sentinel makes it a replica
        assert setup.master() is new
        producer.join(timeout=120)
        assert not producer.is_alive(), "the producer did not finish"
        r = data_client(new)
        try:
            drain_s = drain(r, ledger, timeout=90, tick=fleet.replace_dead)
            verdict = ledger.check(r)
        finally:
            r.close()
        died = [runner for runner in fleet.runners if not runner.alive()]
    finally:
        producer.stop()
        fleet.close()
        config.reset()
    publish(
        "sentinel-failover",
        {
            "runners": RUNNERS,
            "failover_s": round(failed_over_at - killed_at, 3),
            "runner_first_task_after_failover_s": sorted(recovered.values()),
            "runner_first_task_after_kill_s": sorted(since_kill.values()),
            "acknowledged_at_failover": acked_at_failover,
            "old_master_back_as_replica_s": round(time.time() - restarted_at, 1),
            "drain_s": round(drain_s, 1),
            **verdict.figures(),
            **producer.figures(),
        },
    )
    assert not producer.unclear, f"enqueue raised errors that are not culex's: {producer.unclear}"
    assert not producer.gave_up, producer.gave_up
    assert producer.errors, "no enqueue failed during the failover: nothing was tested"
    assert verdict.acknowledged == TASKS
    assert verdict.ok, verdict.problems()
    assert verdict.states == {SUCCEEDED: TASKS}, verdict.states  # none dead
    assert not died, fleet.logs()[-3000:]
