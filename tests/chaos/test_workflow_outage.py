"""Scenario: workflow runs through the server's outages. Runs of mixed shapes (diamonds,
chains of 5, fan-ins of 50; some nodes always fail, some fail once, some are durable
nodes of 5 steps and a sleep) are enqueued at a steady rate on three runner processes,
while the server is SIGKILLed and started again on its append-only file, and made full
(maxmemory under what it holds: every write refused OOM), in turns. No runner is killed.

Then every run ends as its plan says (none left running), every node ran as its plan says
and once (a node that fails once runs twice: its retry), every durable step ran once and
was recorded, no node spent a retry the plan did not give it, and the releasers left
nothing behind. An enqueue the outage refused is made again with new ids; the run it
began is discarded whole (none of its nodes ran) or, if it was committed, runs whole.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
import redis

import culex
from culex._redis.keys import queue_keys, run_keys
from culex.operations.inspection import runners
from culex.server.embedded import EmbeddedServer

from ..conftest import wait_until
from . import fleet as fleet_module
from . import workflow_outage_jobs as jobs
from .fleet import Fleet
from .ledger import RETRY, Ledger, key_bytes, read_tasks, text
from .test_durable_chaos import STALE, SUSPENDED, check_steps, outage_turns, step_runs
from .workflow_jobs import NEVER, QUEUES, WfChaosNode, WfChaosNodeB
from .workflow_plan import (
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

# The test process only enqueues these jobs: the runners are other processes.
for _job in jobs.JOBS:
    culex.registry.remove(_job)

RUNNERS = 3
LEASE = 10.0  # (the durable outage test's: a short outage keeps every lease)
DURABLE_SHARE = 0.15  # of the nodes that never fail
SETTLE_TIMEOUT = 300.0  # a staging run is discarded 60 s after its producer's last step
RELEASE_FAILED = "applying the ends of workflow nodes failed"
ENDED = ("succeeded", "failed")


@dataclass
class OutageRun(PlannedRun):
    """A planned run some of whose nodes are durable."""

    durable: frozenset[str] = frozenset()

    def build(self) -> culex.Workflow:
        """The workflow, with new task ids each time (an enqueue made again)."""
        self.tasks = {}
        wf = culex.Workflow(f"outage-{self.shape}-{self.label}")
        for spec in self.nodes.values():
            durable = spec.name in self.durable
            kind = (
                (jobs.WfDurableNodeB if durable else WfChaosNodeB)
                if spec.other_queue
                else (jobs.WfDurableNode if durable else WfChaosNode)
            )
            job = kind(run_label=self.label, node=spec.name, ms=spec.ms, failing=spec.failing)
            after = [self.tasks[u] for u in spec.after]
            self.tasks[spec.name] = wf.add(
                job, name=spec.name, after=after, if_upstream_fails=spec.policy
            )
        return wf


def outage_plan(rng: random.Random, label: str) -> OutageRun:
    """The workflow chaos test's run, without nodes that kill their runner, and with a
    share of the nodes that never fail made durable."""
    drawn = plan(rng, label)
    for spec in drawn.nodes.values():
        spec.kill_ms = -1
    durable = [n for n, s in drawn.nodes.items() if s.failing == NEVER]
    durable = [n for n in durable if rng.random() < DURABLE_SHARE]
    return OutageRun(drawn.label, drawn.shape, drawn.nodes, durable=frozenset(durable))


class RunProducer(threading.Thread):
    """Enqueues the planned runs at ``rate`` a second; an enqueue that raises a culex error
    is made again (new ids), and the attempt is kept in ``abandoned`` for the check."""

    def __init__(self, ledger: Ledger, runs: list[OutageRun], rate: float) -> None:
        super().__init__(name="outage-workflow-producer", daemon=True)
        self.ledger, self.runs, self.rate = ledger, runs, rate
        self.errors = 0
        self.unclear: list[str] = []
        self.abandoned: list[OutageRun] = []
        self._halt = threading.Event()

    def run(self) -> None:
        began = time.monotonic()
        for n, planned in enumerate(self.runs):
            if self._halt.wait(max(0.0, began + n / self.rate - time.monotonic())):
                return
            while not self._halt.is_set() and not self._enqueued(planned):
                self._halt.wait(0.05)

    def _enqueued(self, planned: OutageRun) -> bool:
        wf = planned.build()
        ends = planned.expected()
        for name, task in planned.tasks.items():
            self.ledger.sending(task.id, task.queue, ends[name][0])
        try:
            planned.run_id = wf.enqueue().id
        except culex.CulexError:
            self.errors += 1
            self.abandoned.append(replace(planned, tasks=dict(planned.tasks)))
            return False
        except Exception as exc:  # enqueue must raise culex errors only
            self.unclear.append(f"{planned.label}: {type(exc).__name__}: {exc}")
            return True
        for task in planned.tasks.values():
            self.ledger.acknowledged(task.id)
        return True

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=30)


def found_run(r: redis.Redis, attempt: OutageRun, known: set[str]) -> str:
    """The id of the run an abandoned enqueue began ("" for none): the record, not among
    ``known``, whose nodes include its first node."""
    first = next(iter(attempt.tasks.values())).id
    for key in r.scan_iter(match="culex:{run:*}:record", count=1000):
        run_id = text(key)[len("culex:{run:") : -len("}:record")]
        if run_id not in known and r.hexists(run_keys("culex", run_id).nodes, first):
            return run_id
    return ""


def retries_spent(hashes: dict[str, dict[str, str]], runs: list[OutageRun]) -> dict[str, str]:
    """Nodes that ran whose retry_count is not the plan's: 0 for a node that never fails,
    1 for one that fails once (its retry) or always (dead at its first failure)."""
    wrong = {}
    for run in runs:
        for name, (_, ran) in run.expected().items():
            task_id = run.tasks[name].id
            planned = "0" if run.nodes[name].failing == NEVER else "1"
            if ran and hashes[task_id].get("retry_count") != planned:
                wrong[f"{run.label}/{name}"] = hashes[task_id].get("retry_count", "missing")
    return wrong


def outages(
    server: EmbeddedServer,
    ledger: Ledger,
    fleets: Callable[..., Fleet],
    rng: random.Random,
    monkeypatch: pytest.MonkeyPatch,
    *,
    runs: int,
    rate: float,
    name: str,
) -> None:
    r = redis.Redis.from_url(server.url)
    monkeypatch.setattr(fleet_module, "JOBS_FILE", Path(jobs.__file__).resolve())
    fleet = fleets(
        server.url,
        concurrency=8,
        queues=list(QUEUES),
        env={"CULEX_LEASE": str(LEASE)},
        log_level="WARNING",
    )
    for _ in range(RUNNERS):
        fleet.start()
    # (a runner that meets an outage as it starts exits: it cannot reach the server)
    wait_until(lambda: len(runners()) == RUNNERS, timeout=60, what="the runners up")
    planned = [outage_plan(rng, f"r{n:05d}") for n in range(runs)]
    producer = RunProducer(ledger, planned, rate)
    began = time.monotonic()
    producer.start()
    try:
        faults = outage_turns(server, r, rng, producer, runs / rate)
        storm_s = time.monotonic() - began
    finally:
        producer.stop()

    # Every run ends, and the runs the refused enqueues began end or are discarded.
    ids = [p.run_id for p in planned]
    known = set(ids)
    begun = [(a, found_run(r, a, known)) for a in producer.abandoned]
    settle_began = time.monotonic()
    runs_ended_s, left_then = None, {}
    while time.monotonic() - settle_began < SETTLE_TIMEOUT:
        fleet.replace_dead()
        states = run_states(r, ids + [i for _, i in begun if i])
        if runs_ended_s is None and all(s in (*ENDED, "discarded") for s in states):
            runs_ended_s = round(time.monotonic() - settle_began, 1)
            left_then = {k: n for k, n in leftovers(r).items() if n}
        if runs_ended_s is not None and not any(leftovers(r).values()):
            break
        time.sleep(0.5)
    settle_s = time.monotonic() - settle_began

    checked = list(planned)
    abandoned: Counter[str] = Counter()
    for attempt, run_id in begun:
        state = run_states(r, [run_id])[0] if run_id else "no record"
        abandoned[state] += 1
        if state in ENDED:  # (committed before the reply was lost: it runs whole)
            attempt.run_id = run_id
            checked.append(attempt)
            for task in attempt.tasks.values():
                ledger.acknowledged(task.id)
        else:
            stored = sum(
                r.exists(key_bytes(queue_keys("culex", t.queue).task(t.id)))
                for t in attempt.tasks.values()
            )
            assert state in ("discarded", "no record") and not stored, (state, stored)

    verdict = ledger.check(r)
    resumed = [x for x in verdict.reruns if x.before.outcome in (SUSPENDED, STALE)]
    verdict = replace(verdict, reruns=[x for x in verdict.reruns if x not in resumed])
    executions = verdict.executions
    wrong_runs = [
        (p.label, s, p.expected_state())
        for p, s in zip(checked, run_states(r, [p.run_id for p in checked]), strict=True)
        if s != p.expected_state()
    ]
    all_ids = {t.id: t.queue for p in checked for t in p.tasks.values()}
    hashes = read_tasks(r, "culex", all_ids)
    durable = {p.tasks[n].id for p in checked for n in p.durable if p.expected()[n][1]}
    steps = check_steps(
        {i: h for i, h in hashes.items() if i in durable}, step_runs(ledger.exec_dir), []
    )
    spent = retries_spent(hashes, checked)
    stalls = sum(int(h.get("stalls", 0)) for h in hashes.values())
    not_retries = [x for x in verdict.reruns if x.cause != RETRY]
    order = ordering_problems(checked, executions)
    ran_wrongly = node_problems(checked, executions)
    left = leftovers(r)
    logs = fleet.logs()
    publish(
        name,
        {
            "runners": RUNNERS,
            "lease_s": LEASE,
            "runs": len(planned),
            "shapes": dict(Counter(p.shape for p in planned)),
            "run_states": dict(Counter(run_states(r, ids))),
            "nodes": sum(len(p.nodes) for p in planned),
            "durable_nodes": sum(len(p.durable) for p in planned),
            "server_killed": faults["killed"],
            "server_full": faults["full"],
            "storm_s": round(storm_s, 1),
            "runs_ended_s": runs_ended_s,  # (after the storm)
            "left_when_the_runs_ended": left_then,
            "settle_s": round(settle_s, 1),
            "enqueues_refused_and_made_again": producer.errors,
            "refused_enqueues_runs": dict(abandoned),
            **release_figures(checked, executions),
            **run_end_figures(r, list[PlannedRun](checked), executions),
            **verdict.figures(),
            "attempts_resumed_after_their_sleep": len(resumed),
            "step_executions": steps.step_executions,
            "steps_recorded": sum(steps.recorded.values()),
            "durable_calls_held": logs.count("waits for the server"),
            "releaser_passes_refused": logs.count(RELEASE_FAILED),
            "nodes_with_a_retry_spent_by_the_outage": len(spent),
            "stalls": stalls,
            "step_problems": len(steps.problems),
            "leftovers": left,
        },
    )
    r.close()
    assert not producer.unclear, producer.unclear[:5]
    assert all(p.run_id for p in planned), "a run was never enqueued"
    assert not wrong_runs, wrong_runs[:10]
    assert verdict.ok, verdict.problems()
    assert not ran_wrongly, ran_wrongly[:10]
    assert not order, order[:10]
    assert not not_retries, not_retries[:5]  # (no body ran twice but a planned retry's)
    assert not steps.problems, "\n".join(steps.problems[:10])
    assert steps.step_executions == jobs.STEPS * len(durable)
    assert not spent, f"nodes that spent a retry: {dict(list(spent.items())[:10])}"
    assert not any(left.values()), left
    assert faults["killed"] >= 2 and faults["full"] >= 1, faults
    assert logs.count(RELEASE_FAILED), "no releaser pass met an outage"
    assert not [p for p in fleet.runners if not p.alive()], logs[-3000:]


@pytest.mark.parametrize(
    ("runs", "name"),
    [
        pytest.param(80, "workflow-server-outages", marks=pytest.mark.timeout(420)),
        pytest.param(
            1_000,
            "workflow-server-outages-long",
            marks=[pytest.mark.long, pytest.mark.timeout(1800)],
            id="long",
        ),
    ],
)
def test_workflows_through_server_outages(
    own_server: EmbeddedServer,
    ledger: Ledger,
    fleets: Callable[..., Fleet],
    rng: random.Random,
    monkeypatch: pytest.MonkeyPatch,
    runs: int,
    name: str,
) -> None:
    outages(own_server, ledger, fleets, rng, monkeypatch, runs=runs, rate=5.0, name=name)
