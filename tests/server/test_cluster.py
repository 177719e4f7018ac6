"""culex on a Redis Cluster (3 masters, 3 replicas), through the public API.

Six queues, two on each master, so every feature is seen on every shard: enqueue (now,
delayed, at, many at once), a runner over all of them, retries into dead, cancel, retry
from dead (the API and ``culex dead``), waiting for a result, durable enqueue (WAIT on
every node written), periodic jobs once per slot, and a ``redis://`` URL of one node. The
servers' own error counters show that nothing culex sends gets CROSSSLOT.

The user's setting is the environment (``CULEX_REDIS_URL``), as for a runner process: it
wins over ``configure()``, and the test session's own server is named there.
"""

from __future__ import annotations

import asyncio
import collections
import functools
import itertools
import logging
import signal
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from typing import Any, ClassVar, cast

import pytest
import redis

import culex
from culex import config
from culex._redis import commands, redispy_routing
from culex._redis.calls import Call
from culex._redis.keys import queue_keys
from culex._redis.redispy import RedisPyAsyncDriver, RedisPySyncDriver
from culex.jobs import durability
from culex.operations import inspection
from culex.runner.backoff import NODE_OUT_OF_REACH, Backoff

from ..conftest import await_until, running
from ..topology import Cluster, Node, keyslot

# Two queues per master (slots 0-5460, 5461-10922, 10923-16383, as the cluster is made):
# test_the_queues_are_spread_over_every_master checks it on the running cluster.
QUEUES = ("emails", "reports", "images", "search", "billing", "exports")
PERIODIC_QUEUES = ("ticks", "digests")  # on two other masters


@pytest.fixture
def on_cluster(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """The session's cluster, emptied, and culex's settings pointing at it."""
    monkeypatch.setenv("CULEX_REDIS_URL", cluster.url)
    monkeypatch.setenv("CULEX_SUCCESSFUL_JOB_TTL", "600")  # keep finished tasks to read
    config.reset()
    try:
        yield cluster
    finally:
        monkeypatch.undo()
        config.reset()


def master_of_queue(cluster: Cluster, queue: str) -> Node:
    return cluster.master_of_key(queue_keys("culex", queue).waiting)


def error_counts(cluster: Cluster) -> dict[int, dict[str, int]]:
    """Each master's error replies so far, by error code (INFO errorstats)."""
    found: dict[int, dict[str, int]] = {}
    for master in cluster.masters():
        stats = master.client().info("errorstats")
        found[master.port] = {
            name.removeprefix("errorstat_"): int(cast(dict[str, Any], value)["count"])
            for name, value in stats.items()
        }
    return found


def command_calls(node: Node, command: str) -> int:
    """How many times ``node`` ran ``command`` (INFO commandstats)."""
    stats = node.client().info("commandstats").get(f"cmdstat_{command}")
    return int(cast(dict[str, Any], stats)["calls"]) if stats else 0


def new_errors(before: dict[int, dict[str, int]], after: dict[int, dict[str, int]]) -> set[str]:
    """The error codes the masters replied with between the two counts."""
    return {
        code
        for port, counts in after.items()
        for code, count in counts.items()
        if count > before.get(port, {}).get(code, 0)
    }


# -- the jobs ------------------------------------------------------------------------------

ran: list[tuple[str, int]] = []  # (queue, n) of every perform, in order
started_at: dict[int, float] = {}  # n -> time.perf_counter() when perform began


class ShardEchoJob(culex.QueuedJob):
    queue = QUEUES[0]
    n: int

    async def perform(self) -> int:
        started_at[self.n] = time.perf_counter()
        ran.append((self.queue, self.n))
        return self.n


class ReportsEchoJob(ShardEchoJob):
    queue = QUEUES[1]


class ImagesEchoJob(ShardEchoJob):
    queue = QUEUES[2]


class SearchEchoJob(ShardEchoJob):
    queue = QUEUES[3]


class BillingEchoJob(ShardEchoJob):
    queue = QUEUES[4]


class ExportsEchoJob(ShardEchoJob):
    queue = QUEUES[5]


ECHO_JOBS: tuple[type[ShardEchoJob], ...] = (
    ShardEchoJob,
    ReportsEchoJob,
    ImagesEchoJob,
    SearchEchoJob,
    BillingEchoJob,
    ExportsEchoJob,
)


class ShardFailingJob(culex.QueuedJob):
    """Raises on every attempt: retried twice, then dead."""

    queue = QUEUES[2]
    max_retries = 2
    attempts: ClassVar[list[tuple[str, int]]] = []

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(milliseconds=20)

    async def perform(self) -> None:
        ShardFailingJob.attempts.append((self.queue, self.attempt))
        raise RuntimeError(f"attempt {self.attempt} broke")


class BillingFailingJob(ShardFailingJob):
    queue = QUEUES[4]


class HealingJob(culex.QueuedJob):
    """Fails until ``HealingJob.healed``: dead first, then retried from dead and succeeds."""

    queue = QUEUES[5]
    max_retries = 0
    healed: ClassVar[bool] = False

    async def perform(self) -> str:
        if not HealingJob.healed:
            raise RuntimeError("not yet")
        return "healed"


slots_run: list[tuple[str, int]] = []  # (job, slot) of every periodic perform


def runner(queues: tuple[str, ...] = QUEUES, concurrency: int = 8) -> culex.Runner:
    return culex.Runner(run_from=list(queues), concurrency=concurrency)


# -- where the queues are -----------------------------------------------------------------


def test_the_queues_are_spread_over_every_master(cluster: Cluster) -> None:
    masters = cluster.masters()
    per_master = collections.Counter(master_of_queue(cluster, q) for q in QUEUES)
    assert sorted(per_master.values()) == [2, 2, 2] and set(per_master) == set(masters)
    periodic = {master_of_queue(cluster, q) for q in PERIODIC_QUEUES}
    assert len(periodic) == 2
    for queue in QUEUES:  # every key of a queue is in one slot: one script, one node
        keys = queue_keys("culex", queue)
        named = [keys.waiting, keys.pending, keys.scheduled, keys.dead, keys.signal,
                 keys.task("x"), keys.done("x"), keys.periodic("J")]  # fmt: skip
        assert {keyslot(key) for key in named} == {keyslot(keys.waiting)}


# -- the core behaviour, on every shard ----------------------------------------------------


async def test_a_runner_over_six_queues_on_three_shards_runs_them_all_without_crossslot(
    on_cluster: Cluster, caplog: pytest.LogCaptureFixture
) -> None:
    ran.clear()
    before = error_counts(on_cluster)
    start = datetime.now(UTC)
    now = [await job(n=i).aenqueue() for i, job in enumerate(ECHO_JOBS)]
    delayed = [await job(n=10 + i).aenqueue(delay=0.3) for i, job in enumerate(ECHO_JOBS)]
    at = [
        await job(n=20 + i).aenqueue(at=start + timedelta(milliseconds=600))
        for i, job in enumerate(ECHO_JOBS)
    ]
    assert {await t.astate() for t in now} == {culex.TaskState.WAITING}
    assert {await t.astate() for t in delayed + at} == {culex.TaskState.SCHEDULED}
    for task in now:  # each task is stored on the master of its queue
        key = queue_keys("culex", task.queue).task(task.id)
        assert master_of_queue(on_cluster, task.queue).client().exists(key) == 1
    with caplog.at_level(logging.INFO, logger="culex"):
        async with running(runner()):
            results = [await t.aresult(timeout=20) for t in now + delayed + at]
            # idle now: the claim/wait loop goes round its per-queue waits a few times
            await asyncio.sleep(3 * config.settings().idle_wait)
    assert results == [*range(6), *range(10, 16), *range(20, 26)]
    assert {queue for queue, _ in ran} == set(QUEUES)
    assert all(
        t.state() is culex.TaskState.SUCCEEDED for t in now + delayed + at
    )  # (sync twins work on a cluster too)
    problems = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert not problems, [r.getMessage() for r in problems]
    # the servers never replied CROSSSLOT (nor MOVED or ASK: the slot map was right)
    assert not new_errors(before, error_counts(on_cluster)) & {"CROSSSLOT", "MOVED", "ASK"}


async def test_retries_then_dead_then_retried_from_dead_on_two_shards(on_cluster: Cluster) -> None:
    ShardFailingJob.attempts = []
    failing = [await ShardFailingJob().aenqueue(), await BillingFailingJob().aenqueue()]
    HealingJob.healed = False
    flaky = await HealingJob().aenqueue()
    async with running(runner()):
        for task in failing:
            with pytest.raises(culex.TaskFailed, match="attempt 3 broke"):
                await task.aresult(timeout=20)
        with pytest.raises(culex.TaskFailed, match="not yet"):
            await flaky.aresult(timeout=20)
        assert sorted(ShardFailingJob.attempts) == [
            (q, a) for q in sorted((QUEUES[2], QUEUES[4])) for a in (1, 2, 3)
        ]
        for task in [*failing, flaky]:
            info = await task.ainfo()
            assert info["state"] == "dead", info
        listed = await culex.adead_tasks(QUEUES[4])
        assert [(d.id, d.type, d.attempt) for d in listed] == [
            (failing[1].id, "BillingFailingJob", 3)
        ]
        HealingJob.healed = True
        assert await culex.aretry_dead(QUEUES[5]) == [flaky.id]
        assert await flaky.aresult(timeout=20) == "healed"
        ShardFailingJob.attempts = []
        assert await failing[0].aretry() is True  # task.retry(): max_retries again
        with pytest.raises(culex.TaskFailed, match="attempt 6 broke"):
            await failing[0].aresult(timeout=20)
    assert ShardFailingJob.attempts == [(QUEUES[2], a) for a in (4, 5, 6)]


async def test_cancel_sends_a_waiting_or_scheduled_task_to_dead_on_each_shard(
    on_cluster: Cluster,
) -> None:
    ran.clear()
    waiting = [await job(n=i).aenqueue() for i, job in enumerate(ECHO_JOBS)]
    scheduled = [
        await job(n=10 + i).aenqueue(delay=timedelta(hours=1)) for i, job in enumerate(ECHO_JOBS)
    ]
    kept = await ECHO_JOBS[3](n=99).aenqueue()
    for task in waiting:
        assert await task.acancel("not needed") is True
    for task in scheduled:
        assert task.cancel() is True
    assert await waiting[0].acancel() is False  # dead already: nothing changes
    async with running(runner()):
        assert await kept.aresult(timeout=20) == 99
        for task in waiting:
            with pytest.raises(culex.TaskFailed, match="cancelled: not needed"):
                await task.aresult(timeout=5)
        # a cancelled task retried from dead runs
        assert await scheduled[5].aretry() is True
        assert await scheduled[5].aresult(timeout=20) == 15
    assert sorted(ran) == sorted([(QUEUES[3], 99), (QUEUES[5], 15)])
    for queue in QUEUES:
        died = {d.id for d in await culex.adead_tasks(queue)}
        expected = {t.id for t in waiting + scheduled[:5] if t.queue == queue}
        assert died == expected


def culex_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "culex", *args], capture_output=True, text=True, timeout=60
    )


def test_the_command_line_cancels_lists_and_retries_dead_on_a_cluster(
    on_cluster: Cluster,
) -> None:
    tasks = [job(n=i).enqueue() for i, job in enumerate(ECHO_JOBS)]
    for task in tasks:
        cancelled = culex_command("cancel", task.queue, task.id, "--redis-url", on_cluster.url)
        assert cancelled.returncode == 0, cancelled.stderr
        assert task.state() is culex.TaskState.DEAD
    for task in tasks:  # (CULEX_REDIS_URL names the cluster for these)
        listed = culex_command("dead", task.queue)
        assert listed.returncode == 0, listed.stderr
        assert task.id in listed.stdout and "cancelled" in listed.stdout
        retried = culex_command("dead", "retry", task.queue, "--all")
        assert retried.stdout == f"put 1 dead task(s) of {task.queue} back in waiting\n"
        assert task.state() is culex.TaskState.WAITING


async def test_result_waits_for_a_task_that_a_runner_starts_later(on_cluster: Cluster) -> None:
    tasks = [await job(n=i).aenqueue() for i, job in enumerate(ECHO_JOBS)]
    # the waiters block on each queue's master before any runner exists
    waiters = [asyncio.ensure_future(t.aresult(timeout=30)) for t in tasks]
    sync_waiter = asyncio.ensure_future(asyncio.to_thread(tasks[4].result, 30))

    async def marked() -> bool:  # wait.lua marked every task as waited for
        infos = [await t.ainfo() for t in tasks]
        return all(info.get("waited") for info in infos)

    await await_until(marked, what="every waiter to block")
    assert not any(w.done() for w in [*waiters, sync_waiter])
    async with running(runner()):
        assert await asyncio.gather(*waiters) == list(range(6))
        assert await sync_waiter == 4


async def test_weighted_queues_on_three_shards_are_taken_in_their_proportions(
    on_cluster: Cluster,
) -> None:
    """The order logic is the same on a cluster: counted over the first 100 tasks run."""
    ran.clear()
    heavy, middle, light = (QUEUES[0], 6), (QUEUES[2], 3), (QUEUES[4], 1)
    jobs = [ECHO_JOBS[0], ECHO_JOBS[2], ECHO_JOBS[4]]
    await culex.aenqueue_many(job(n=n) for job in jobs for n in range(100))
    weighted = [f"{queue}:{weight}" for queue, weight in (heavy, middle, light)]
    async with running(culex.Runner(run_from=weighted, concurrency=1)):
        await await_until(lambda: len(ran) >= 100, what="100 tasks to run")
    counts = collections.Counter(queue for queue, _ in ran[:100])
    assert counts[heavy[0]] > counts[middle[0]] > counts[light[0]] > 0, counts
    assert 50 <= counts[heavy[0]] <= 70 and 5 <= counts[light[0]] <= 15, counts


async def test_enqueue_many_writes_to_every_shard_in_one_call(on_cluster: Cluster) -> None:
    ran.clear()
    jobs = [ECHO_JOBS[i % 6](n=i) for i in range(60)]
    before = {m.port: command_calls(m, "evalsha") for m in on_cluster.masters()}
    tasks = culex.enqueue_many(jobs)
    assert [t.queue for t in tasks] == [job.queue for job in jobs]
    for master in on_cluster.masters():
        mine = [t for t in tasks if master_of_queue(on_cluster, t.queue) is master]
        assert len(mine) == 20
        stored = cast(list[str], master.client().keys("*:task:*"))
        assert sorted(key.split(":", 3)[3] for key in stored) == sorted(t.id for t in mine)
        # (a first EVALSHA of a node may be refused NOSCRIPT and sent again as EVAL)
        assert command_calls(master, "evalsha") - before[master.port] + 1 >= len(mine)
    async with running(runner()):
        assert [await t.aresult(timeout=20) for t in tasks] == list(range(60))
    assert collections.Counter(q for q, _ in ran) == dict.fromkeys(QUEUES, 10)


def replica_has(cluster: Cluster, master: Node, key: str) -> bool:
    """Whether ``master``'s replica holds ``key`` (read there with READONLY)."""
    (replica,) = cluster.replicas_of(master)
    client = redis.Redis(port=replica.port, single_connection_client=True, protocol=2)
    try:
        client.execute_command("READONLY")
        return bool(client.exists(key))
    finally:
        client.close()


def test_durable_enqueue_waits_for_a_replica_of_every_master_written(
    on_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CULEX_DURABLE_ENQUEUE", "1")
    config.reset()
    masters = on_cluster.masters()
    waits = {m.port: command_calls(m, "wait") for m in masters}
    tasks = culex.enqueue_many([ECHO_JOBS[i % 6](n=i) for i in range(12)])
    one = ECHO_JOBS[4](n=100).enqueue()
    for task in [*tasks, one]:  # acknowledged: its master's replica has it already
        master = master_of_queue(on_cluster, task.queue)
        assert replica_has(on_cluster, master, queue_keys("culex", task.queue).task(task.id))
    # WAIT went to every master the batch wrote to, on the connection that wrote
    assert all(command_calls(m, "wait") > waits[m.port] for m in masters)
    billing = master_of_queue(on_cluster, QUEUES[4])
    assert command_calls(billing, "wait") >= waits[billing.port] + 2


def test_durable_enqueue_fails_while_the_replica_of_its_shard_does_not_confirm(
    on_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A replica that cannot take the write (stopped) holds the acknowledgement back: an
    enqueue acknowledged then would be lost if its master died before the replica had it."""
    monkeypatch.setenv("CULEX_DURABLE_ENQUEUE", "1")
    config.reset()
    ECHO_JOBS[0](n=0).enqueue()  # (culex learns how this deployment confirms a write)
    master = master_of_queue(on_cluster, QUEUES[4])
    (replica,) = on_cluster.replicas_of(master)
    assert replica.process is not None
    replica.process.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(culex.ServerError, match="no replica confirmed the write"):
            ECHO_JOBS[4](n=1).enqueue()
        ECHO_JOBS[0](n=2).enqueue()  # another shard's replica confirms
    finally:
        replica.process.send_signal(signal.SIGCONT)
        on_cluster.wait_settled()


def test_a_durable_workflow_and_signal_wait_for_the_replica_of_their_shard(
    on_cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """durable_enqueue covers a workflow's enqueue and a signal: with the replica of their
    shard stopped, neither is acknowledged (ServerUnavailable: sent again, with the same
    ids, once a replica is back); with it running, both are, and the replica has them.
    Seen failing without it: both acknowledged while the replica had neither."""
    monkeypatch.setenv("CULEX_DURABLE_ENQUEUE", "1")
    monkeypatch.setattr(durability, "DURABLE_TIMEOUT_MS", 300)
    config.reset()
    job = ECHO_JOBS[4]
    waiting = job(n=0).enqueue()  # (culex learns how this deployment confirms a write)
    master = master_of_queue(on_cluster, job.queue)
    (replica,) = on_cluster.replicas_of(master)
    assert replica.process is not None
    flow = culex.Workflow()
    flow.add(job(n=1))
    replica.process.send_signal(signal.SIGSTOP)
    try:
        with pytest.raises(culex.ServerUnavailable, match="no replica confirmed the write"):
            flow.enqueue()
        with pytest.raises(culex.ServerUnavailable, match="no replica confirmed the write"):
            waiting.signal("go", 1)
    finally:
        replica.process.send_signal(signal.SIGCONT)
        on_cluster.wait_settled()
    assert waiting.signal("go", 2) == "kept"  # (a signal for a task that waits for none)
    again = culex.Workflow()  # (the first one, left half-made, a runner discards)
    other = again.add(job(n=2))
    again.enqueue()
    assert replica_has(on_cluster, master, queue_keys("culex", job.queue).task(other.id))


async def test_periodic_jobs_run_once_per_slot_with_two_runners(on_cluster: Cluster) -> None:
    class ShardTickJob(culex.PeriodicJob):
        queue = PERIODIC_QUEUES[0]
        run_every = timedelta(seconds=1)

        async def perform(self) -> None:
            slots_run.append((self.type_, int(self.task_id.rsplit(":", 1)[1])))

    class DigestShardTickJob(ShardTickJob):
        queue = PERIODIC_QUEUES[1]

    slots_run.clear()
    try:
        first, second = runner(PERIODIC_QUEUES), runner(PERIODIC_QUEUES)
        async with running(first), running(second):

            def counted() -> bool:
                done = collections.Counter(job for job, _ in slots_run)
                return min(done["ShardTickJob"], done["DigestShardTickJob"]) >= 3

            await await_until(counted, timeout=20, what="three slots of each periodic job")
    finally:  # (no other test's runner may schedule them)
        culex.registry.remove(ShardTickJob)
        culex.registry.remove(DigestShardTickJob)
    for job in ("ShardTickJob", "DigestShardTickJob"):
        slots = [slot for name, slot in slots_run if name == job]
        assert len(slots) == len(set(slots)), f"{job} ran a slot twice: {sorted(slots)}"
        ordered = sorted(slots)
        assert [b - a for a, b in itertools.pairwise(ordered)] == [1000] * (len(ordered) - 1)


async def test_the_redis_url_of_one_node_is_used_as_the_cluster(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ran.clear()
    monkeypatch.setenv("CULEX_REDIS_URL", cluster.plain_url)
    config.reset()
    try:
        with caplog.at_level(logging.INFO, logger="culex"):
            tasks = [await job(n=i).aenqueue() for i, job in enumerate(ECHO_JOBS)]
            sync_task = ECHO_JOBS[5](n=50).enqueue()
            async with running(runner()):
                assert [await t.aresult(timeout=20) for t in tasks] == list(range(6))
                assert sync_task.result(timeout=20) == 50
    finally:
        monkeypatch.undo()
        config.reset()
    detected = [m for m in caplog.messages if "is a node of a cluster (cluster_enabled:1)" in m]
    assert detected and cluster.plain_url.removeprefix("redis://") in detected[0]
    assert {q for q, _ in ran} == set(QUEUES)


async def test_the_drivers_split_a_batch_by_node_and_keep_its_order(on_cluster: Cluster) -> None:
    """What the procedures above rest on: one batch over keys of three masters comes back in
    the order it was sent, through both redis-py drivers."""
    tasks = [ECHO_JOBS[i](n=i).enqueue() for i in range(6)]
    calls = [commands.read_task(queue_keys("culex", t.queue), t.id) for t in reversed(tasks)]
    sync = RedisPySyncDriver(on_cluster.url)
    asynchronous = RedisPyAsyncDriver(on_cluster.url)
    try:
        for replies in (sync.run_many(calls), await asynchronous.run_many(calls)):
            assert [fields["params"] for fields in replies] == [
                f'{{"n":{n}}}' for n in reversed(range(6))
            ]
    finally:
        sync.close()
        await asynchronous.close()


# -- pick-up latency, printed ------------------------------------------------------------


async def pickup_latencies(samples: int) -> list[float]:
    """Enqueue -> perform start (ms) of one task at a time, for an idle runner on six
    queues; the queue changes every time."""
    started_at.clear()
    found: list[float] = []
    async with running(runner()):
        await ECHO_JOBS[0](n=-1).aenqueue()  # (connections made, scripts loaded)
        await await_until(lambda: -1 in started_at, what="the first task")
        for n in range(samples):
            await asyncio.sleep(0.02)  # the runner is back in its wait
            sent = time.perf_counter()
            await ECHO_JOBS[n % 6](n=n).aenqueue()
            began = await await_until(functools.partial(started_at.get, n), what=f"task {n}")
            found.append((began - sent) * 1000)
    return found


async def test_pickup_latency_on_a_cluster_and_on_one_server(
    on_cluster: Cluster, monkeypatch: pytest.MonkeyPatch, url: str
) -> None:
    on_cluster_ms = await pickup_latencies(60)
    monkeypatch.setenv("CULEX_REDIS_URL", url)
    config.reset()
    redis.Redis.from_url(url).flushall()
    on_one_ms = await pickup_latencies(60)
    line = "pick-up latency (enqueue -> perform start, idle runner on 6 queues), ms: "
    for name, found in (("cluster", on_cluster_ms), ("one server", on_one_ms)):
        quartiles = statistics.quantiles(found, n=4)
        print(
            f"\n{line}{name}: median {statistics.median(found):.2f}, "
            f"p25 {quartiles[0]:.2f}, p75 {quartiles[2]:.2f}, max {max(found):.2f}"
        )
    assert len(on_cluster_ms) == len(on_one_ms) == 60


@pytest.mark.parametrize("kind", ["redis-py sync", "redis-py async"])
async def test_the_drivers_conform_on_a_cluster(kind: str, cluster: Cluster) -> None:
    """The conformance tests of tests/_redis/test_drivers.py on the cluster: their batches
    name keys of several slots, so each is split by node and its replies put back in order
    (a refused call among them, scripts lost on every master)."""
    from .._redis import test_drivers

    nodes = [redis.cluster.ClusterNode("127.0.0.1", node.port) for node in cluster.masters()]
    r = redis.cluster.RedisCluster(startup_nodes=nodes, protocol=2)
    try:
        assert len({r.keyslot(k) for k in ("a-hash", "n", test_drivers.KEYS.waiting)}) == 3
        await test_drivers.test_a_driver_runs_a_call_a_batch_and_the_refused(
            kind, cast(redis.Redis, r), cluster.url
        )
        cluster.flushall()
        await test_drivers.test_a_driver_loads_scripts_the_server_lost(
            kind, cast(redis.Redis, r), cluster.url
        )
    finally:
        r.close()


async def test_the_runner_registry_and_queue_latency_on_a_cluster(on_cluster: Cluster) -> None:
    """The registry's keys share one slot, and a beat rides with the leases of queues on
    every shard; latency reads every shard's waiting set."""
    assert keyslot("culex:{runners}") == keyslot("culex:{runners}:runner:any")
    culex.configure(lease=0.3)  # a beat every 0.1 s
    async with running(runner()) as r:
        await await_until(lambda: inspection.runners() != [], what="the runner's first beat")
        (listed,) = await inspection.arunners()
        assert listed["id"] == r.id and listed["queues"] == list(QUEUES)
    assert await inspection.arunners() == []
    lag = await inspection.aqueue_latency(queues=list(QUEUES))
    assert set(lag) == set(QUEUES) and all(value == 0.0 for value in lag.values())


# -- a master that does not answer holds up only its own queues ----------------------------


@pytest.fixture
def hung_master(private_cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Hung]:
    """A private cluster, culex pointed at it, and a master that stops answering (SIGSTOP:
    a master that died is out of reach alike until its replica takes over) once
    :meth:`Hung.stop` is called; it answers again at the end."""
    monkeypatch.setenv("CULEX_REDIS_URL", private_cluster.url)
    config.reset()
    hung = Hung(private_cluster, monkeypatch)
    try:
        yield hung
    finally:
        hung.resume()
        monkeypatch.undo()
        config.reset()


class Hung:
    """Two queues on two masters, ``job`` on the one that stops answering, ``other`` not;
    ``sent`` is set once a batch is sent to the stopped one."""

    def __init__(self, cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> None:
        self.job = ECHO_JOBS[0]
        self.master = master_of_queue(cluster, self.job.queue)
        self.other = next(j for j in ECHO_JOBS if master_of_queue(cluster, j.queue) != self.master)
        self.sent = threading.Event()
        self.stopped = False
        sends = redispy_routing.Batch.sends

        def noting(batch: redispy_routing.Batch, node_of: Any, node_at: Any) -> Any:
            found = sends(batch, node_of, node_at)
            if self.stopped and any(s.node and s.node.port == self.master.port for s in found):
                self.sent.set()
            return found

        monkeypatch.setattr(redispy_routing.Batch, "sends", noting)

    def stop(self) -> None:
        assert self.master.process is not None
        self.master.process.send_signal(signal.SIGSTOP)
        self.stopped = True

    def resume(self) -> None:
        if self.stopped and self.master.process is not None:
            self.master.process.send_signal(signal.SIGCONT)
        self.stopped = False


def test_threads_enqueue_to_other_masters_while_one_master_hangs(hung_master: Hung) -> None:
    """Producer threads share one driver: a call to a master that does not answer holds up
    none to another master's queue (on a cluster their calls are not coalesced into one
    batch, which would end with its slowest node). Seen failing with them coalesced: the
    other thread's enqueue waited for the hung one's to time out."""
    hung = hung_master
    hung.job(n=0).enqueue()  # (connections made, scripts loaded)
    hung.other(n=0).enqueue()
    outcome: list[BaseException | culex.Task] = []

    def enqueue_to_the_hung_master() -> None:
        try:
            outcome.append(hung.job(n=1).enqueue())
        except culex.ServerUnavailable as exc:  # (the stop outlasted socket_timeout)
            outcome.append(exc)

    hung.stop()
    thread = threading.Thread(target=enqueue_to_the_hung_master)
    thread.start()
    try:
        assert hung.sent.wait(30), "no call went to the stopped master"
        assert hung.other(n=2).enqueue().state() is culex.TaskState.WAITING
        assert thread.is_alive()  # the hung master's call is still out
    finally:
        hung.resume()
        thread.join(30)
    assert len(outcome) == 1


async def test_coroutines_enqueue_to_other_masters_while_one_master_hangs(
    hung_master: Hung,
) -> None:
    """The same for coroutines: calls made in one turn of the loop while another is on the
    wire would go in one batch. Seen failing with them coalesced: the other master's
    enqueue failed with the hung one's (the batch's write did not end)."""
    hung = hung_master
    await hung.job(n=0).aenqueue()
    await hung.other(n=0).aenqueue()
    hung.stop()
    first = asyncio.ensure_future(hung.other(n=1).aenqueue())  # on the wire first
    await asyncio.sleep(0)
    stuck = asyncio.ensure_future(hung.job(n=2).aenqueue())
    other = asyncio.ensure_future(hung.other(n=3).aenqueue())
    try:
        assert (await other).queue == hung.other.queue
        assert (await first).queue == hung.other.queue
        assert hung.sent.is_set() and not stuck.done()  # the hung master's call is still out
    finally:
        hung.resume()
        await asyncio.wait([stuck], timeout=30)
    assert stuck.done()


gate = asyncio.Event()  # GatedJob's perform ends once it is set


class GatedJob(culex.QueuedJob):
    queue = QUEUES[0]

    async def perform(self) -> None:
        await gate.wait()


async def test_a_runner_serves_the_other_masters_queues_while_a_shard_is_down(
    private_cluster: Cluster, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A shard down (its master and its replica killed: no failover) holds up only its own
    queues: the runner's report of a task of it cannot be sent, and tasks of another
    master's queue are still claimed and run (the claims of one server stop until the
    reports land; those of a cluster's other nodes go on). The shard's queue is tried
    again at least every NODE_OUT_OF_REACH[1] however long it is down. The outage is told
    in one line when it begins and one when it ends, each failed try at DEBUG. Seen
    failing with every claim held for the report (the other task never ran), with the
    pause of SERVER_ERROR (1.6 s after 6 failures), and with a warning for each try (a
    dozen lines a second, each naming every node)."""
    monkeypatch.setenv("CULEX_REDIS_URL", private_cluster.url)
    config.reset()
    master = master_of_queue(private_cluster, GatedJob.queue)
    (replica,) = private_cluster.replicas_of(master)
    other = next(j for j in ECHO_JOBS if master_of_queue(private_cluster, j.queue) != master)
    gate.clear()
    try:
        gated = await GatedJob().aenqueue()
        caplog.set_level(logging.WARNING, logger="culex")
        async with running(runner((GatedJob.queue, other.queue))) as r:
            await await_until(lambda: gated.state() is culex.TaskState.PENDING, what="a start")
            await await_until(lambda: inspection.runners() != [], what="the runner's beat")
            private_cluster.kill(master)
            private_cluster.kill(replica)
            gate.set()  # its report goes to a shard that is down: it cannot land
            await await_until(lambda: r._outbox.outcomes != [], what="the report held back")
            assert await (await other(n=7).aenqueue()).aresult(timeout=20) == 7
            claimer = r._claimer
            assert claimer is not None

            def tried_often() -> bool:
                _, backoff = claimer.skips.unhealthy.get(GatedJob.queue, (0.0, Backoff(0, 0)))
                return backoff.failures >= 6

            await await_until(tried_often, timeout=30, what="six tries of the shard's queue")
            until, _ = claimer.skips.unhealthy[GatedJob.queue]
            assert until - time.monotonic() <= NODE_OUT_OF_REACH[1]
            for node in (master, replica):  # (back, so the report lands and the runner stops)
                node.start()
            private_cluster.wait_settled(60)
            assert await gated.aresult(timeout=30) is None
            await await_until(lambda: "the server answers again" in caplog.text, what="the end")
    finally:
        gate.set()
        monkeypatch.undo()
        config.reset()
    said = [r.getMessage() for r in caplog.records if r.name == "culex"]
    began = [m for m in said if "a failover, or a restart, may be under way" in m]
    assert len(began) == 1 and len([m for m in said if "the server answers again" in m]) == 1
    storm = ("is unhealthy", "reporting outcomes failed", "reclaiming expired leases failed")
    # (the first line names what failed first: the report, a claim or a reclaim)
    assert not [m for m in said if any(s in m for s in storm) and m not in began], said


@pytest.mark.parametrize("kind", ["redis-py sync", "redis-py async"])
async def test_a_node_that_closed_the_idle_connections_is_sent_to_again(
    kind: str, on_cluster: Cluster
) -> None:
    """A node that closed the driver's idle connections (restarted, or CLIENT KILL here)
    gets the next call on a new one: the call runs. Seen failing on the asyncio driver
    without the check of a node's idle connection: ServerUnavailable "Connection closed
    by server", a batch lost after its write, never sent again."""
    task = ECHO_JOBS[0](n=1).enqueue()
    master = master_of_queue(on_cluster, task.queue)
    call = commands.read_task(queue_keys("culex", task.queue), task.id)
    params = '{"n":1}'
    driver = (RedisPySyncDriver if kind == "redis-py sync" else RedisPyAsyncDriver)(on_cluster.url)
    try:
        assert (await _done(driver.run(call)))["params"] == params  # (a connection kept idle)
        master.client().execute_command("CLIENT", "KILL", "TYPE", "normal")  # (not itself)
        if isinstance(driver, RedisPyAsyncDriver):  # (until the loop has seen them closed)
            node = driver._client.client.get_node(host="127.0.0.1", port=master.port)
            await await_until(
                lambda: all(conn._parser._stream.at_eof() for conn in node._free),
                what="the idle connections seen closed",
            )
        assert (await _done(driver.run(call)))["params"] == params
    finally:
        await _done(driver.close())


async def _done(outcome: Any) -> Any:
    return await outcome if asyncio.iscoroutine(outcome) else outcome


@pytest.mark.parametrize("kind", ["redis-py sync", "redis-py async"])
async def test_a_batch_keeps_the_replies_of_the_masters_whose_connection_held(
    kind: str, private_cluster: Cluster
) -> None:
    """A batch over two masters, one of which stops answering once the batch is written:
    its calls get ServerUnavailable (they may have run: never sent again), the other
    master's reply is kept, so a runner sends again only what may not have run. Seen
    failing without it: the whole batch raised, and a report that had landed on the other
    master was sent again (then refused, as its attempt had ended)."""
    hung = master_of_queue(private_cluster, QUEUES[0])
    other = next(q for q in QUEUES if master_of_queue(private_cluster, q) != hung)
    keys = (f"{{{QUEUES[0]}}}:n", f"{{{other}}}:n")
    make = RedisPySyncDriver if kind == "redis-py sync" else RedisPyAsyncDriver
    driver = make(private_cluster.url, socket_timeout=0.3)  # (a short stop: no failover)
    assert hung.process is not None
    try:
        await _done(driver.run_many([commands.server_time()]))  # (the slot map read)
        hung.process.send_signal(signal.SIGSTOP)
        try:
            lost, counted = await _done(driver.run_many([_incr(keys[0]), _incr(keys[1])]))
        finally:
            hung.process.send_signal(signal.SIGCONT)
        assert isinstance(lost, culex.ServerUnavailable) and "did not answer" in str(lost)
        assert counted == 1
        assert master_of_queue(private_cluster, other).client().get(keys[1]) == "1"
    finally:
        await _done(driver.close())


def _incr(key: str) -> Call[int]:
    return Call((), ("INCR", key), int)
