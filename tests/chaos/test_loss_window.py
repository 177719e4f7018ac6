"""The loss window: how many acknowledged enqueues die with a master that is SIGKILLed under a
steady enqueue load, behind sentinels and in a cluster, with durable_enqueue off and on.

Replication is asynchronous: a master acknowledges a write before its replica has it, so
a failover may promote a replica that lacks it. A durable enqueue (WAIT 1) returns only
once the replica has it. Each try starts a topology of its own (cheaper than waiting for
a killed master to rejoin), loads it from several threads, kills the master that serves
the queue, waits for the failover and looks for every acknowledged task on the new master.

Only lost == 0 with durable_enqueue is asserted; the figure without it is printed and kept
(it may be 0 by luck: on one machine the replica is a few microseconds behind). The long
form makes more tries of each: ``CULEX_CHAOS_LONG=1 pytest tests/chaos -m long -s -k loss``.
"""

from __future__ import annotations

import signal
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

import culex
from culex import config
from culex.jobs import durability

from ..conftest import wait_until
from ..topology import Cluster, Node, SentinelSetup, Topology
from .workload import publish

QUEUE = "loss_window"
TASK_KEY = "culex:{" + QUEUE + "}:task:"
THREADS = 4
ACKED_BEFORE_KILL = 1500  # enqueues acknowledged before the kill, per try


class LossJob(culex.QueuedJob):
    queue = QUEUE
    n: int

    def perform(self) -> None:  # never run: these tests only enqueue
        raise AssertionError("not run here")


@dataclass
class Try:
    """One kill under load: what was acknowledged, what the new master has."""

    acked: int = 0
    acked_before_kill: int = 0
    lost: list[str] = field(default_factory=list)
    errors: int = 0
    failover_s: float = 0.0


class Load:
    """Threads that enqueue one task at a time, each until it is stopped or an enqueue
    fails; the ids acknowledged, in order, and when."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.acked: list[str] = []
        self.errors = 0
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [
            threading.Thread(target=self._enqueue, args=(n,), daemon=True) for n in range(THREADS)
        ]

    def __enter__(self) -> Load:
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _enqueue(self, thread: int) -> None:
        n = 0
        while not self._stop.is_set():
            task_id = f"{self.name}-{thread}-{n}"
            try:
                LossJob(n=n).enqueue(id=task_id)
            except culex.CulexError:
                with self._lock:
                    self.errors += 1
                return
            with self._lock:
                self.acked.append(task_id)
            n += 1

    def count(self) -> int:
        with self._lock:
            return len(self.acked)

    def halt(self) -> None:
        """Ask the threads to stop after the enqueue each is sending."""
        self._stop.set()

    def stop(self) -> None:
        self.halt()
        for thread in self._threads:
            thread.join(timeout=30)
        assert not any(t.is_alive() for t in self._threads), "an enqueue thread hung"


def missing(master: Node, ids: list[str]) -> list[str]:
    """The ids whose task hash ``master`` does not have."""
    pipe = master.client().pipeline(transaction=False)
    for task_id in ids:
        pipe.exists(TASK_KEY + task_id)
    return [task_id for task_id, found in zip(ids, pipe.execute(), strict=True) if not found]


def point_at(monkeypatch: pytest.MonkeyPatch, url: str, durable: bool) -> None:
    """This process's culex settings: ``url`` (in the environment, which beats configure()
    and holds the test session's server), ``durable_enqueue``."""
    monkeypatch.setenv("CULEX_REDIS_URL", url)
    config.reset()
    culex.configure(durable_enqueue=durable)


def kill_under_load(
    topology: Topology, url: str, durable: bool, name: str, monkeypatch: pytest.MonkeyPatch
) -> Try:
    """Load ``topology`` (started), SIGKILL the master of the queue, wait for the failover."""
    point_at(monkeypatch, url, durable)
    outcome = Try()
    try:
        with Load(name) as load:
            wait_until(
                lambda: load.count() >= ACKED_BEFORE_KILL,
                timeout=60,
                what=f"{ACKED_BEFORE_KILL} acknowledged enqueues",
            )
            outcome.acked_before_kill = load.count()
            began = time.monotonic()
            if isinstance(topology, Cluster):
                old = topology.master_of_key(TASK_KEY)
                topology.kill(old)
                load.halt()
                new = topology.wait_failover(old)
            else:
                assert isinstance(topology, SentinelSetup)
                old = topology.kill_master()
                load.halt()
                new = topology.wait_failover(old)
            outcome.failover_s = round(time.monotonic() - began, 3)
            load.stop()
        outcome.acked = len(load.acked)
        outcome.errors = load.errors
        outcome.lost = missing(new, load.acked)
    finally:
        config.reset()
    return outcome


def started(kind: str, folder: Path) -> tuple[Topology, str]:
    if kind == "cluster":
        cluster = Cluster(folder).__enter__()
        return cluster, cluster.url
    setup = SentinelSetup(folder).__enter__()
    return setup, setup.url


def report(kind: str, durable: bool, tries: list[Try]) -> None:
    mode = "durable" if durable else "not-durable"
    figures: dict[str, Any] = {
        "topology": kind,
        "durable_enqueue": durable,
        "tries": len(tries),
        "enqueue_threads": THREADS,
        "acknowledged": sum(t.acked for t in tries),
        "lost": sum(len(t.lost) for t in tries),
        "lost_per_try": [len(t.lost) for t in tries],
        "tries_with_a_loss": sum(1 for t in tries if t.lost),
        "failover_s": [t.failover_s for t in tries],
        "enqueue_errors": sum(t.errors for t in tries),
    }
    publish(f"loss-window-{kind}-{mode}" + ("-long" if len(tries) > 1 else ""), figures)


def measure(
    kind: str, durable: bool, folder: Path, tries: int, monkeypatch: pytest.MonkeyPatch
) -> list[Try]:
    done: list[Try] = []
    for n in range(tries):
        topology, url = started(kind, folder / f"try-{n}")
        try:
            name = f"{kind}-{durable}-{n}"
            done.append(kill_under_load(topology, url, durable, name, monkeypatch))
        finally:
            topology.stop()
    report(kind, durable, done)
    for one in done:
        assert one.acked >= ACKED_BEFORE_KILL and one.acked_before_kill >= ACKED_BEFORE_KILL
        if durable:
            assert not one.lost, f"acknowledged durable enqueues lost: {one.lost[:10]}"
    return done


@pytest.mark.timeout(120)
@pytest.mark.parametrize("durable", [False, True], ids=["not-durable", "durable"])
@pytest.mark.parametrize("kind", ["sentinel", "cluster"])
def test_the_loss_window_of_a_master_killed_under_load(
    kind: str, durable: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    measure(kind, durable, tmp_path, 1, monkeypatch)


@pytest.mark.long
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("durable", [False, True], ids=["not-durable", "durable"])
@pytest.mark.parametrize("kind", ["sentinel", "cluster"])
def test_the_loss_window_of_a_master_killed_under_load_long(
    kind: str, durable: bool, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    measure(kind, durable, tmp_path, 10, monkeypatch)


def on_replica(replica: Node, key: str) -> bool:
    """Whether a cluster replica has ``key`` (READONLY: it answers instead of sending MOVED)."""
    pipe = replica.client().pipeline(transaction=False)
    pipe.execute_command("READONLY")
    pipe.exists(key)
    return bool(pipe.execute()[1])


@pytest.fixture(params=["url", "plain_url"])
def durable_cluster(
    private_cluster: Cluster, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    """durable_enqueue on a private cluster, through its redis+cluster:// URL or through the
    redis:// URL of one node (a cluster culex finds out about)."""
    monkeypatch.setattr(durability, "DURABLE_TIMEOUT_MS", 300)
    point_at(monkeypatch, getattr(private_cluster, request.param), durable=True)
    try:
        yield private_cluster
    finally:
        config.reset()


def test_a_durable_enqueue_on_a_cluster_is_confirmed_only_by_the_replica(
    durable_cluster: Cluster,
) -> None:
    """The nodes have appendonly on and WAITAOF: a durable enqueue that only waited for
    the master's fsync would return while the replica a failover promotes lacks the task."""
    master = durable_cluster.master_of_key(TASK_KEY)
    (replica,) = durable_cluster.replicas_of(master)
    assert replica.process is not None
    LossJob(n=1).enqueue(id="confirmed")
    assert on_replica(replica, TASK_KEY + "confirmed")
    replica.process.send_signal(signal.SIGSTOP)  # it takes no more of the stream
    try:
        with pytest.raises(culex.ServerError, match="no replica confirmed the write"):
            LossJob(n=2).enqueue(id="unconfirmed")
    finally:
        replica.process.send_signal(signal.SIGCONT)
    assert master.client().exists(TASK_KEY + "unconfirmed")  # stored, not confirmed
    LossJob(n=2).enqueue(id="unconfirmed")  # sent again with its id: confirmed now
    assert on_replica(replica, TASK_KEY + "unconfirmed")
