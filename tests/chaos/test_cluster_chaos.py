"""Chaos on a Redis Cluster (3 masters, 3 replicas), with three queues on three masters.

1. A SIGKILL storm of runner processes, as test_sigkill_storm.py but shorter: nothing
   acknowledged is lost, every task a killed runner held runs again, and the runners' logs
   show no CROSSSLOT.
2. A master killed under load (a cluster of the test's own): producers keep enqueuing with
   ``durable_enqueue=True`` (an enqueue that raised is sent again with the same task id, as a
   user would), runners keep running; its replica takes over, and the killed node comes
   back as a replica. Every acknowledged enqueue ends done (lost = 0), every runner runs
   tasks of that shard again after the failover, and a task runs twice only where the
   history explains it. The figures (failover, recovery, duplicates) are printed.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable, Iterator

import pytest
from redis.cluster import ClusterNode, RedisCluster

from culex import config
from culex._redis.keys import queue_keys

from ..conftest import wait_until
from ..topology import Cluster, Node
from .chaos_jobs import ChaosJob, OtherChaosJob, ThirdChaosJob
from .fleet import Fleet
from .ledger import KILLED, SUCCEEDED, Execution, Ledger, Rerun
from .workload import Producer, drain, publish

JOBS = (ChaosJob, OtherChaosJob, ThirdChaosJob)
QUEUES = tuple(job.queue for job in JOBS)
RUNNERS = 3


@pytest.fixture
def point_at(monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., None]]:
    """Point this process's culex (the producers) at a cluster, through the environment."""

    def point(cluster: Cluster, **settings: str) -> None:
        monkeypatch.setenv("CULEX_REDIS_URL", cluster.url)
        for name, value in settings.items():
            monkeypatch.setenv(f"CULEX_{name.upper()}", value)
        config.reset()

    yield point
    monkeypatch.undo()
    config.reset()


def cluster_client(cluster: Cluster) -> RedisCluster:
    """A client of the cluster's running nodes (bytes replies, as the ledger reads them)."""
    nodes = [ClusterNode("127.0.0.1", node.port) for node in cluster.alive()]
    return RedisCluster(startup_nodes=nodes, protocol=2)


def master_of_queue(cluster: Cluster, queue: str) -> Node:
    return cluster.master_of_key(queue_keys("culex", queue).waiting)


def queue_of(task_id: str) -> str:
    """The queue of a task id made here (``<queue>/<n>``)."""
    return task_id.split("/", 1)[0]


def work(
    prefix: str, rng: random.Random, count: int, jobs: tuple[type[ChaosJob], ...]
) -> list[tuple[str, ChaosJob, str]]:
    """``count`` tasks of 10-100 ms, taking ``jobs`` in turn."""
    made = []
    for n in range(count):
        job = jobs[n % len(jobs)]
        made.append((f"{job.queue}/{prefix}-{n:05d}", job(ms=rng.randint(10, 100)), SUCCEEDED))
    return made


# -- 1. a SIGKILL storm -------------------------------------------------------------------

STORM_LEASE = 3.0
STORM_TASKS = 1200
STORM_RATE = 100.0  # tasks per second: 12 s of storm


@pytest.mark.timeout(150)
def test_sigkill_storm_on_a_cluster(
    cluster: Cluster,
    point_at: Callable[..., None],
    ledger: Ledger,
    fleets: Callable[..., Fleet],
    rng: random.Random,
) -> None:
    assert len({master_of_queue(cluster, q) for q in QUEUES}) == 3  # one queue per master
    point_at(cluster)
    fleet = fleets(
        cluster.url,
        concurrency=8,
        env={"CULEX_LEASE": str(STORM_LEASE), "CULEX_MAX_STALLS": "20"},  # (as the storm's)
        log_level="WARNING",
    )
    for _ in range(RUNNERS):
        fleet.start()
    producer = Producer(ledger, work("storm", rng, STORM_TASKS, JOBS), STORM_RATE)
    began = time.monotonic()
    producer.start()
    kills = 0
    client = cluster_client(cluster)
    try:
        next_kill = time.monotonic() + rng.uniform(1, 2)
        while producer.is_alive():
            time.sleep(0.02)
            fleet.replace_dead()
            if time.monotonic() >= next_kill:
                fleet.kill(rng.choice(fleet.alive))
                fleet.start()
                kills += 1
                next_kill = time.monotonic() + rng.uniform(1, 2)
        storm_s = time.monotonic() - began
        drain_s = drain(client, ledger, timeout=90, tick=fleet.replace_dead)
        verdict = ledger.check(client)
    finally:
        producer.stop()
        client.close()
    killed = [x for x in verdict.reruns if x.cause == KILLED]
    publish(
        "cluster-sigkill-storm",
        {
            "masters": 3,
            "queues": list(QUEUES),
            "runners": RUNNERS,
            "lease_s": STORM_LEASE,
            "kills": kills,
            "storm_s": round(storm_s, 1),
            "drain_s": round(drain_s, 1),
            **verdict.figures(),
            **producer.figures(),
        },
    )
    assert not producer.unclear and not producer.gave_up, (producer.unclear, producer.gave_up)
    assert verdict.ok, verdict.problems()
    assert verdict.acknowledged == STORM_TASKS
    assert not [f for f in verdict.faults if f.kind != "kill"], fleet.logs()[-3000:]
    assert kills >= 5 and killed, "the storm killed no task in flight: nothing was tested"
    assert {queue_of(e.id) for e in verdict.executions} == set(QUEUES)
    assert "CROSSSLOT" not in fleet.logs()


# -- 2. a master killed under load ---------------------------------------------------------

FAILOVER_LEASE = 5.0
RATE_PER_QUEUE = 30.0  # tasks per second into each queue
PER_QUEUE = 480  # 16 s of enqueues
KILL_AFTER = 4.0  # seconds into the load when the master is killed
FAILOVER = "failover"  # a rerun explained by the failover (see explained_by_failover)


def explained_by_failover(rerun: Rerun, victim_queue: str, failed_over_at: float) -> str | None:
    """A task of the killed master's queue whose earlier run began before its replica took
    over: a claim or a report the old master acknowledged and had not yet replicated is
    gone with it (asynchronous replication), so the task runs again. That is the loss
    window of a failover, for the runners' own writes."""
    ours = queue_of(rerun.id) == victim_queue and rerun.before.start < failed_over_at
    return FAILOVER if rerun.cause is None and ours else rerun.cause


def done_twice(executions: list[Execution]) -> list[str]:
    """Ids with more than one execution that ran to completion."""
    ok: dict[str, int] = {}
    for e in executions:
        if e.outcome == "ok":
            ok[e.id] = ok.get(e.id, 0) + 1
    return sorted(i for i, n in ok.items() if n > 1)


def recoveries(ledger: Ledger, fleet: Fleet, queue: str, since: float) -> dict[int, float | None]:
    """Per runner: seconds from ``since`` to its first run of a task of ``queue``."""
    found: dict[int, float | None] = {}
    for runner in fleet.runners:
        starts = [e.start for e in ledger.executions(runner.pid) if queue_of(e.id) == queue]
        after = [t for t in starts if t >= since]
        found[runner.pid] = round(min(after) - since, 3) if after else None
    return found


@pytest.mark.timeout(180)
def test_a_master_killed_under_load(
    private_cluster: Cluster,
    point_at: Callable[..., None],
    ledger: Ledger,
    fleets: Callable[..., Fleet],
    rng: random.Random,
) -> None:
    cluster = private_cluster
    point_at(cluster, durable_enqueue="1")
    victim_queue = rng.choice(QUEUES)
    victim = master_of_queue(cluster, victim_queue)
    fleet = fleets(
        cluster.url, concurrency=8, env={"CULEX_LEASE": str(FAILOVER_LEASE)}, log_level="WARNING"
    )
    for _ in range(RUNNERS):
        fleet.start()
    producers = [  # one per queue: the healthy shards' enqueues never wait on the victim's
        Producer(ledger, work("fo", rng, PER_QUEUE, (job,)), RATE_PER_QUEUE) for job in JOBS
    ]
    began = time.monotonic()
    for producer in producers:
        producer.start()
    client: RedisCluster | None = None
    try:

        def busy() -> bool:  # every runner has run tasks of the victim's queue
            return all(
                any(queue_of(e.id) == victim_queue for e in ledger.executions(runner.pid))
                for runner in fleet.runners
            )

        wait_until(busy, timeout=30, what="every runner to run tasks of the victim's queue")
        time.sleep(max(0.0, began + KILL_AFTER - time.monotonic()))  # a steady load first
        killed_at = time.time()
        cluster.kill(victim)
        new_master = cluster.wait_failover(victim, timeout=60)
        failed_over_at = time.time()
        # The killed node comes back as its replica: durable enqueues there need one.
        cluster.restart(victim, timeout=60)
        restored_at = time.time()
        assert victim.role() == "slave" and new_master.role() == "master"
        while any(p.is_alive() for p in producers):
            time.sleep(0.05)
            fleet.replace_dead()
        client = cluster_client(cluster)
        drain_s = drain(client, ledger, timeout=60, tick=fleet.replace_dead)
        verdict = ledger.check(client)
    finally:
        for producer in producers:
            producer.stop()
        if client is not None:
            client.close()
    causes = [explained_by_failover(x, victim_queue, failed_over_at) for x in verdict.reruns]
    unexplained = [x for x, cause in zip(verdict.reruns, causes, strict=True) if cause is None]
    by_failover = [x for x, cause in zip(verdict.reruns, causes, strict=True) if cause == FAILOVER]
    failover_ids = {x.id for x in by_failover}
    back = recoveries(ledger, fleet, victim_queue, failed_over_at)
    failing_over_s = failed_over_at - killed_at

    def healthy_rate(since: float, until: float) -> float:
        """Runs per second of the other two queues' tasks that began in [since, until)."""
        runs = [e for e in verdict.executions if queue_of(e.id) != victim_queue]
        return round(sum(since <= e.start < until for e in runs) / (until - since), 1)

    publish(
        "cluster-master-killed",
        {
            "masters": 3,
            "runners": RUNNERS,
            "lease_s": FAILOVER_LEASE,
            "victim_queue": victim_queue,
            "failover_s": round(failing_over_s, 3),
            "killed_node_back_as_replica_s": round(restored_at - failed_over_at, 3),
            "runner_first_victim_task_after_failover_s": back,
            # the two other shards' tasks run per second: before the kill, while failing over
            "healthy_shards_runs_per_s_before": healthy_rate(killed_at - failing_over_s, killed_at),
            "healthy_shards_runs_per_s_failing_over": healthy_rate(killed_at, failed_over_at),
            "drain_s": round(drain_s, 1),
            **verdict.figures(),
            "reruns_by_failover": len(by_failover),
            "tasks_done_twice": done_twice(verdict.executions),
            "enqueue_errors_retried": sum(p.errors for p in producers),
            "enqueue_longest_stall_s": max(round(p.longest_stall, 3) for p in producers),
        },
    )
    for producer in producers:
        assert not producer.unclear and not producer.gave_up, (producer.unclear, producer.gave_up)
    assert verdict.acknowledged == 3 * PER_QUEUE
    assert not verdict.lost, verdict.problems()  # every durable enqueue survived
    assert not (verdict.unexpected or verdict.stuck), verdict.problems()
    assert not unexplained, verdict.problems()
    # fencing: an attempt number runs twice, or a result is not from the last attempt, only
    # where the failover took the old master's unreplicated writes with it
    assert {i for i, _ in verdict.reused_attempts} <= failover_ids, verdict.problems()
    assert set(verdict.wrong_result) <= failover_ids, verdict.problems()
    assert not [f for f in verdict.faults], fleet.logs()[-3000:]  # no runner died
    # every runner ran tasks of the failed-over shard again
    assert all(seconds is not None for seconds in back.values()), back
    assert "CROSSSLOT" not in fleet.logs()
