"""The batched calls of a run's release and end (what keeps a fan-out of 100,000 to a few
hundred calls): workflow_resolve.lua applies one end to many nodes of a queue in one call,
and workflow_record.lua's `ended` notes the ends of many nodes of a run in one call."""

from __future__ import annotations

import pytest
import redis

from culex._redis import workflows
from culex._redis.keys import queue_keys, run_keys
from culex._redis.workflows import NodeSpec

from ..conftest import driver_of

K = queue_keys("culex", "batch")
RUN = run_keys("culex", "run-b")


def node(task_id: str, ups: list[str], policy: str = "dead") -> NodeSpec:
    up = "[" + ",".join(f'["batch", "{u}", "{u}"]' for u in ups) + "]"
    return NodeSpec(task_id, "Job", "{}", 0, 0, "", task_id, policy, up, "[]")


def release(r: redis.Redis, ids: list[str], upstream: str, state: str) -> list[str]:
    call = workflows.resolve(
        K,
        ids,
        upstream=upstream,
        name=upstream,
        state=state,
        job_type="Job",
        result='"ok"' if state == "succeeded" else "",
        error="broke" if state == "dead" else "",
        dead_ttl_ms=60_000,
    )
    return driver_of(r).run(call)


def test_one_end_applied_to_many_nodes_in_one_call(r: redis.Redis) -> None:
    d = driver_of(r)
    specs = [
        node("d1", ["u"]),
        node("d2", ["u", "v"]),
        node("d3", ["u"], policy="run"),
        node("d4", ["u"]),
    ]
    assert d.run(workflows.store_nodes(K, "run-b", specs)) == 4
    assert release(r, ["d1", "d2", "gone"], "u", "succeeded") == ["waiting", "blocked", "gone"]
    assert release(r, ["d1", "d2"], "u", "succeeded") == ["ignored", "blocked"]  # (once)
    assert r.zrange(K.waiting, 0, -1) == [b"d1"]
    assert r.smembers(K.waits("d2")) == {b"v"}
    assert r.hkeys(K.upstream("d2")) == [b"u"]
    assert release(r, ["d3", "d4"], "u", "dead") == ["waiting", "dead"]
    assert r.hget(K.task("d4"), "last_error") == b"upstream u (u) ended dead: broke"
    assert r.zrange(K.outbox, 0, -1) == [b"d4"]  # d4's own end, to apply to its downstreams
    assert release(r, ["d2"], "v", "succeeded") == ["waiting"]  # one id: a list of one
    assert sorted(r.zrange(K.waiting, 0, -1)) == [b"d1", b"d2", b"d3"]
    with pytest.raises(Exception, match="state"):
        release(r, ["d1", "d2"], "u", "maybe")


def test_the_ends_of_many_nodes_noted_in_one_call(r: redis.Redis) -> None:
    d = driver_of(r)
    d.run(workflows.begin(RUN, "b", 3, stage_ms=60_000, ttl_ms=60_000))
    d.run(workflows.add(RUN, [(n, '["batch", "n", [], "dead"]') for n in ("a", "b", "c")]))
    assert d.run(workflows.commit(RUN)) == "running"
    with pytest.raises(Exception, match="succeeded"):
        d.run(workflows.ended(RUN, [("a", "succeeded"), ("b", "maybe")]))
    assert r.hlen(RUN.ended) == 0  # refused whole: nothing noted
    assert d.run(workflows.ended(RUN, [("a", "succeeded"), ("x", "dead")])) == "running"
    assert r.hgetall(RUN.ended) == {b"a": b"succeeded"}  # x is no node of the run
    assert d.run(workflows.ended(RUN, [("a", "succeeded"), ("b", "succeeded")])) == "running"
    assert d.run(workflows.ended(RUN, [("b", "succeeded"), ("c", "dead")])) == "failed"
    assert r.lrange(RUN.done, 0, -1) == [b"failed"]
    assert 0 < r.pttl(RUN.record) <= 60_000
