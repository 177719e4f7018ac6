"""Durable tasks under a SIGKILL storm: tasks of 5 steps and a sleep each, three ``culex
run`` processes, a random one SIGKILLed and replaced every 1-2 s. Every task succeeds; a step
once recorded never runs again; a step runs again only when the process that ran it
before was killed (inside the step, or between its end and its record: a step is
at-least-once at that edge). The figures are published as the other chaos runs' are.

And the same tasks through the server's outages (SIGKILLed and started again, and full, in
turns), with no runner killed: every step runs once, and no task spends a retry.
"""

from __future__ import annotations

import json
import random
import threading
import time
from collections import Counter, defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
import redis

import culex
from culex.operations.inspection import runners
from culex.server.embedded import EmbeddedServer

from ..conftest import wait_until
from ..faults.test_out_of_memory import give_it_back, take_the_memory
from ..jobs.test_durable_outage import kill
from . import durable_chaos_jobs as jobs
from . import fleet as fleet_module
from .fleet import Fleet
from .ledger import (
    DEATHS,
    DIED,
    KILLED,
    SUCCEEDED,
    Fault,
    Ledger,
    Rerun,
    Verdict,
    read_tasks,
)
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


def durable_work(rng: random.Random, tasks: int) -> list[tuple[str, culex.QueuedJob]]:
    return [
        (
            f"durable-{n:06d}",
            (jobs.SyncDurableChaosJob if n % 2 else jobs.DurableChaosJob)(ms=rng.randint(5, 40)),
        )
        for n in range(tasks)
    ]


def durable_fleet(
    fleets: Callable[..., Fleet], url: str, monkeypatch: pytest.MonkeyPatch, env: dict[str, str]
) -> Fleet:
    """RUNNERS ``culex run`` processes of the durable jobs on ``url``."""
    monkeypatch.setattr(fleet_module, "JOBS_FILE", Path(jobs.__file__).resolve())
    fleet = fleets(url, concurrency=8, queues=[jobs.QUEUE], env=env, log_level="WARNING")
    for _ in range(RUNNERS):
        fleet.start()
    return fleet


def checked(
    r: redis.Redis,
    ledger: Ledger,
    work: list[tuple[str, culex.QueuedJob]],
    resumes: tuple[str, ...] = (SUSPENDED,),
) -> tuple[Verdict, list[Rerun], StepVerdict, dict[str, dict[str, str]]]:
    """The ledger's verdict without the reruns that resume a task after its sleep (an
    attempt that ended with one of ``resumes``: those reruns come back apart), the steps'
    verdict, and the tasks' hashes."""
    verdict = ledger.check(r)
    resumed = [x for x in verdict.reruns if x.before.outcome in resumes]
    others = [x for x in verdict.reruns if x.before.outcome not in resumes]
    verdict = replace(verdict, reruns=others)
    hashes = read_tasks(r, "culex", {task_id: jobs.QUEUE for task_id, _ in work})
    steps = check_steps(hashes, step_runs(ledger.exec_dir), verdict.faults)
    return verdict, resumed, steps, hashes


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
    env = {"CULEX_LEASE": str(LEASE), "CULEX_MAX_STALLS": "20"}
    fleet = durable_fleet(fleets, url, monkeypatch, env)
    work = durable_work(rng, tasks)
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
    verdict, resumed, steps, _ = checked(r, ledger, work)
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


# -- the server's outages under durable tasks -------------------------------------------

OUTAGE_LEASE = 10.0  # (the restart scenario's: a short outage keeps every lease)
OUTAGE_EVERY = 3.0  # seconds between two outages, taking turns: killed, then full
DOWN = 1.0  # seconds a killed server stays down
FULL = 2.0  # seconds a server stays out of memory
STALE = "stale"  # an attempt whose sleep landed but whose reply was lost in an outage


def outage_turns(
    server: EmbeddedServer,
    r: redis.Redis,
    rng: random.Random,
    producer: threading.Thread,
    duration: float,
) -> Counter[str]:
    """While ``producer`` is alive, an outage every OUTAGE_EVERY s, in turns: the server
    SIGKILLed and started again on its append-only file (down DOWN s), then made full
    (FULL s); none in the last 2 s of ``duration`` (seconds from now): the runners must
    carry on after the last one. The value: the outages, by kind."""
    faults: Counter[str] = Counter()
    began = time.monotonic()
    next_outage = began + rng.uniform(1, 2)
    while producer.is_alive():
        time.sleep(0.02)
        if time.monotonic() < next_outage or time.monotonic() > began + duration - 2:
            continue
        if faults["killed"] <= faults["full"]:
            kill(server)
            time.sleep(DOWN)
            server.ensure_running()  # (the same data folder: the AOF is loaded)
            faults["killed"] += 1
        else:
            take_the_memory(r)
            time.sleep(FULL)
            give_it_back(r)
            faults["full"] += 1
        next_outage = time.monotonic() + OUTAGE_EVERY
    return faults


def outages(
    server: EmbeddedServer,
    ledger: Ledger,
    fleets: Callable[..., Fleet],
    rng: random.Random,
    monkeypatch: pytest.MonkeyPatch,
    tasks: int,
    rate: float,
    name: str,
) -> None:
    """Durable tasks while the server is SIGKILLed and started again on its append-only
    file, and made full (maxmemory under what it holds), in turns. No runner dies: every
    step is recorded by the one execution of it, and no task spends a retry."""
    r = redis.Redis.from_url(server.url)
    fleet = durable_fleet(fleets, server.url, monkeypatch, {"CULEX_LEASE": str(OUTAGE_LEASE)})
    # (a runner that meets an outage as it starts exits: it cannot reach the server)
    wait_until(lambda: len(runners()) == RUNNERS, timeout=60, what="the runners up")
    work = durable_work(rng, tasks)
    producer = Producer(ledger, [(i, job, SUCCEEDED) for i, job in work], rate)
    producer.start()
    try:
        faults = outage_turns(server, r, rng, producer, tasks / rate)
        drain_s = drain(r, ledger, timeout=120, tick=fleet.replace_dead)
    finally:
        producer.stop()
    verdict, resumed, steps, hashes = checked(r, ledger, work, (SUSPENDED, STALE))
    spent = {i: f.get("retry_count") for i, f in hashes.items() if f.get("retry_count") != "0"}
    # (a stall is allowed where no attempt was lost: a claim whose reply the kill took leaves
    # its task in pending until the lease ends; an attempt that ran and came back would be
    # an unexplained rerun, and a step run twice a step problem)
    stalls = sum(int(f.get("stalls", 0)) for f in hashes.values())
    held = fleet.logs().count("waits for the server")  # durable calls the outages met
    r.close()
    publish(
        name,
        {
            "runners": RUNNERS,
            "lease_s": OUTAGE_LEASE,
            "steps_per_task": jobs.STEPS,
            "server_killed": faults["killed"],
            "server_full": faults["full"],
            "drain_s": round(drain_s, 1),
            **verdict.figures(),
            "attempts_resumed_after_their_sleep": len(resumed),
            "step_executions": steps.step_executions,
            "steps_recorded": sum(steps.recorded.values()),
            "durable_calls_held": held,
            "tasks_with_a_retry": len(spent),
            "stalls": stalls,
            "step_problems": len(steps.problems),
            **producer.figures(),
        },
    )
    assert not producer.unclear and not producer.gave_up, (producer.unclear, producer.gave_up)
    assert verdict.ok, verdict.problems()
    assert verdict.acknowledged == tasks and verdict.states == {SUCCEEDED: tasks}
    assert not steps.problems, "\n".join(steps.problems[:10])  # (no runner died: none ran twice)
    assert steps.step_executions == tasks * jobs.STEPS
    assert not spent, f"tasks that spent a retry: {dict(list(spent.items())[:10])}"
    assert not verdict.reruns, verdict.reruns[:5]  # (but the resumes after a sleep)
    assert faults["killed"] >= 2 and faults["full"] >= 1, faults
    assert held, "no durable call met an outage"
    assert not [p for p in fleet.runners if not p.alive()], fleet.logs()[-3000:]


@pytest.mark.parametrize(
    ("tasks", "name"),
    [
        pytest.param(300, "durable-server-outages", marks=pytest.mark.timeout(300)),
        pytest.param(
            4_000,
            "durable-server-outages-long",
            marks=[pytest.mark.long, pytest.mark.timeout(1800)],
            id="long",
        ),
    ],
)
def test_durable_through_server_outages(
    own_server: EmbeddedServer,
    ledger: Ledger,
    fleets: Callable[..., Fleet],
    rng: random.Random,
    monkeypatch: pytest.MonkeyPatch,
    tasks: int,
    name: str,
) -> None:
    outages(own_server, ledger, fleets, rng, monkeypatch, tasks=tasks, rate=20, name=name)
