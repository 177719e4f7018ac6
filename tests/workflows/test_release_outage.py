"""A runner's drain that took an outbox entry and then met an outage (its calls refused)
applies the entry at its next pass, not when the entry's lease runs out (30 s)."""

from __future__ import annotations

from typing import Any

import redis

import culex
from culex._redis import claims, reports
from culex._redis.keys import queue_keys, run_keys
from culex.server.procedures import Procedure, run_sync
from culex.workflows import release

from ..conftest import driver_of
from ..faults.test_out_of_memory import give_it_back, take_the_memory
from .jobs import WfPriceJob, WfSumJob


def full_after_the_take(steps: Procedure[int], r: redis.Redis) -> Procedure[int]:
    """``steps`` (a drain), the server made full once its first call (the take) landed:
    every later call is refused (OOM)."""
    reply = yield next(steps)
    take_the_memory(r)
    try:
        while True:
            reply = yield steps.send(reply)
    except StopIteration as stop:
        value: int = stop.value
        return value


def test_an_entry_whose_release_was_refused_is_applied_at_the_next_pass(
    r: redis.Redis,
) -> None:
    wf = culex.Workflow()
    first = wf.add(WfPriceJob(cents=5), name="first")
    second = wf.add(WfSumJob(), after=[first], name="second")
    run = wf.enqueue()
    d = driver_of(r)
    keys = queue_keys("culex", first.queue)
    claimed = d.run(
        claims.claim(keys, limit=1, lease_ms=30_000, promote_limit=10, dead_ttl_ms=60_000)
    ).tasks
    assert [c.id for c in claimed] == [first.id]
    assert d.run(reports.complete(keys, [(first.id, 1, '"0.05"', 60_000)])) == []
    held = release.Held()  # (a runner's: culex.runner.releaser)
    maxmemory: Any = r.config_get("maxmemory")["maxmemory"]
    try:
        drained = release.drain("culex", [first.queue], 60_000, held=held)
        assert run_sync(full_after_the_take(drained, r)) == 0
        assert second.state() == culex.TaskState.BLOCKED  # (its release was refused)
        leased = r.zscore(keys.outbox, first.id)
        assert leased is not None and leased > r.time()[0] * 1000  # (taken: leased)
        give_it_back(r)
    finally:
        r.config_set("maxmemory", maxmemory)
    assert run_sync(release.drain("culex", [first.queue], 60_000, held=held)) == 1
    assert second.state() == culex.TaskState.WAITING
    assert r.zcard(keys.outbox) == 0
    assert r.hget(run_keys("culex", run.id).ended, first.id) == b"succeeded"
