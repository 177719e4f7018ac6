"""Scenario: workflow runs while runners are SIGKILLed, and a producer killed while it
stores a large run. Every run ends, and ends as its nodes' failures and policies say.

Runs (diamonds, chains of 5, fan-ins of 50) are enqueued at a steady rate on three runner
processes (``culex run``); every 1-2 s a random runner is killed and another started. Some
nodes always fail (dead at once), some fail once and then succeed. Runners also kill
themselves in the windows a kill from outside rarely hits (workflow_jobs: a node's first
success a few ms after it returns; a drain of the outbox, or a pass finishing an
unfinished operation, with what it took). Meanwhile a producer process enqueuing a run
of BIG_NODES nodes is killed as it stores the nodes (the long version also kills one
just after its commit): its run must be discarded whole (no node ran) or, if the kill
came after its commit, run whole.

Then, with the defaults (the outbox lease of 30 s, the staging deadline of 60 s, a
runner's pass every 2 s), the test waits until every run has ended and the releasers have
nothing left, and checks the end against the ledger (executions recorded outside Redis).
"""

from __future__ import annotations

import json
import os
import random
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import redis

import culex
from culex._redis.keys import queue_keys, run_keys

from . import fleet as fleet_module
from . import workflow_jobs
from .fleet import Fleet
from .ledger import DIED, KILLED, SUCCEEDED, Ledger, key_bytes, text
from .workflow_plan import (
    NodeSpec,
    PlannedRun,
    leftovers,
    node_problems,
    ordering_problems,
    plan,
    release_figures,
    run_end_figures,
    run_states,
)
from .workload import publish

# The test process only enqueues these jobs (as conftest does for chaos_jobs').
for _job in workflow_jobs.JOBS:
    culex.registry.remove(_job)

JOBS_FILE = Path(workflow_jobs.__file__).resolve()
RUNNERS = 3
BIG_NODES = 5_000
ENV = {
    "CULEX_LEASE": "3",  # as the SIGKILL storm (the tasks' lease; the outbox's is 30 s)
    "CULEX_MAX_STALLS": "20",
    workflow_jobs.DRAIN_KILL_ENV: "0.005",
    workflow_jobs.FINISH_KILL_ENV: "0.5",
}
SETTLE_TIMEOUT = 300.0  # the staging deadline (60 s) and outbox leases (30 s) pass in it


class RunProducer(threading.Thread):
    """Enqueues the planned runs at ``rate`` a second; the ledger learns each node first."""

    def __init__(self, ledger: Ledger, runs: list[PlannedRun], rate: float) -> None:
        super().__init__(name="chaos-workflow-producer", daemon=True)
        self.ledger, self.runs, self.rate = ledger, runs, rate
        self.errors: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        began = time.monotonic()
        for n, planned in enumerate(self.runs):
            if self._halt.wait(max(0.0, began + n / self.rate - time.monotonic())):
                return
            wf = planned.build()
            ends = planned.expected()
            for name, task in planned.tasks.items():
                self.ledger.sending(task.id, task.queue, ends[name][0])
            try:
                planned.run_id = wf.enqueue().id
            except Exception as exc:  # (the server is never touched: none is expected)
                self.errors.append(f"{planned.label}: {type(exc).__name__}: {exc}")
                continue
            for task in planned.tasks.values():
                self.ledger.acknowledged(task.id)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)


@dataclass
class BigProducer:
    """A producer process enqueuing a run of BIG_NODES nodes, killed part-way."""

    ids_file: Path
    proc: subprocess.Popen[bytes] | None = None
    stored_at_kill: int = 0
    released_at_kill: int = 0  # (the producer's own start of the first nodes)
    exited_by_itself: bool = False
    nodes: list[list[Any]] = field(default_factory=list)  # [queue, id, name, [after]]

    def start(self, url: str) -> None:
        env = {**os.environ, "CULEX_REDIS_URL": url}
        command = [sys.executable, str(JOBS_FILE), "big", str(self.ids_file), str(BIG_NODES)]
        log = self.ids_file.with_suffix(".log")
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(command, env=env, stdout=out, stderr=out)

    def kill_while_storing(self, r: redis.Redis, point: str) -> None:
        """Kill it as soon as its first node is stored ("stored": adds precede the stores,
        so it dies storing), or its record says "running" ("committed": it dies starting
        the first nodes, or after)."""
        assert self.proc is not None
        deadline = time.monotonic() + 60
        while not self.nodes and time.monotonic() < deadline:
            try:
                self.nodes = json.loads(self.ids_file.read_text())
            except (OSError, ValueError):
                time.sleep(0.005)
        first = self.key(self.nodes[0])
        while not r.exists(first) and self.proc.poll() is None:
            assert time.monotonic() < deadline, "the big producer stored nothing in 60 s"
        if point == "committed":
            record = run_keys("culex", text(r.hget(first, "run") or b"")).record
            while r.hget(record, "state") != b"running" and self.proc.poll() is None:
                assert time.monotonic() < deadline, "the big run was not committed in 60 s"
        self.exited_by_itself = self.proc.poll() is not None
        self.proc.kill()
        self.proc.wait()
        pipe = r.pipeline(transaction=False)
        for node in self.nodes:
            pipe.hget(self.key(node), "state")
        states = pipe.execute()
        self.stored_at_kill = sum(s is not None for s in states)
        self.released_at_kill = sum(s not in (None, b"blocked") for s in states)

    def run_id(self, r: redis.Redis) -> str:
        """Its run's id: the record whose nodes include its first node ("" for none)."""
        if not self.nodes:
            return ""
        for key in r.scan_iter(match="culex:{run:*}:record", count=1000):
            keys = run_keys("culex", text(key)[len("culex:{run:") : -len("}:record")])
            if r.hexists(keys.nodes, self.nodes[0][1]):
                return keys.id
        return ""

    @staticmethod
    def key(node: list[Any]) -> bytes:
        return key_bytes(queue_keys("culex", node[0]).task(node[1]))

    def planned(self, run_id: str) -> PlannedRun:
        """The run as planned (for the checks), once it is known to have been committed."""
        specs = {n[2]: NodeSpec(n[2], tuple(n[3]), "dead", "never", False, 0) for n in self.nodes}
        tasks = {n[2]: culex.Task(n[1], n[0]) for n in self.nodes}
        return PlannedRun("big", "big", specs, tasks, run_id)


def killers(ledger: Ledger) -> dict[int, str]:
    """The runners that killed themselves: pid -> how (a node's first success, a drain of
    the outbox, the finishing of an unfinished operation, and the step)."""
    pids = {}
    for path in ledger.exec_dir.glob("exec-*.jsonl"):
        for line in path.read_bytes().splitlines():
            if b'"kill"' in line:
                pids[json.loads(line)["pid"]] = "node"
    for path in ledger.exec_dir.glob("kills-*.jsonl"):
        for line in path.read_bytes().splitlines():
            event = json.loads(line)
            pids[event["pid"]] = f"{event['what']} step {event['step']}"
    return pids


def _storm(
    r: redis.Redis,
    url: str,
    fleet: Fleet,
    producer: RunProducer,
    bigs: list[BigProducer],
    big_kills: list[str],
    rng: random.Random,
    duration: float,
) -> tuple[float, int]:
    """Kill a random runner every 1-2 s (and start another) while the runs are enqueued,
    and the big producers at random times; the value: the seconds it took, the kills."""
    began = time.monotonic()
    big_at = sorted(rng.uniform(0.2, 0.8) * duration for _ in bigs)
    kills = 0
    next_kill = began + rng.uniform(1, 2)
    storm_end = None
    while storm_end is None or time.monotonic() < storm_end:
        time.sleep(0.02)
        fleet.replace_dead()
        now = time.monotonic()
        started = sum(b.proc is not None for b in bigs)
        if started < len(bigs) and now - began >= big_at[started]:
            bigs[started].start(url)
            bigs[started].kill_while_storing(r, big_kills[started])
            fleet.replace_dead()  # (runners kill themselves meanwhile)
        if now >= next_kill and fleet.alive:
            fleet.kill(rng.choice(fleet.alive))
            fleet.start()
            kills += 1
            next_kill = now + rng.uniform(1, 2)
        if storm_end is None and not producer.is_alive() and all(b.proc for b in bigs):
            storm_end = now + 5  # (the last runs are hit too)
    return time.monotonic() - began, kills


def scenario(
    r: redis.Redis,
    url: str,
    ledger: Ledger,
    fleets: Callable[..., Fleet],
    rng: random.Random,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    *,
    runs: int,
    rate: float,
    big_kills: list[str],
    name: str,
) -> None:
    monkeypatch.setattr(fleet_module, "JOBS_FILE", JOBS_FILE)  # runners serve our jobs
    fleet = fleets(url, concurrency=8, env=ENV, log_level="WARNING")
    for _ in range(RUNNERS):
        fleet.start()
    planned = [plan(rng, f"r{n:05d}") for n in range(runs)]
    producer = RunProducer(ledger, planned, rate)
    bigs = [BigProducer(tmp_path / f"big-{n}.json") for n in range(len(big_kills))]
    producer.start()
    try:
        storm_s, kills = _storm(r, url, fleet, producer, bigs, big_kills, rng, runs / rate)
    finally:
        producer.stop()  # (its ledger is closed after the test)
    # Wait, with the defaults, until every run ended and the releasers have nothing left.
    ids = [p.run_id for p in planned if p.run_id]
    big_ids = [i for i in (big.run_id(r) for big in bigs) if i]  # (their producers are dead)
    settle_began = time.monotonic()
    while time.monotonic() - settle_began < SETTLE_TIMEOUT:
        fleet.replace_dead()
        ended = all(s in ("succeeded", "failed") for s in run_states(r, ids))
        big_ended = all(s != "running" and s != "staging" for s in run_states(r, big_ids))
        if ended and big_ended and not any(leftovers(r).values()):
            break
        time.sleep(0.5)
    settle_s = time.monotonic() - settle_began

    # The big runs: discarded whole, or run whole.
    outcomes, checked = [], list(planned)
    for big, kill in zip(bigs, big_kills, strict=True):
        run_id = big.run_id(r)
        state = run_states(r, [run_id])[0] if run_id else "no record"
        outcomes.append(
            {
                "kill": kill,
                "state": state,
                "stored_at_kill": big.stored_at_kill,
                "released_at_kill": big.released_at_kill,
            }
        )
        if state == "succeeded":
            for node in big.nodes:
                ledger.sending(node[1], node[0], SUCCEEDED)
                ledger.acknowledged(node[1])
            checked.append(big.planned(run_id))
        else:
            pipe = r.pipeline(transaction=False)
            for node in big.nodes:
                pipe.exists(big.key(node))
            left = sum(pipe.execute())
            assert state in ("discarded", "no record") and not left, (state, left)
            assert not big.exited_by_itself, "the big producer ended before its kill"

    verdict = ledger.check(r)
    executions = verdict.executions
    states = run_states(r, ids)
    wrong_runs = [
        (p.label, s, p.expected_state())
        for p, s in zip(planned, states, strict=True)
        if s != p.expected_state()
    ]
    order = ordering_problems(checked, executions)
    ran_wrongly = node_problems(checked, executions)
    left = leftovers(r)
    killed = [x for x in verdict.reruns if x.cause == KILLED]
    self_killed = killers(ledger)
    died = [f for f in verdict.faults if f.kind == DIED and f.pid not in self_killed]
    publish(
        name,
        {
            "runners": RUNNERS,
            "runs": len(planned),
            "runs_enqueued": len(ids),
            "shapes": dict(Counter(p.shape for p in planned)),
            "run_states": dict(Counter(states)),
            "nodes": sum(len(p.nodes) for p in planned),
            "kills": kills,
            "storm_s": round(storm_s, 1),
            "settle_s": round(settle_s, 1),
            "big_runs": outcomes,
            "killed_executions_rerun": len(killed),
            **release_figures(checked, executions),
            **run_end_figures(r, checked, executions),
            "runners_killed_by_themselves": dict(Counter(self_killed.values())),
            **verdict.figures(),
            "leftovers": left,
        },
    )
    assert not producer.errors, producer.errors[:5]
    assert len(ids) == runs
    assert not wrong_runs, wrong_runs[:10]
    assert verdict.ok, verdict.problems()
    assert not ran_wrongly, ran_wrongly[:10]
    assert not order, order[:10]
    assert not any(left.values()), left
    assert not died, f"runners died on their own: {died}\n{fleet.logs()[-3000:]}"
    assert kills >= 5 and killed, "the storm killed no node in flight: nothing was tested"


@pytest.mark.timeout(600)
def test_workflow_chaos(
    r: redis.Redis,
    url: str,
    ledger: Ledger,
    fleets: Callable[..., Fleet],
    rng: random.Random,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scenario(
        r, url, ledger, fleets, rng, tmp_path, monkeypatch,
        runs=100, rate=5.0, big_kills=["stored"], name="workflow-chaos",
    )  # fmt: skip


@pytest.mark.long
@pytest.mark.timeout(3600)
def test_workflow_chaos_long(
    r: redis.Redis,
    url: str,
    ledger: Ledger,
    fleets: Callable[..., Fleet],
    rng: random.Random,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    scenario(
        r, url, ledger, fleets, rng, tmp_path, monkeypatch,
        runs=1_000, rate=5.0, big_kills=["stored", "committed", "stored"],
        name="workflow-chaos-long",
    )  # fmt: skip
