"""What the workflow scripts store they check first: workflow_enqueue.lua every field of a
node, workflow_record.lua's commit that the run's upstreams name nodes of the run and
make no cycle, each refused with the node and the rule, nothing written; and
workflow_resolve.lua applies an end only to a node that waits for it."""

from __future__ import annotations

import json
from typing import Any

import pytest
import redis

from culex._redis import workflows
from culex._redis.keys import queue_keys, run_keys
from culex._redis.workflows import NodeSpec
from culex.errors import ServerError

from ..conftest import driver_of

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)

K = queue_keys("culex", "rules")
RUN = run_keys("culex", "run-r")
BASE = NodeSpec("n", "Job", "{}", 0, 0, "", "n", "dead", "[]", "[]")
GOOD = NodeSpec("ok", "Job", "{}", 0, 0, "", "ok", "dead", "[]", '[["rules", "b"]]')

# A field of a node, a value that breaks its rule, and the words of the refusal.
BAD = [
    ("job_type", "", "its type takes 1 to 200 bytes"),
    ("job_type", "J" * 201, "its type takes 1 to 200 bytes"),
    ("params_json", "[1]", "its params are no JSON object"),
    ("params_json", "{", "its params are no JSON object"),
    ("name", "", "its name takes 1 to 800 bytes"),
    ("name", "a\nb", "no control character"),
    ("policy", "maybe", 'its policy is "dead" or "run"'),
    ("up", '{"a": 1}', "its up and down are JSON lists"),
    ("up", "[5]", "its up holds [queue, id, name] lists"),
    ("up", '[["rules", "a"]]', "its up holds [queue, id, name] lists"),
    ("up", '[["rules", "bad id", "x"]]', "its up holds [queue, id, name] lists"),
    ("up", '[["rules", "n", "n"]]', "of other nodes"),
    ("down", "[5]", "its down holds [queue, id] lists"),
    ("down", '[["rules"]]', "its down holds [queue, id] lists"),
    ("down", '[["", "b"]]', "its down holds [queue, id] lists"),
    ("down", '[["rules", "b", "x"]]', "its down holds [queue, id] lists"),
    ("down", "nope", "its up and down are JSON lists"),
    ("headers", "[]", 'its headers are "" or a JSON object'),
]


@pytest.mark.parametrize(("field", "value", "words"), BAD)
def test_a_node_that_breaks_a_rule_is_refused_and_nothing_is_stored(
    r: redis.Redis, field: str, value: str, words: str
) -> None:
    changed: dict[str, Any] = {field: value}
    bad = BASE._replace(**changed)
    with pytest.raises(ServerError) as refused:
        driver_of(r).run(workflows.store_nodes(K, RUN.id, [GOOD, bad]))
    assert "node n: " in str(refused.value) and words in str(refused.value)
    assert r.keys("culex:{rules}:*") == []  # (the good node before it is not stored either)


def test_a_node_that_keeps_every_rule_is_stored(r: redis.Redis) -> None:
    fine = NodeSpec("n", "Job", ' {"a": [1]}', 3, -2, "t", "nœud", "run",
                    '[["rules", "ok", "ok"]]', "[]", '{"h": "1"}')  # fmt: skip
    assert driver_of(r).run(workflows.store_nodes(K, RUN.id, [GOOD, fine])) == 2
    assert r.hget(K.task("n"), "state") == b"blocked"


def staged(r: redis.Redis, nodes: dict[str, list[str]], entry: object = None) -> None:
    """A staging run whose record lists ``nodes`` (id -> upstream ids); ``entry``, if
    given, is the raw JSON of one more node ``x``."""
    d = driver_of(r)
    count = len(nodes) + (entry is not None)
    d.run(workflows.begin(RUN, "rules", count, stage_ms=60_000, ttl_ms=60_000))
    listed = [(i, json.dumps(["rules", i, ups, "dead"])) for i, ups in nodes.items()]
    if entry is not None:
        listed.append(("x", json.dumps(entry)))
    d.run(workflows.add(RUN, listed))


@pytest.mark.parametrize(
    ("nodes", "entry", "words"),
    [
        ({"a": [], "b": ["a", "c"]}, None, "node b: its upstream c is no node of the run"),
        ({"a": ["b"], "b": ["a"], "c": []}, None, "its upstreams make a cycle: node "),
        ({"a": ["a"]}, None, "its upstreams make a cycle: node a could never start"),
        ({"a": [], "b": ["a", "d"], "c": ["b"], "d": ["c"]}, None, "make a cycle"),
        ({"a": []}, ["rules", "x", [5], "dead"], "node x: its upstream 5 is no node"),
        ({"a": []}, ["rules", "x", [], "maybe"], "node x: its entry is no JSON [queue,"),
        ({"a": []}, {"q": 1}, "node x: its entry is no JSON"),
    ],
)
def test_a_commit_of_upstreams_outside_the_run_or_in_a_cycle_is_refused(
    r: redis.Redis, nodes: dict[str, list[str]], entry: object, words: str
) -> None:
    staged(r, nodes, entry)
    with pytest.raises(ServerError, match="workflow_record commit") as refused:
        driver_of(r).run(workflows.commit(RUN))
    assert words in str(refused.value)
    assert r.hget(RUN.record, "state") == b"staging"


def test_a_commit_of_a_long_chain_and_a_wide_diamond_is_taken(r: redis.Redis) -> None:
    chain = {f"c{i}": [f"c{i - 1}"] if i else [] for i in range(2000)}
    chain["sink"] = [f"c{i}" for i in range(2000)] + ["c0"]
    staged(r, chain)
    assert driver_of(r).run(workflows.commit(RUN)) == "running"


def test_an_end_applied_to_a_node_that_does_not_wait_for_it_changes_nothing(
    r: redis.Redis,
) -> None:
    d = driver_of(r)
    other = NodeSpec("b", "Job", "{}", 0, 0, "", "b", "dead", '[["rules", "u", "u"]]', "[]")
    d.run(workflows.store_nodes(K, "another-run", [other]))
    before = r.hgetall(K.task("b"))
    call = workflows.resolve(
        K, ["b"], upstream="stranger", name="s", state="dead", job_type="Job",
        result="", error="broke", dead_ttl_ms=60_000,
    )  # fmt: skip
    assert d.run(call) == ["ignored"]
    assert r.hgetall(K.task("b")) == before
    assert r.smembers(K.waits("b")) == {b"u"} and not r.exists(K.upstream("b"))


def test_a_broken_run_keeps_the_first_reason_and_ends_failed(r: redis.Redis) -> None:
    d = driver_of(r)
    staged(r, {"a": [], "b": ["a"]})
    assert d.run(workflows.commit(RUN)) == "running"
    assert d.run(workflows.broken(RUN, "node a (a): its down is no list")) == "running"
    assert d.run(workflows.broken(RUN, "another reason")) == "running"
    assert r.hget(RUN.record, "error") == b"node a (a): its down is no list"
    assert r.hget(RUN.record, "op") == b"cancel"
    assert d.run(workflows.ended(RUN, [("a", "succeeded"), ("b", "succeeded")])) == "failed"
    assert d.run(workflows.broken(RUN, "late")) == "failed"  # (an ended run: nothing)
    assert d.run(workflows.retry(RUN, ["b"])) == 1
    assert r.hget(RUN.record, "error") is None


def test_an_entry_set_aside_leaves_the_outbox_with_its_reason(r: redis.Redis) -> None:
    d = driver_of(r)
    r.hset(K.outbox_entry("n"), mapping={"run": "R", "down": "[5]", "at": "7"})
    r.zadd(K.outbox, {"n": 1})
    entry = workflows.Entry("rules", "n", {"at": "7"})
    with pytest.raises(ServerError, match="ttl_ms"):
        d.run(workflows.set_aside(K, entry, "bad down", 0))
    assert r.zcard(K.outbox) == 1 and not r.exists(K.aside)  # (nothing written)
    assert d.run(workflows.set_aside(K, entry._replace(fields={"at": "6"}), "x", 1000)) == 0
    assert d.run(workflows.set_aside(K, entry, "bad down", 60_000)) == 1
    assert r.zcard(K.outbox) == 0 and not r.exists(K.outbox_entry("n"))
    assert r.zrange(K.aside, 0, -1) == [b"n"]
    kept = r.hgetall(f"{K.aside}:n")
    assert kept[b"down"] == b"[5]" and kept[b"reason"] == b"bad down"
    assert 0 < r.pttl(f"{K.aside}:n") <= 60_000
