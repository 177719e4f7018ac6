"""A durable task through the shipped files alone, as a runner and a producer of another
language drive one (docs/wire-format.md#durable-tasks-step-suspend-signal): plain
redis-py, the key names and the KEYS and ARGV of the scripts' headers. Imports nothing of
culex."""

from __future__ import annotations

import json
from typing import Any, Protocol, cast

import redis

DAY_MS = 86_400_000
MOST = 2**42 - 1  # a wait without an end lasts until then (ms since the epoch)


class Plain(Protocol):
    """What the session needs of test_protocol.PlainRunner."""

    client: redis.Redis
    waiting: str
    pending: str
    scheduled: str
    signal: str
    control: str
    groups: str

    def task(self, task_id: str) -> str: ...
    def send(self, name: str, keys: list[str], args: list[Any]) -> Any: ...
    def enqueue(self, task_id: str, job_type: str, params: str = "{}") -> str: ...
    def claim(self) -> list[Any]: ...
    def complete(self, done: list[tuple[Any, str]]) -> list[str]: ...


def _plain(reply: Any) -> Any:
    """A reply with its strings decoded (an integer stays one)."""
    if isinstance(reply, list):
        return [_plain(part) for part in reply]
    return reply.decode() if isinstance(reply, bytes) else reply


def step(q: Plain, held: Any, index: int, name: str, result: str, most: int = 10) -> Any:
    """Record place ``index`` of ``held``'s attempt: a step named ``name`` that returned
    ``result`` (JSON)."""
    args = [held.attempt, index, name, result, most, 1 << 20, 16 << 20]
    return _plain(q.send("step", [q.task(held.id)], args))


def suspend(q: Plain, held: Any, index: int, kind: str, name: str, delay_ms: int | str) -> Any:
    """Sleep, or wait for signal ``name``, at place ``index`` (``delay_ms`` "": for ever)."""
    keys = [q.task(held.id), q.pending, q.scheduled, q.control, q.signal, q.groups]
    return _plain(q.send("suspend", keys, [held.attempt, index, kind, name, delay_ms, 10]))


def signal(q: Plain, task_id: str, name: str, value: str, *more: Any) -> Any:
    """Signal ``name``; ``more``: ARGV 4 to 6 (the bounds of kept signals, and the reply)."""
    keys = [q.task(task_id), q.scheduled, q.waiting, q.signal, q.groups]
    return _plain(q.send("signal", keys, [name, value, 1 << 20, *more]))


def durable_session(q: Plain) -> None:
    """One durable task ("durable"), three attempts: a signal kept before its receive and
    replaced by a later one; a step recorded; the kept signal taken; a sleep that ends the
    attempt; a wait for ever that a signal delivers; a receive that runs out at once; a
    stale attempt, a place recorded twice and a limit refused; the end. Then signals to
    an ended task and to no task."""
    r, task = q.client, q.task("durable")
    assert q.enqueue("durable", "OnboardJob", '{"user_id": 7}') == "waiting"
    assert signal(q, "durable", "approved", '{"by": "ana"}') == "kept"  # before its receive
    assert signal(q, "durable", "approved", '{"by": "ops"}') == "kept"  # replaces ana's
    assert r.hget(task, "signal:approved") == b'{"by": "ops"}'

    # attempt 1: a step, the kept signal taken at once, then a sleep that ends the attempt
    [first] = q.claim()
    assert (first.id, first.attempt) == ("durable", 1)
    assert step(q, first, 0, "create_account", '"acct-7"') == ["recorded"]
    assert suspend(q, first, 1, "receive", "approved", DAY_MS) == ["signal", '{"by": "ops"}']
    assert r.hget(task, "signal:approved") is None  # taken
    slept = suspend(q, first, 2, "sleep", "", 0)  # (0 ms: due at once)
    assert slept[0] == "suspended" and isinstance(slept[1], int)
    assert r.hget(task, "state") == b"scheduled" and r.zscore(q.pending, "durable") is None
    assert step(q, first, 3, "late", "1") == ["stale"]  # the attempt is over
    assert r.hget(task, "retry_count") == b"0"  # no failure counted

    # attempt 2: the records, read once; a wait with no end
    [second] = q.claim()  # due: claim promotes it
    assert (second.id, second.attempt, second.retry_count) == ("durable", 2, 0)
    hashed = cast(dict[bytes, bytes], r.hgetall(task))
    fields = {k.decode(): v.decode() for k, v in hashed.items()}
    records = [json.loads(fields[f"step:{n}"]) for n in range(int(fields["steps"]))]
    assert [(rec["kind"], rec["name"]) for rec in records] == [
        ("step", "create_account"), ("receive", "approved"), ("sleep", "sleep"),
    ]  # fmt: skip
    assert json.loads(records[0]["value"]) == "acct-7" and fields["steps_bytes"] == "8"
    assert records[2]["until"] == slept[1]
    assert suspend(q, second, 3, "receive", "go", "") == ["suspended", MOST]
    assert r.hmget(task, "state", "awaiting") == [b"scheduled", b"go"]
    assert signal(q, "durable", "other", "1") == "kept"  # another name: it stays scheduled
    # the reply that says what the task awaits; "deliver" keeps only the awaited name
    assert signal(q, "durable", "typo", "1", "", "", "deliver") == ["skipped", "scheduled", "go"]
    assert signal(q, "durable", "more", "1", 1, "", "keep") == ["full", "scheduled", "go"]
    assert r.hmget(task, "signal:typo", "signal:more", "signals_kept") == [None, None, b"1"]
    assert r.hget(task, "state") == b"scheduled"
    assert signal(q, "durable", "go", '"now"') == "delivered"
    assert r.zscore(q.scheduled, "durable") is None and r.hget(task, "state") == b"waiting"

    # attempt 3: the signal taken; a receive whose wait ends at once; refusals; the end
    [third] = q.claim()
    assert (third.id, third.attempt) == ("durable", 3)
    assert suspend(q, third, 3, "receive", "go", "") == ["signal", '"now"']
    assert suspend(q, third, 4, "receive", "late", 0) == ["timeout"]
    assert json.loads(r.hget(task, "step:4") or b"{}")["timeout"] is True
    conflict = step(q, third, 0, "create_user", '"acct-8"')  # place 0 is recorded
    assert conflict[0] == "conflict" and json.loads(conflict[1])["name"] == "create_account"
    assert step(q, third, 5, "welcome", '"sent"', most=5) == ["limit", "steps"]
    assert step(q, third, 5, "welcome", '"sent"') == ["recorded"]
    assert r.hget(task, "steps") == b"6"
    assert q.complete([(third, '"acct-7"')]) == []
    assert signal(q, "durable", "go", "1") == "ended"
    assert signal(q, "nobody", "go", "1") == "unknown"
