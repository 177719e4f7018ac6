"""A workflow run through the shipped files alone, as a producer and a runner of another
language drive one (docs/wire-format.md): plain redis-py, the key names and the KEYS and
ARGV of the scripts' headers. Imports nothing of culex."""

from __future__ import annotations

import json
from typing import Any, Protocol

import redis


class Plain(Protocol):
    """What the session needs of test_protocol.PlainRunner."""

    client: redis.Redis
    queue: str
    waiting: str
    dead: str
    signal: str
    task_prefix: str
    ids: list[str]
    DEAD_TTL_MS: int

    def send(self, name: str, keys: list[str], args: list[Any]) -> Any: ...
    def claim(self) -> list[Any]: ...
    def complete(self, done: list[tuple[Any, str]]) -> list[str]: ...
    def fail(self, held: Any, error: str, retry_delay_ms: int | None) -> str | None: ...


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def workflow_session(q: Plain) -> None:
    """Enqueue a run of two nodes (``wf-up`` then ``wf-down``), run it to a failure, retry
    it to success; discard a second run left staging; take the unfinished operations."""
    r, base = q.client, q.task_prefix.removesuffix("task:")
    unfinished = "culex:{workflows}:unfinished"
    record = ["culex:{run:W1}:record", "culex:{run:W1}:nodes", "culex:{run:W1}:ended",
              "culex:{run:W1}:done"]  # fmt: skip
    node_keys = [q.task_prefix, q.waiting, q.signal, q.dead]

    # the producer: noted unfinished, the record, the nodes (blocked), the commit, the start
    r.zadd(unfinished, {"W1": 2**41})
    assert q.send("workflow_record", record, ["begin", "W1", "nightly", 2, 60_000, 60_000]) == (
        b"staging"
    )
    q.send("workflow_record", record, ["add", "wf-up", json.dumps([q.queue, "up", [], "dead"]),
           "wf-down", json.dumps([q.queue, "down", ["wf-up"], "dead"])])  # fmt: skip
    up = ["wf-up", "AddJob", '{"a": 1, "b": 2}', 4, "", "", "up", "dead", "[]",
          json.dumps([[q.queue, "wf-down"]])]  # fmt: skip
    down = ["wf-down", "AddJob", '{"a": 3, "b": 4}', 4, "", "", "down", "dead",
            json.dumps([[q.queue, "wf-up", "up"]]), "[]"]  # fmt: skip
    assert q.send("workflow_enqueue", [q.task_prefix], [q.queue, "W1", *up, *down]) == 2
    assert r.hget(q.task_prefix + "wf-down", "state") == b"blocked"
    assert q.send("workflow_record", record, ["commit"]) == b"running"
    start = ["wf-up", "", "", "succeeded", "", "", "", q.DEAD_TTL_MS]
    assert q.send("workflow_resolve", node_keys, start) == b"waiting"
    q.send("workflow_record", record, ["op", ""])
    r.zrem(unfinished, "W1")
    q.ids += ["wf-up", "wf-down"]

    # the runner: the node runs; its end goes through the outbox to its downstream and run
    [held] = q.claim()
    assert held.id == "wf-up"
    assert q.complete([(held, "3")]) == []
    apply_outbox(q, record)
    assert r.hget(base + "upstream:wf-down", "wf-up") is not None
    [held] = q.claim()
    assert held.id == "wf-down"
    assert q.fail(held, "boom", None) == "dead"
    assert apply_outbox(q, record) == "failed"

    # a retry: the dead node runs again; the run ends succeeded
    state, number = q.send("workflow_record", record, ["retry", "wf-down"])
    assert (state, number) == (b"running", 1)
    assert q.send("workflow_rearm", node_keys, ["wf-down", "W1", 1]) == b"waiting"
    assert q.send("workflow_rearm", node_keys, ["wf-down", "W1", 1]) == b"skipped"
    [held] = q.claim()
    assert q.complete([(held, "7")]) == []
    assert apply_outbox(q, record) == "succeeded"
    assert r.lrange(record[3], 0, -1) == [b"succeeded"]

    # a node ended with no entry written (as a runner from before workflows ends one):
    # workflow_heal writes it, once; applied, it changes nothing that counted it already
    r.delete(base + "outbox:wf-down")
    heal = ["W1", 1, "wf-down", "wf-up"]
    assert q.send("workflow_heal", [q.task_prefix], heal) == [[b"wf-down"], []]
    assert q.send("workflow_heal", [q.task_prefix], ["W1", 1, "wf-down"]) == [[], []]
    assert apply_outbox(q, record) == "succeeded"

    # a run whose producer stopped before its commit: discarded whole
    other = [key.replace("W1", "W2") for key in record]
    q.send("workflow_record", other, ["begin", "W2", "", 1, 60_000, 60_000])
    lone = ["wf-lone", "AddJob", "{}", 4, "", "", "lone", "dead", "[]", "[]"]
    q.send("workflow_enqueue", [q.task_prefix], [q.queue, "W2", *lone])
    r.zadd(unfinished, {"W2": 0})
    assert q.send("workflow_unfinished", [unfinished], [10, 30_000]) == [b"W2"]
    assert q.send("workflow_record", other, ["discard", "now"]) == b"discarded"
    assert q.send("workflow_discard", [q.task_prefix], ["W2", "wf-lone"]) == 1
    r.zrem(unfinished, "W2")


def apply_outbox(q: Plain, record: list[str]) -> str:
    """Take the queue's outbox entries, resolve each downstream, note each end in the run,
    strike the entries off; the run's state after the last."""
    outbox = q.task_prefix.removesuffix("task:") + "outbox"
    now, *entries = q.send("workflow_take", [outbox], [100, 30_000])
    assert entries and int(now) > 0
    state = ""
    done: list[Any] = []
    for row in entries:
        task_id = _text(row[0])
        fields = dict(zip(map(_text, row[1::2]), map(_text, row[2::2]), strict=True))
        for queue, downstream in json.loads(fields["down"]):
            assert queue == q.queue
            q.send("workflow_resolve", [q.task_prefix, q.waiting, q.signal, q.dead],
                   [downstream, task_id, fields["node"], fields["state"], fields["type"],
                    fields.get("result", ""), fields.get("error", ""),
                    q.DEAD_TTL_MS])  # fmt: skip
        state = _text(q.send("workflow_record", record, ["ended", task_id, fields["state"]]))
        done += [task_id, fields["at"]]
    assert q.send("workflow_done", [outbox, q.task_prefix], done) == len(entries)
    return state
