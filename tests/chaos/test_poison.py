"""Scenario 5: poison tasks among healthy ones. Some always raise; some kill their runner
(``os._exit``) on every attempt. Dead ends up holding exactly the poison tasks, a raising one
run at most max_retries + 1 times (plus its stalls: a killer took its runner down), a killer
max_stalls + 1 times, and every other task succeeds.
"""

from __future__ import annotations

import random
import time
from collections import Counter
from collections.abc import Callable

import pytest
import redis

import culex
from culex._redis.keys import queue_keys

from .chaos_jobs import QUEUE, ChaosJob, PoisonExitJob, PoisonRaiseJob, SyncChaosJob
from .fleet import Fleet
from .ledger import DEAD, DIED, SUCCEEDED, Ledger, text
from .workload import Producer, drain, publish

LEASE = 2.0
RUNNERS = 3
HEALTHY = 300
RAISING = 5
EXITING = 3
MAX_STALLS = PoisonExitJob.max_stalls  # a killer takes down 2 runners (its class's bound);
# a task that only shared a runner with killers has the setting's, 20 as in the storms
LOST = "lease expired (runner lost)"


@pytest.mark.timeout(180)
def test_poison_tasks(
    r: redis.Redis, url: str, ledger: Ledger, fleets: Callable[..., Fleet], rng: random.Random
) -> None:
    fleet = fleets(url, concurrency=4, env={"CULEX_LEASE": str(LEASE), "CULEX_MAX_STALLS": "20"})
    for _ in range(RUNNERS):
        fleet.start()
    work: list[tuple[str, culex.QueuedJob, str]] = [
        (
            f"ok-{n:04d}",
            (SyncChaosJob if n % 3 == 0 else ChaosJob)(ms=rng.randint(10, 100)),
            SUCCEEDED,
        )
        for n in range(HEALTHY)
    ]
    # The killers go first: each of their attempts waits for a lease to expire.
    poison: list[tuple[str, culex.QueuedJob, str]]
    poison = [(f"exit-{n}", PoisonExitJob(), DEAD) for n in range(EXITING)]
    poison += [(f"raise-{n}", PoisonRaiseJob(), DEAD) for n in range(RAISING)]
    for n, task in enumerate(poison):
        work.insert(n * 2 if task[0].startswith("exit") else rng.randrange(len(work)), task)
    producer = Producer(ledger, work, rate=200)
    began = time.monotonic()
    producer.start()
    producer.join()
    drain_s = drain(r, ledger, timeout=120, tick=fleet.replace_dead)
    verdict = ledger.check(r)
    keys = queue_keys("culex", QUEUE)
    dead = {text(x) for x in r.zrange(keys.dead, 0, -1)}
    runs = Counter(e.id for e in verdict.executions)
    poison_ids = {task_id for task_id, _, _ in poison}
    reasons = {i: text(r.hget(keys.task(i), "last_error") or "") for i in poison_ids}
    publish(
        "poison",
        {
            "lease_s": LEASE,
            "healthy": HEALTHY,
            "raising": RAISING,
            "exiting": EXITING,
            "max_retries": {
                "raising": PoisonRaiseJob.max_retries,
                "exiting": PoisonExitJob.max_retries,
            },
            "runner_deaths": sum(f.kind == DIED for f in verdict.faults),
            "poison_runs": {i: runs[i] for i in sorted(poison_ids)},
            "wall_s": round(time.monotonic() - began, 1),
            "drain_s": round(drain_s, 1),
            **verdict.figures(),
        },
    )
    assert verdict.ok, verdict.problems()
    assert dead == poison_ids, f"dead holds {sorted(dead)}"

    def stalls(task_id: str) -> int:
        return int(r.hget(keys.task(task_id), "stalls") or 0)

    # A killer's attempts end only by stalls; a raising task's by its failures, and by a
    # stall when a killer took its runner down.
    limits = {
        i: MAX_STALLS + 1 if isinstance(job, PoisonExitJob) else job.max_retries + 1 + stalls(i)
        for i, job, _ in poison
    }
    # Every runner that died was killed by a poison task, and every such task killed one.
    died = {f.pid for f in verdict.faults if f.kind == DIED}
    for task_id in poison_ids:
        # Each attempt was claimed, and each counted: one claimed by a runner that a killer
        # took down may never have started (its lease expired: a stall, without a run), so
        # a task ran fewer times than it was claimed only when a runner died.
        attempts = int(r.hget(keys.task(task_id), "attempt") or 0)
        if reasons[task_id].startswith(LOST):  # (ended by its stalls: fewer failures)
            assert stalls(task_id) == MAX_STALLS + 1, f"{task_id} stalled {stalls(task_id)}"
        assert attempts <= limits[task_id], f"{task_id} was claimed {attempts} times"
        if task_id.startswith("exit"):
            assert attempts == limits[task_id], f"{task_id} was claimed {attempts} times"
        assert runs[task_id] <= attempts, f"{task_id} ran {runs[task_id]} times"
        assert runs[task_id] == attempts or died, f"{task_id} ran {runs[task_id]} times"
        assert reasons[task_id], f"{task_id} is dead without a reason"
    for n in range(RAISING):
        reason = reasons[f"raise-{n}"]
        assert "poison: this task always raises" in reason or reason.startswith(LOST), reason
    killers = {e.pid for e in verdict.executions if e.outcome == "exit"}
    assert died == killers, f"runners died: {sorted(died)}; ran an os._exit: {sorted(killers)}"
