"""The workflow chaos test's runs: their shapes, what each node must end as, and the
checks of the end against the ledger (what ran, when, outside Redis) and the server.

A node's expected end follows from its upstreams' expected ends and its policy alone: a
"dead"-policy node with an upstream that ends dead ends dead without running; any other
node runs once its upstreams have ended, and ends dead only if it is a failing node
(``always``); a node that fails ``once`` is retried and succeeds.
"""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import culex
from culex._redis.keys import queue_keys, unfinished_key
from culex.workflows.enqueueing import Policy
from culex.workflows.release import LEASE_MS

from .ledger import DEAD, SUCCEEDED, Client, Execution, text
from .workflow_jobs import ALWAYS, NEVER, ONCE, QUEUES, WfChaosNode, WfChaosNodeB

SHAPES = ("diamond", "chain", "fan-in")
FAN_IN = 50
ALWAYS_SHARE = 0.05  # nodes that always fail (dead at once, no retry)
ONCE_SHARE = 0.10  # nodes whose first attempt fails
RUN_POLICY_SHARE = 0.3  # nodes with upstreams that run whatever their upstreams' ends
KILL_SHARE = 0.01  # nodes whose first success kills their runner as it reports or releases


@dataclass
class NodeSpec:
    name: str
    after: tuple[str, ...]
    policy: Policy
    failing: str
    other_queue: bool
    ms: int
    kill_ms: int = -1  # >= 0: its first success kills its runner that many ms later


@dataclass
class PlannedRun:
    label: str
    shape: str
    nodes: dict[str, NodeSpec]  # by name, upstreams first
    tasks: dict[str, culex.Task] = field(default_factory=dict)  # by name, once built
    run_id: str = ""  # once enqueued

    def expected(self) -> dict[str, tuple[str, bool]]:
        """Node name -> (its end, whether it runs)."""
        ends: dict[str, tuple[str, bool]] = {}
        for spec in self.nodes.values():
            if spec.policy == "dead" and any(ends[u][0] == DEAD for u in spec.after):
                ends[spec.name] = (DEAD, False)
            else:
                ends[spec.name] = (DEAD if spec.failing == ALWAYS else SUCCEEDED, True)
        return ends

    def expected_state(self) -> str:
        return "failed" if any(e == DEAD for e, _ in self.expected().values()) else "succeeded"

    def build(self) -> culex.Workflow:
        wf = culex.Workflow(f"chaos-{self.shape}-{self.label}")
        for spec in self.nodes.values():
            job = (WfChaosNodeB if spec.other_queue else WfChaosNode)(
                run_label=self.label,
                node=spec.name,
                ms=spec.ms,
                failing=spec.failing,
                kill_ms=spec.kill_ms,
            )
            after = [self.tasks[u] for u in spec.after]
            self.tasks[spec.name] = wf.add(
                job, name=spec.name, after=after, if_upstream_fails=spec.policy
            )
        return wf


def plan(rng: random.Random, label: str) -> PlannedRun:
    """A diamond (4 nodes), a chain of 5 or a fan-in of FAN_IN into one, with failing
    nodes and policies drawn at random."""
    shape = rng.choices(SHAPES, weights=(4, 4, 2))[0]
    if shape == "diamond":
        edges = {"top": (), "left": ("top",), "right": ("top",), "bottom": ("left", "right")}
    elif shape == "chain":
        edges = {f"c{i}": ((f"c{i - 1}",) if i else ()) for i in range(5)}
    else:
        members = tuple(f"m{i}" for i in range(FAN_IN))
        edges = {**{m: () for m in members}, "merge": members}
    nodes = {}
    for name, after in edges.items():
        draw = rng.random()
        failing = (
            ALWAYS if draw < ALWAYS_SHARE else ONCE if draw < ONCE_SHARE + ALWAYS_SHARE else NEVER
        )
        policy: Policy = "run" if after and rng.random() < RUN_POLICY_SHARE else "dead"
        nodes[name] = NodeSpec(name, after, policy, failing, rng.random() < 0.5, rng.randint(0, 60))
        if failing == NEVER and rng.random() < KILL_SHARE:
            nodes[name].kill_ms = rng.randint(0, 40)
    return PlannedRun(label, shape, nodes)


def ordering_problems(runs: Iterable[PlannedRun], executions: list[Execution]) -> list[str]:
    """Every execution of a node started after every execution of each of its upstreams
    had started and ended (a killed execution has no end: its start counts)."""
    by_id: dict[str, list[Execution]] = {}
    for e in executions:
        by_id.setdefault(e.id, []).append(e)
    problems = []
    for run in runs:
        for spec in run.nodes.values():
            mine = by_id.get(run.tasks[spec.name].id, [])
            if not mine:
                continue
            first_start = min(e.start for e in mine)
            for up in spec.after:
                theirs = by_id.get(run.tasks[up].id, [])
                last = max((max(e.start, e.end or 0.0) for e in theirs), default=None)
                if last is not None and last > first_start:
                    problems.append(
                        f"{run.label}/{spec.name} started {last - first_start:.3f} s before "
                        f"its upstream {up} ended"
                    )
    return problems


def release_figures(runs: Iterable[PlannedRun], executions: list[Execution]) -> dict[str, Any]:
    """From the last end of a node's upstreams to its first start: the release's delay
    (seconds; over an outbox lease, the runner that took the entry had been killed)."""
    by_id: dict[str, list[Execution]] = {}
    for e in executions:
        by_id.setdefault(e.id, []).append(e)
    delays = []
    for run in runs:
        for spec in run.nodes.values():
            mine = by_id.get(run.tasks[spec.name].id, [])
            ends = [e.end for up in spec.after for e in by_id.get(run.tasks[up].id, []) if e.end]
            if mine and ends:
                delays.append(min(e.start for e in mine) - max(ends))
    delays.sort()
    return {
        "releases": len(delays),
        "release_delay_median_s": round(statistics.median(delays), 3) if delays else None,
        "release_delay_max_s": round(delays[-1], 3) if delays else None,
        "releases_over_outbox_lease": sum(d > LEASE_MS / 1000 for d in delays),
    }


def run_end_figures(
    r: Client, runs: list[PlannedRun], executions: list[Execution]
) -> dict[str, Any]:
    """From the last end of a run's nodes (that ran) to the run's end (seconds)."""
    last: dict[str, float] = {}
    for e in executions:
        if e.end is not None:
            last[e.id] = max(last.get(e.id, 0.0), e.end)
    pipe = r.pipeline(transaction=False)
    for run in runs:
        pipe.hget(f"culex:{{run:{run.run_id}}}:record", "ended_at")
    delays = []
    for run, ended_at in zip(runs, pipe.execute(), strict=True):
        ends = [last[t.id] for t in run.tasks.values() if t.id in last]
        if ended_at is not None and ends:
            delays.append(int(ended_at) / 1000 - max(ends))
    delays.sort()
    return {
        "run_end_delay_median_s": round(statistics.median(delays), 3) if delays else None,
        "run_end_delay_max_s": round(delays[-1], 3) if delays else None,
        "run_ends_over_outbox_lease": sum(d > LEASE_MS / 1000 for d in delays),
    }


def node_problems(runs: Iterable[PlannedRun], executions: list[Execution]) -> list[str]:
    """Nodes that ran though their policy says they end without running, or that did not
    run though they had to (their states are the ledger's check)."""
    ran = {e.id for e in executions}
    problems = []
    for run in runs:
        for name, (_, runs_) in run.expected().items():
            did = run.tasks[name].id in ran
            if did != runs_:
                problems.append(f"{run.label}/{name}: {'ran' if did else 'did not run'}")
    return problems


def run_states(r: Client, run_ids: list[str], prefix: str = "culex") -> list[str]:
    pipe = r.pipeline(transaction=False)
    for run_id in run_ids:
        pipe.hget(f"{prefix}:{{run:{run_id}}}:record", "state")
    return [text(s) if s is not None else "missing" for s in pipe.execute()]


def leftovers(r: Client, prefix: str = "culex") -> dict[str, int]:
    """What the releasers must leave behind them: nothing."""
    found = {"unfinished": int(r.zcard(unfinished_key(prefix)))}
    for queue in QUEUES:
        keys = queue_keys(prefix, queue)
        base = keys.task_prefix[: -len("task:")]
        found[f"{queue} outbox"] = int(r.zcard(keys.outbox))
        for kind in ("outbox:", "waits:"):
            found[f"{queue} {kind}*"] = sum(1 for _ in r.scan_iter(f"{base}{kind}*", count=1000))
    return found
