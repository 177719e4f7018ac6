"""Scenario 2: SIGTERM with grace. Runners are stopped gracefully, one after another, while
they work. Tasks in flight finish within the grace period or come back at once (not after
the lease, and without counting an attempt); nothing is lost and nothing runs twice.
"""

from __future__ import annotations

import random
import subprocess
import time
from collections.abc import Callable

import redis

from .chaos_jobs import ChaosJob, SyncChaosJob
from .fleet import Fleet, RunnerProcess
from .ledger import HANDED_BACK, SUCCEEDED, TERM, Ledger
from .workload import Producer, drain, publish

LEASE = 3.0
GRACE = 1.0
RUNNERS = 3
TASKS = 600
LONG_TASKS = 12  # 4 s each: longer than the grace period, so they are handed back
RATE = 60.0
# A handed-back task is in waiting when the grace period ends and is claimed at once;
# coming back by lease instead would take lease + reclaim + the 2 s retry back-off (>= 6 s).
# 1.5 s of slack covers the runner's exit work and a claim on a loaded 2-core machine.
BACK_AT_ONCE = GRACE + 1.5
# After SIGTERM a runner starts no new task; a claim already answered may still start
# within this long (it was taken before the signal was handled).
LAST_CLAIM = 0.5
EXIT_WITHIN = GRACE + 10.0  # how long a stopping runner may take to exit, at most


def test_sigterm_with_grace(
    r: redis.Redis, url: str, ledger: Ledger, fleets: Callable[..., Fleet], rng: random.Random
) -> None:
    env = {"CULEX_LEASE": str(LEASE), "CULEX_GRACE_PERIOD": str(GRACE)}
    fleet = fleets(url, concurrency=8, env=env)
    for _ in range(RUNNERS):
        fleet.start()
    work = [
        (f"term-{n:05d}", (SyncChaosJob if n % 3 == 0 else ChaosJob)(ms=rng.randint(10, 100)))
        for n in range(TASKS)
    ]
    for k in range(LONG_TASKS):  # spread over the run
        work.insert(k * TASKS // LONG_TASKS, (f"term-long-{k:02d}", ChaosJob(ms=4000)))
    producer = Producer(ledger, [(i, job, SUCCEEDED) for i, job in work], RATE)
    producer.start()
    stopped: list[tuple[RunnerProcess, float]] = []
    try:
        next_stop = time.monotonic() + rng.uniform(1.5, 2.5)
        while producer.is_alive():
            time.sleep(0.02)
            fleet.replace_dead()
            if time.monotonic() >= next_stop:
                victim = _busiest(fleet, ledger, rng)
                if victim is None:
                    continue
                fleet.terminate(victim)
                stopped.append((victim, time.monotonic()))
                fleet.start()
                next_stop = time.monotonic() + rng.uniform(1.5, 2.5)
        drain_s = drain(r, ledger, timeout=60, tick=fleet.replace_dead)
    finally:
        producer.stop()
    exits = {runner.pid: _exit_code(runner, since) for runner, since in stopped}
    hung = [fleet.dump(runner) for runner, _ in stopped if isinstance(exits[runner.pid], str)]
    verdict = ledger.check(r)
    terms = {f.pid: f.t for f in verdict.faults if f.kind == TERM}
    handed_back = [x for x in verdict.reruns if x.cause == HANDED_BACK]
    comebacks = [x.again.start - terms[x.before.pid] for x in handed_back]
    late_starts = [
        e for e in verdict.executions if e.pid in terms and e.start > terms[e.pid] + LAST_CLAIM
    ]
    finished_after_term = [
        e
        for e in verdict.executions
        if e.pid in terms
        and e.start < terms[e.pid]
        and e.outcome == "ok"
        and e.end is not None
        and e.end > terms[e.pid]
    ]
    publish(
        "sigterm-grace",
        {
            "runners": RUNNERS,
            "lease_s": LEASE,
            "grace_period_s": GRACE,
            "sigterms": len(stopped),
            "exit_codes": sorted(set(exits.values()), key=str),
            "drain_s": round(drain_s, 1),
            **verdict.figures(),
            "finished_within_grace": len(finished_after_term),
            "handed_back": len(handed_back),
            "handed_back_rerun_max_s": round(max(comebacks), 3) if comebacks else None,
            "started_after_sigterm": len(late_starts),
            **producer.figures(),
        },
    )
    assert not producer.unclear and not producer.gave_up, (producer.unclear, producer.gave_up)
    assert verdict.ok, verdict.problems()
    assert not verdict.duplicates, verdict.problems()
    assert not hung, f"runners did not exit after SIGTERM: {exits}\n" + "\n".join(hung)
    assert all(code == 0 for code in exits.values()), exits
    assert handed_back, "no task was in flight past the grace period: nothing was handed back"
    counted = [x.id for x in handed_back if x.again.retry != x.before.retry]
    assert not counted, f"handing back counted a failed attempt: {counted}"
    slow = [
        f"{x.id}: {t:.2f} s"
        for x, t in zip(handed_back, comebacks, strict=True)
        if t > BACK_AT_ONCE
    ]
    assert not slow, f"handed-back tasks did not come back at once (bound {BACK_AT_ONCE} s): {slow}"
    assert not late_starts, f"runners started tasks after SIGTERM: {late_starts[:5]}"


def _busiest(fleet: Fleet, ledger: Ledger, rng: random.Random) -> RunnerProcess | None:
    """A runner holding a long task if there is one (so that one is handed back), else any
    runner that is up (its signal handlers are in place once it logs that it is buzzing)."""
    ready = [x for x in fleet.alive if not x.accounted and "culex is buzzing" in x.log_text()]
    holding = [
        runner
        for runner in ready
        if any(e.id.startswith("term-long") for e in ledger.in_flight(runner.pid))
    ]
    return rng.choice(holding or ready) if ready else None


def _exit_code(runner: RunnerProcess, since: float) -> int | str:
    try:
        return runner.proc.wait(timeout=max(0.1, since + EXIT_WITHIN - time.monotonic()))
    except subprocess.TimeoutExpired:
        return f"still running {EXIT_WITHIN} s after SIGTERM"
