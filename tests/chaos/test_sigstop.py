"""Scenario 4: a runner frozen (SIGSTOP) past its lease, then thawed (SIGCONT). Its tasks
ran again on another runner; its late reports are refused; the final state of each task is
the second runner's.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import redis

from culex._redis.keys import queue_keys

from ..conftest import wait_until
from .chaos_jobs import QUEUE, ChaosJob
from .fleet import Fleet
from .ledger import LEASE_LOST, SUCCEEDED, Ledger
from .workload import Producer, drain, publish

LEASE = 2.0
TASKS = 4
STALL_MS = 3000  # each task runs this long: the runner is frozen in the middle of it


def _wait(condition: Callable[[], bool], timeout: float, what: str) -> float:
    """Wait until ``condition`` holds; returns the seconds it took (a figure)."""
    began = time.monotonic()
    wait_until(condition, timeout, what=what, every=0.02)
    return time.monotonic() - began


def test_sigstop_past_the_lease(
    r: redis.Redis, url: str, ledger: Ledger, fleets: Callable[..., Fleet]
) -> None:
    fleet = fleets(url, concurrency=TASKS, env={"CULEX_LEASE": str(LEASE)})
    first = fleet.start()
    work = [(f"stop-{n}", ChaosJob(ms=STALL_MS), SUCCEEDED) for n in range(TASKS)]
    producer = Producer(ledger, work, rate=1000)
    producer.run()  # in this thread: every task acknowledged before the runner is frozen
    _wait(lambda: len(ledger.in_flight(first.pid)) == TASKS, 30, "the first runner's tasks")
    fleet.pause(first)
    frozen_at = time.monotonic()
    second = fleet.start()
    keys = queue_keys("culex", QUEUE)
    ids = [task_id for task_id, _, _ in work]

    def done_by_second() -> bool:
        states = [r.hmget(keys.task(i), "state", "attempt") for i in ids]
        return all(s == b"succeeded" and int(a or 0) >= 2 for s, a in states)

    rerun_s = _wait(done_by_second, 60, "the tasks to run again on the second runner")
    frozen_s = time.monotonic() - frozen_at
    before = {i: r.hgetall(keys.task(i)) for i in ids}
    fleet.resume(first)
    # Thawed, the first runner finishes its (long overdue) executions and reports them.
    _wait(lambda: len(ledger.in_flight(first.pid)) == 0, 30, "the first runner to finish")
    refusals = _wait_for_refusals(first.log_text, ids, timeout=30)
    drain(r, ledger, timeout=30)
    after = {i: r.hgetall(keys.task(i)) for i in ids}
    verdict = ledger.check(r)
    lease_lost = [x for x in verdict.reruns if x.cause == LEASE_LOST]
    results = {i: json.loads(after[i][b"result"]) for i in ids if b"result" in after[i]}
    publish(
        "sigstop",
        {
            "lease_s": LEASE,
            "tasks": TASKS,
            "frozen_s": round(frozen_s, 1),
            "rerun_elsewhere_s": round(rerun_s, 1),
            "late_reports_refused": len(refusals),
            **verdict.figures(),
        },
    )
    assert verdict.ok, verdict.problems()
    assert {x.id for x in lease_lost} == set(ids), [x.id for x in verdict.reruns]
    for x in lease_lost:
        assert x.before.pid == first.pid and x.again.pid == second.pid
        assert x.before.outcome == "ok", "the frozen runner's execution did not finish when thawed"
    assert set(refusals) == set(ids), f"late reports not refused in the log: {set(ids) - refusals}"
    assert after == before, "a late report changed a task"
    for task_id in ids:
        assert results[task_id] == {"pid": second.pid, "attempt": 2}, results[task_id]
        assert after[task_id][b"attempt"] == b"2"
    assert first.alive() and second.alive()


def _wait_for_refusals(log: Callable[[], str], ids: list[str], timeout: float) -> set[str]:
    """The ids whose report the first runner's log says was refused."""
    found: set[str] = set()
    began = time.monotonic()
    while time.monotonic() - began < timeout:
        lines = [line for line in log().splitlines() if "refused" in line]
        found = {i for i in ids if any(f"<{i}>" in line for line in lines)}
        if found == set(ids):
            break
        time.sleep(0.1)
    return found
