"""Scenario 1: a SIGKILL storm. Three runners; every 1-2 s a random one is killed and
replaced, while tasks of 10-100 ms arrive. Nothing acknowledged is lost, and every task a
killed runner held runs again within lease + reclaim interval (+ the stalls' back-off).
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest
import redis

from culex.runner.reclaimer import RECLAIM_EVERY

from .chaos_jobs import ChaosJob, SyncChaosJob
from .fleet import Fleet
from .ledger import DIED, KILLED, SUCCEEDED, Ledger, Rerun
from .workload import Producer, drain, publish

LEASE = 3.0
RECLAIM_INTERVAL = min(RECLAIM_EVERY, LEASE / 3)  # how often each runner reclaims
# Slack on top of the bound: a claim wakes within idle_wait (0.1 s) and a re-run task may
# queue briefly behind tasks already waiting; on a 2-core machine three busy runners and
# the producer share the CPU, and CI runs a second suite beside this one (recoveries of
# 6.06 s were seen there against a 2 s slack). 3 s is ~30x the wake-up delay, yet below
# what a lease not honoured would add (another lease, 3 s) and far below what a missed
# reclaim would cost (a task stuck in pending for good).
MARGIN = 3.0
RUNNERS = 3
RATE = 100.0  # tasks per second: below what the fleet can do, so there is no backlog


def backoff(stall: int) -> float:
    """The delay after stall n of a task whose runner was lost: 2 s x (n-1)², so 0 s the
    first time (reclaim.lua: the expired lease was the wait)."""
    return 2.0 * (stall - 1) ** 2


def stalls(rerun: Rerun) -> range:
    """The stalls between the two runs: one per attempt from the first up to the second
    (a storm's tasks never raise, so every earlier attempt of theirs stalled: stall n
    ended attempt n)."""
    return range(rerun.before.attempt, rerun.again.attempt)


def bound(rerun: Rerun) -> float:
    """Latest allowed re-run after the kill: per stall, lease + reclaim + back-off."""
    return sum(LEASE + RECLAIM_INTERVAL + backoff(n) for n in stalls(rerun)) + MARGIN


def storm(
    r: redis.Redis,
    url: str,
    ledger: Ledger,
    fleets: Callable[..., Fleet],
    rng: random.Random,
    tasks: int,
    name: str,
) -> None:
    # (each kill costs the tasks it held a stall: a storm must not bury a healthy task)
    env = {"CULEX_LEASE": str(LEASE), "CULEX_MAX_STALLS": "20"}
    fleet = fleets(url, concurrency=8, env=env, log_level="WARNING")
    for _ in range(RUNNERS):
        fleet.start()
    work = [
        (f"storm-{n:06d}", (SyncChaosJob if n % 3 == 0 else ChaosJob)(ms=rng.randint(10, 100)))
        for n in range(tasks)
    ]
    producer = Producer(ledger, [(i, job, SUCCEEDED) for i, job in work], RATE)
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
        drain_s = drain(r, ledger, timeout=120, tick=fleet.replace_dead)
    finally:
        producer.stop()
    verdict = ledger.check(r)
    killed = [x for x in verdict.reruns if x.cause == KILLED]
    late = [x for x in killed if x.recovery is not None and x.recovery > bound(x)]
    detection = [
        x.recovery - sum(map(backoff, stalls(x))) for x in killed if x.recovery is not None
    ]
    publish(
        name,
        {
            "runners": RUNNERS,
            "lease_s": LEASE,
            "reclaim_interval_s": RECLAIM_INTERVAL,
            "kills": kills,
            "storm_s": round(storm_s, 1),
            "drain_s": round(drain_s, 1),
            **verdict.figures(),
            "recovery_minus_backoff_max_s": round(max(detection), 3) if detection else None,
            "lease_plus_reclaim_interval_s": LEASE + RECLAIM_INTERVAL,
            "recoveries_over_bound": len(late),
            **producer.figures(),
        },
    )
    assert not producer.unclear and not producer.gave_up, (producer.unclear, producer.gave_up)
    assert verdict.ok, verdict.problems()
    assert verdict.acknowledged == tasks
    died = [f for f in verdict.faults if f.kind == DIED]
    assert not died, f"runners died on their own: {died}\n{fleet.logs()[-3000:]}"
    assert kills >= 5 and killed, "the storm killed no task in flight: nothing was tested"
    assert not late, [
        f"{x.id}: re-ran {x.recovery:.2f} s after the kill, bound {bound(x):.2f} s" for x in late
    ]


@pytest.mark.timeout(240)
def test_sigkill_storm(
    r: redis.Redis, url: str, ledger: Ledger, fleets: Callable[..., Fleet], rng: random.Random
) -> None:
    storm(r, url, ledger, fleets, rng, tasks=2_000, name="sigkill-storm")


@pytest.mark.long
@pytest.mark.timeout(1800)
def test_sigkill_storm_long(
    r: redis.Redis, url: str, ledger: Ledger, fleets: Callable[..., Fleet], rng: random.Random
) -> None:
    storm(r, url, ledger, fleets, rng, tasks=20_000, name="sigkill-storm-long")
