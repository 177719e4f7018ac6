"""Scenario 3: the Redis server restarts under load (append-only file on), and its script
cache is flushed. Runners and producers back off and reconnect; nothing acknowledged is lost.

This scenario uses a server of its own (an EmbeddedServer in a temporary folder), never the
test session's.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable

import pytest
import redis

from culex.server.embedded import EmbeddedServer

from .chaos_jobs import ChaosJob, SyncChaosJob
from .fleet import Fleet
from .ledger import SUCCEEDED, Ledger
from .workload import Producer, drain, publish

# Longer than an outage plus the back-off of a reconnect: in-hand tasks must keep their
# leases through a restart, so any task that runs twice here is a failure.
LEASE = 10.0
RUNNERS = 3
RATE = 100.0
DOWN = 1.0  # how long the server stays down on each restart
RESTART_EVERY = 7.0  # seconds between restarts; a SCRIPT FLUSH halfway between two
# The bound: runners reconnect within 5 s of the server being back.
RECONNECT_WITHIN = 5.0


def restart_under_load(
    server: EmbeddedServer,
    ledger: Ledger,
    fleets: Callable[..., Fleet],
    rng: random.Random,
    tasks: int,
    name: str,
) -> None:
    r = redis.Redis.from_url(server.url)
    assert r.config_get("appendonly")["appendonly"] == "yes"
    fleet = fleets(server.url, concurrency=8, env={"CULEX_LEASE": str(LEASE)}, log_level="WARNING")
    for _ in range(RUNNERS):
        fleet.start()
    work = [
        (f"restart-{n:06d}", (SyncChaosJob if n % 3 == 0 else ChaosJob)(ms=rng.randint(10, 100)))
        for n in range(tasks)
    ]
    producer = Producer(ledger, [(i, job, SUCCEEDED) for i, job in work], RATE)
    outages: list[tuple[float, float]] = []  # (SHUTDOWN sent, server answering again)
    flushes = 0
    began = time.monotonic()
    # Faults stop 3 s before the producer is done: each runner must still get tasks after
    # the last restart, to show it reconnected.
    faults_until = began + tasks / RATE - 3
    producer.start()
    try:
        next_restart = began + RESTART_EVERY / 2
        next_flush = next_restart + RESTART_EVERY / 2
        while producer.is_alive():
            time.sleep(0.02)
            if time.monotonic() > faults_until:
                continue
            if time.monotonic() >= next_restart:
                down = time.time()
                server.stop()  # SHUTDOWN: the AOF is fsynced, then the server exits
                time.sleep(DOWN)
                server.ensure_running()  # the same data folder: the AOF is loaded
                outages.append((down, time.time()))
                next_restart += RESTART_EVERY
            if time.monotonic() >= next_flush:
                r.script_flush()
                flushes += 1
                next_flush += RESTART_EVERY
        drain_s = drain(r, ledger, timeout=60, tick=fleet.replace_dead)
    finally:
        producer.stop()
    verdict = ledger.check(r)
    reconnects = _reconnects(ledger, fleet, outages)
    slow = {k: v for k, v in reconnects.items() if v is None or v > RECONNECT_WITHIN}
    r.close()
    publish(
        name,
        {
            "runners": RUNNERS,
            "lease_s": LEASE,
            "restarts": len(outages),
            "script_flushes": flushes,
            "outage_max_s": round(max(up - down for down, up in outages), 3),
            "reconnect_max_s": max((v for v in reconnects.values() if v is not None), default=None),
            "reconnects_measured": len(reconnects),
            "drain_s": round(drain_s, 1),
            **verdict.figures(),
            **producer.figures(),
        },
    )
    assert not producer.unclear, f"enqueue raised errors that are not culex's: {producer.unclear}"
    assert not producer.gave_up, producer.gave_up
    assert verdict.ok, verdict.problems()
    assert verdict.acknowledged == tasks
    assert outages and flushes
    assert not slow, f"runners that did not run a task within {RECONNECT_WITHIN} s: {slow}"
    assert not [r for r in fleet.runners if not r.alive()], fleet.logs()[-3000:]


def _reconnects(
    ledger: Ledger, fleet: Fleet, outages: list[tuple[float, float]]
) -> dict[str, float | None]:
    """Per restart and runner: seconds from the server being back to the runner's next task
    (None: it ran none)."""
    starts = {
        runner.pid: sorted(e.start for e in ledger.executions(runner.pid))
        for runner in fleet.runners
    }
    found: dict[str, float | None] = {}
    for n, (_, up) in enumerate(outages):
        for pid, times in starts.items():
            after = [t for t in times if t >= up]
            found[f"restart {n + 1}, pid {pid}"] = round(after[0] - up, 3) if after else None
    return found


@pytest.mark.timeout(240)
def test_redis_restart_under_load(
    own_server: EmbeddedServer, ledger: Ledger, fleets: Callable[..., Fleet], rng: random.Random
) -> None:
    restart_under_load(own_server, ledger, fleets, rng, tasks=2_000, name="redis-restart")


@pytest.mark.long
@pytest.mark.timeout(1800)
def test_redis_restart_under_load_long(
    own_server: EmbeddedServer, ledger: Ledger, fleets: Callable[..., Fleet], rng: random.Random
) -> None:
    restart_under_load(own_server, ledger, fleets, rng, tasks=20_000, name="redis-restart-long")
