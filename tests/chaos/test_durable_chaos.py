"""Durable tasks under a SIGKILL storm: tasks of 5 steps and a sleep each, three ``culex
run`` processes, a random one SIGKILLed and replaced every 1-2 s. Every task succeeds; a step
once recorded never runs again; a step runs again only when the process that ran it
before was killed (inside the step, or between its end and its record: a step is
at-least-once at that edge). The figures are published as the other chaos runs' are.
"""

from __future__ import annotations

import json
import random
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
import redis

import culex

from . import durable_chaos_jobs as jobs
from . import fleet as fleet_module
from .fleet import Fleet
from .ledger import DEATHS, DIED, KILLED, SUCCEEDED, Fault, Ledger, read_tasks
from .workload import Producer, drain, publish

LEASE = 2.0
RUNNERS = 3
SUSPENDED = "suspended"  # an attempt that ended in its sleep (durable_chaos_jobs.py)

# The test process only enqueues these jobs: the runners are other processes.
for _job in jobs.JOBS:
    culex.registry.remove(_job)


@dataclass
class StepRun:
    """One execution of one step function, from its lines in steps-<pid>.jsonl."""

    id: str
    k: int
    attempt: int
    pid: int
    prev: str  # the value it was handed: the step before's, as recorded
    began: float
    ended: float | None  # None: no end line (killed inside the step)

    @property
    def value(self) -> str:
        return f"{self.k}/{self.pid}/{self.attempt}"


def step_runs(directory: Path) -> dict[tuple[str, int], list[StepRun]]:
    """Every execution of every step, by (task id, step), in attempt order."""
    runs: dict[tuple[str, int, int, int], StepRun] = {}
    for path in sorted(directory.glob("steps-*.jsonl")):
        for line in path.read_bytes().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue  # a torn last line of a killed process
            key = (e["id"], e["k"], e["attempt"], e["pid"])
            if e["ev"] == "begin":
                runs[key] = StepRun(
                    e["id"], e["k"], e["attempt"], e["pid"], e["prev"], e["t"], None
                )
            elif key in runs:
                runs[key].ended = e["t"]
    by_step: dict[tuple[str, int], list[StepRun]] = defaultdict(list)
    for run in runs.values():
        by_step[run.id, run.k].append(run)
    for listed in by_step.values():
        listed.sort(key=lambda run: (run.attempt, run.began))
    return by_step


@dataclass
class StepVerdict:
    step_executions: int
    recorded: Counter[str] = field(default_factory=Counter)  # steps recorded, by task id
    reexecutions: Counter[str] = field(default_factory=Counter)  # by cause
    problems: list[str] = field(default_factory=list)


def check_steps(
    hashes: dict[str, dict[str, str]],
    runs: dict[tuple[str, int], list[StepRun]],
    faults: list[Fault],
) -> StepVerdict:
    """Each task's records against the executions its step functions logged."""
    deaths = {f.pid: f.t for f in faults if f.kind in DEATHS}
    verdict = StepVerdict(sum(map(len, runs.values())))
    for task_id, fields in sorted(hashes.items()):
        if fields.get("steps") != str(jobs.STEPS + 1):  # (and the sleep)
            verdict.problems.append(f"{task_id}: {fields.get('steps')} records")
            continue
        records = [json.loads(fields[f"step:{i}"]) for i in range(jobs.STEPS + 1)]
        values = {x["name"]: json.loads(x["value"]) for x in records if x["kind"] == "step"}
        verdict.recorded[task_id] = len(values)
        if records[jobs.SLEEP_AFTER]["kind"] != "sleep" or len(values) != jobs.STEPS:
            verdict.problems.append(f"{task_id}: records {records}")
            continue
        prev = ""
        for k in range(jobs.STEPS):
            recorded = values[f"s{k}"]
            executions = runs.get((task_id, k), [])
            made = [x for x in executions if x.value == recorded]
            if len(made) != 1:
                verdict.problems.append(f"{task_id} s{k}: recorded {recorded}, ran {executions}")
                continue
            if executions[-1] is not made[0]:  # a recorded step ran again
                verdict.problems.append(f"{task_id} s{k}: ran again after its record: {executions}")
            if any(x.prev != prev for x in executions):  # a replay gave back the wrong value
                verdict.problems.append(f"{task_id} s{k}: handed {executions}, recorded {prev}")
            for x in executions[:-1]:
                death = deaths.get(x.pid)
                if death is None or death < x.began:
                    verdict.problems.append(f"{task_id} s{k}: ran again, no death explains {x}")
                else:
                    verdict.reexecutions["killed inside the step" if x.ended is None else
                                         "killed between its end and its record"] += 1  # fmt: skip
            prev = recorded
    return verdict


def storm(
    r: redis.Redis,
    url: str,
    ledger: Ledger,
    fleets: Callable[..., Fleet],
    rng: random.Random,
    monkeypatch: pytest.MonkeyPatch,
    tasks: int,
    rate: float,
    name: str,
) -> None:
    monkeypatch.setattr(fleet_module, "JOBS_FILE", Path(jobs.__file__).resolve())
    env = {"CULEX_LEASE": str(LEASE), "CULEX_MAX_STALLS": "20"}
    fleet = fleets(url, concurrency=8, queues=[jobs.QUEUE], env=env, log_level="WARNING")
    for _ in range(RUNNERS):
        fleet.start()
    work = [
        (
            f"durable-{n:06d}",
            (jobs.SyncDurableChaosJob if n % 2 else jobs.DurableChaosJob)(ms=rng.randint(5, 40)),
        )
        for n in range(tasks)
    ]
    producer = Producer(ledger, [(i, job, SUCCEEDED) for i, job in work], rate)
    began = time.monotonic()
    producer.start()
    kills = 0
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
        drain_s = drain(r, ledger, timeout=180, tick=fleet.replace_dead)
    finally:
        producer.stop()
    checked = ledger.check(r)
    # An attempt that ended in its sleep is followed by the one that resumes it: no rerun.
    resumed = [x for x in checked.reruns if x.before.outcome == SUSPENDED]
    verdict = replace(checked, reruns=[x for x in checked.reruns if x.before.outcome != SUSPENDED])
    hashes = read_tasks(r, "culex", {task_id: jobs.QUEUE for task_id, _ in work})
    steps = check_steps(hashes, step_runs(ledger.exec_dir), verdict.faults)
    publish(
        name,
        {
            "runners": RUNNERS,
            "lease_s": LEASE,
            "steps_per_task": jobs.STEPS,
            "kills": kills,
            "storm_s": round(storm_s, 1),
            "drain_s": round(drain_s, 1),
            **verdict.figures(),
            "attempts_resumed_after_their_sleep": len(resumed),
            "step_executions": steps.step_executions,
            "steps_recorded": sum(steps.recorded.values()),
            "step_reexecutions": sum(steps.reexecutions.values()),
            "step_reexecutions_by_cause": dict(steps.reexecutions),
            "recorded_steps_run_again": sum("after its record" in p for p in steps.problems),
            "step_problems": len(steps.problems),
            **producer.figures(),
        },
    )
    assert not producer.unclear and not producer.gave_up, (producer.unclear, producer.gave_up)
    assert verdict.ok, verdict.problems()
    assert verdict.acknowledged == tasks and verdict.states == {SUCCEEDED: tasks}
    assert not steps.problems, "\n".join(steps.problems[:10])
    died = [f for f in verdict.faults if f.kind == DIED]
    assert not died, f"runners died on their own: {died}\n{fleet.logs()[-3000:]}"
    killed = [x for x in verdict.reruns if x.cause == KILLED]
    assert kills >= 3 and killed and steps.reexecutions, "no step was in flight at a kill"
    # (every task sleeps once; an attempt killed after its sleep's record and before its
    # "suspended" line counts among the killed instead)
    assert resumed, "no attempt ended in its sleep"


@pytest.mark.timeout(300)
def test_durable_sigkill_storm(
    r: redis.Redis,
    url: str,
    ledger: Ledger,
    fleets: Callable[..., Fleet],
    rng: random.Random,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    storm(
        r, url, ledger, fleets, rng, monkeypatch, tasks=200, rate=20, name="durable-sigkill-storm"
    )


@pytest.mark.long
@pytest.mark.timeout(1800)
def test_durable_sigkill_storm_long(
    r: redis.Redis,
    url: str,
    ledger: Ledger,
    fleets: Callable[..., Fleet],
    rng: random.Random,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    storm(
        r,
        url,
        ledger,
        fleets,
        rng,
        monkeypatch,
        tasks=2_000,
        rate=40,
        name="durable-sigkill-storm-long",
    )
