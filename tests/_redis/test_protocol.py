"""The files are the protocol (docs/design.md#the-files-are-the-protocol): every script
under lua/ of the installed package, sent as it is with plain redis-py, runs a queue by itself.

``PlainRunner`` is a runner written from the scripts' headers and docs/wire-format.md alone:
nothing of culex is imported for it. Only the last test, where culex and this runner take
each other's tasks, imports culex.
"""

from __future__ import annotations

import ast
import json
import re
from collections.abc import Callable, Sequence
from hashlib import sha1
from importlib import resources
from pathlib import Path
from typing import Any, NamedTuple, cast

import pytest
import redis

from ..conftest import running, score, snapshot
from .plain_durable import durable_session
from .plain_workflows import workflow_session

HOUR_MS = 3_600_000
SETS = ("waiting", "pending", "scheduled", "dead")
SUCCESS = ("succeeded", "")  # a task in no set: succeeded, or never there / expired

Number = int | str  # what a script reads with tonumber(); a str lets a test send garbage


def shipped() -> dict[str, str]:
    """Every script a foreign client sends, by name: each file directly under lua/ of the
    installed package (lua/include/ holds the sources of shared Lua, never sent)."""
    folder = resources.files("culex._redis").joinpath("lua")
    return {
        entry.name.removesuffix(".lua"): entry.read_text("utf-8")
        for entry in folder.iterdir()
        if entry.is_file() and entry.name.endswith(".lua")
    }


class Contract(NamedTuple):
    """What a script's header says it takes: how many KEYS, its ARGV in order ("1", "2",
    ..., and "2.." for a repeated tail such as complete's id, attempt, result), and how
    many ARGV each repetition of that tail holds (0: no tail); how many last ARGV the
    header marks "optional" (a call may leave them out), and how many last KEYS (a client
    written before they came sends fewer)."""

    keys: int
    argv: list[str]
    tail: int
    optional: int = 0
    optional_keys: int = 0

    def takes(self, keys: int, args: int) -> bool:
        """Whether a call with this many KEYS and ARGV is one the header describes."""
        fixed = len(self.argv) - (self.tail > 0)
        keyed = self.keys - self.optional_keys <= keys <= self.keys
        if self.tail and args > fixed:
            return keyed and (args - fixed) % self.tail == 0
        return keyed and fixed - self.optional <= args <= fixed


def contract(source: str) -> Contract:
    """The KEYS and ARGV that the header of a script's ``source`` lists."""
    header = source.split("\n\n", 1)[0]
    keys = re.findall(r"^-- KEYS\[(\d+)\]", header, re.MULTILINE)
    argv = re.findall(r"^-- ARGV\[(\d+(?:\.\.)?)\]", header, re.MULTILINE)
    assert keys == [str(n) for n in range(1, len(keys) + 1)], keys
    tail = re.search(r"^-- ARGV\[\d+\.\.\]\s+(\w+)", header, re.MULTILINE)
    size = {"pairs": 2, "triples": 3}.get(tail[1], 1) if tail else 0
    optional = re.findall(r"^-- ARGV\[\d+\]\s+\w+\s+optional", header, re.MULTILINE)
    optional_keys = re.findall(r"^-- KEYS\[\d+\][^\n]*\soptional\b", header, re.MULTILINE)
    return Contract(len(keys), argv, size, len(optional), len(optional_keys))


def text(value: bytes | str | None) -> str:
    return value.decode() if isinstance(value, bytes) else (value or "")


class Held(NamedTuple):
    """A task as claim.lua hands it out."""

    id: str
    attempt: int
    type: str
    params: str
    retry_count: int
    max_retries: int


class PlainRunner:
    """The runner's side of the protocol in plain redis-py: key names, KEYS and ARGV order
    and replies as the scripts' headers state them. Remembers every script it sent, with
    how many KEYS and ARGV, and the id of every task it enqueued."""

    LEASE_MS = 30_000
    SUCCESS_TTL_MS = 60_000  # successful_job_ttl: long enough to find the hashes at the end
    DEAD_TTL_MS = 86_400_000  # failed_job_ttl
    DEAD_MAX = 10_000

    def __init__(self, client: redis.Redis, sources: dict[str, str], queue: str) -> None:
        self.client = client
        self.queue = queue
        base = f"culex:{{{queue}}}"  # the hash tag: every key of the queue in one slot
        self.waiting = f"{base}:waiting"
        self.pending = f"{base}:pending"
        self.scheduled = f"{base}:scheduled"
        self.dead = f"{base}:dead"
        self.signal = f"{base}:signal"
        self.task_prefix = f"{base}:task:"
        self.periodic_prefix = f"{base}:periodic:"
        self.done_prefix = f"{base}:done:"  # a list per task that producers wait on
        self.stats_prefix = f"{base}:stats:"  # the counters (minute, hour, total)
        self.control = f"{base}:control"  # flow control: paused, limits set at run time
        self.starts = f"{base}:starts"  # the rate limit's window
        self.cancels = f"{base}:cancels"  # running tasks whose cancel was requested
        self.dedupe = f"{base}:dedupe"  # dedupe key -> the live task that holds it
        self.groups = f"{base}:groups:"  # the groups' ready sets, ring, running counts
        self.scripts = {name: client.register_script(source) for name, source in sources.items()}
        self.sent: dict[str, tuple[int, int]] = {}
        self.ids: list[str] = []

    def task(self, task_id: str) -> str:
        return self.task_prefix + task_id

    def send(self, name: str, keys: list[str], args: Sequence[Number]) -> Any:
        """EVALSHA of the file's own text (loaded again on NOSCRIPT)."""
        self.sent[name] = (len(keys), len(args))
        return self.scripts[name](keys=keys, args=list(args))

    def wait(self, timeout: float) -> bool:
        """Block until a script has signalled work (True) or ``timeout`` seconds pass."""
        return self.client.blpop([self.signal], timeout) is not None

    def enqueue(
        self, task_id: str, job_type: str, params: str = "{}", *, delay_ms: Number = 0,
        max_retries: Number = 4, priority: Number | None = None,
    ) -> str:  # fmt: skip
        keys = [self.task(task_id), self.waiting, self.scheduled, self.signal]
        args: list[Number] = [task_id, job_type, self.queue, params, "", delay_ms, max_retries]
        if priority is not None:  # (ARGV[8], the trace, comes before it: "" for none)
            args += ["", priority]
        state, _ = self.send("enqueue", keys, args)
        self.ids.append(task_id)
        return text(state)

    def claim(
        self, limit: int = 10, lease_ms: Number = LEASE_MS, *, rate: Number = 0,
        rate_ms: Number = 0, concurrency: Number = 0,
    ) -> list[Held]:  # fmt: skip
        keys = [
            self.waiting, self.pending, self.scheduled, self.dead, self.task_prefix,
            self.done_prefix, self.stats_prefix, self.control, self.starts,
        ]  # fmt: skip
        args = [limit, lease_ms, 100, self.DEAD_TTL_MS, rate, rate_ms, concurrency]
        reply = self.send("claim", keys, args)
        return [
            Held(text(row[0]), row[1], text(row[2]), text(row[3]), int(row[4]), int(row[5]))
            for row in reply[2:]
        ]

    def complete(
        self, done: Sequence[tuple[Held, str]], ttl_ms: Number = SUCCESS_TTL_MS
    ) -> list[str]:
        args: list[Number] = []
        for held, result in done:
            args += [held.id, held.attempt, result, ttl_ms]
        keys = [
            self.pending, self.task_prefix, self.periodic_prefix, self.done_prefix,
            self.stats_prefix, self.control, self.signal, self.dedupe, self.groups,
            self.cancels,
        ]  # fmt: skip
        refused = self.send("complete", keys, args)  # id, attempt, id, attempt, ...
        return [text(task_id) for task_id in refused[::2]]

    def fail(self, held: Held, error: str, retry_delay_ms: Number | None) -> str | None:
        """The reply, "scheduled" or "dead" (no ``retry_delay_ms``: dead); None if refused."""
        keys = [
            self.task(held.id), self.pending, self.scheduled, self.dead, self.periodic_prefix,
            self.done_prefix + held.id, self.stats_prefix, self.control, self.signal,
            self.dedupe, self.groups, self.cancels,
        ]  # fmt: skip
        delay = -1 if retry_delay_ms is None else retry_delay_ms
        reply = self.send(
            "fail", keys, [held.id, held.attempt, error, delay, self.DEAD_TTL_MS, self.DEAD_MAX]
        )
        return None if reply == 0 else text(reply)

    def heartbeat(self, held: Sequence[Held], lease_ms: Number = LEASE_MS) -> list[str]:
        args: list[Number] = [lease_ms]
        for task in held:
            args += [task.id, task.attempt]
        return [
            text(task_id)
            for task_id in self.send("heartbeat", [self.pending, self.task_prefix], args)
        ]

    def beat(self, runner_id: str, ttl_ms: Number, **fields: str) -> int:
        """Record this runner in the runner registry (its keys are not the queue's)."""
        keys = ["culex:{runners}", f"culex:{{runners}}:runner:{runner_id}"]
        args: list[Number] = [runner_id, ttl_ms]
        for name, value in fields.items():
            args += [name, value]
        return int(self.send("beat", keys, args))

    def retry_later(self, held: Held, delay_ms: Number) -> bool:
        """Push a held task back to scheduled without counting a failure."""
        keys = [self.task(held.id), self.pending, self.scheduled]
        return bool(
            self.send("retry_later", keys, [held.id, held.attempt, delay_ms]) == b"scheduled"
        )

    def progress(self, held: Held, fraction: Number, message: str = "") -> bool:
        """Store how far a held task's attempt has got (fraction from "0" to "1")."""
        return bool(
            self.send("progress", [self.task(held.id)], [held.attempt, fraction, message]) == 1
        )

    def log(self, held: Held, *lines: str) -> int:
        """Keep log lines of a held task's attempt: each {attempt, n, at, line} as JSON."""
        at = int(self.client.time()[0]) * 1000
        told = [json.dumps({"attempt": held.attempt, "n": n, "at": at, "line": line})
                for n, line in enumerate(lines, start=1)]  # fmt: skip
        return int(self.send("log", [self.task(held.id)], [held.attempt, *told]))

    def release(self, held: Held) -> bool:
        keys = [self.task(held.id), self.pending, self.waiting, self.signal]
        return bool(self.send("release", keys, [held.id, held.attempt]) == 1)

    def reclaim(self, limit: int = 100, max_stalls: int = 3) -> dict[str, str]:
        keys = [
            self.pending, self.scheduled, self.dead, self.task_prefix, self.waiting,
            self.signal, self.periodic_prefix, self.done_prefix, self.stats_prefix,
            self.control, self.dedupe, self.groups, self.cancels,
        ]  # fmt: skip
        no_heal: list[int | str] = [limit, self.DEAD_TTL_MS, self.DEAD_MAX, ""]  # (no heal_ms)
        args = [*no_heal, max_stalls]
        pairs = self.send("reclaim", keys, args)
        return {text(pairs[i]): text(pairs[i + 1]) for i in range(0, len(pairs), 2)}

    def cancel(self, task_id: str, reason: str = "") -> str:
        """The reply: "cancelled" (it had not started), "cancelling" (running: requested),
        or the state that refused it."""
        keys = [
            self.task(task_id), self.waiting, self.scheduled, self.dead, self.periodic_prefix,
            self.done_prefix + task_id, self.dedupe, self.groups, self.pending, self.cancels,
            self.task_prefix,
        ]  # fmt: skip
        return text(self.send("cancel", keys, [task_id, reason, self.DEAD_TTL_MS, self.DEAD_MAX]))

    def cancel_requests(self) -> list[str]:
        """The running tasks whose cancel was requested: a runner stops those it holds."""
        ids = cast(list[bytes], self.client.zrange(self.cancels, 0, 999))
        return [text(task_id) for task_id in ids]

    def end(self, task_id: str, block: float = 0.0) -> tuple[str | None, str | None]:
        """The task's (state, result) once ended, as a producer waits for it: wait.lua, and
        with ``block`` a BLMOVE on the done list with wait.lua right behind it."""
        keys = [self.task(task_id), self.done_prefix + task_id]
        if block:
            # (redis-py's hint says int; the server takes a fraction of a second)
            self.client.blmove(keys[1], keys[1], block, "LEFT", "RIGHT")  # type: ignore[arg-type]
        state, result, *_ = self.send("wait", keys, [])
        return (text(state) if state else None), (text(result) if result else None)

    def retry_dead(self, ids: Sequence[str]) -> tuple[list[str], list[str]]:
        keys = [self.dead, self.waiting, self.signal, self.task_prefix]
        retried, skipped = self.send("retry_dead", keys, [len(ids), *ids])
        return [text(i) for i in retried], [text(i) for i in skipped]

    def schedule(self, job_type: str, slot_ms: Number) -> str:
        """Enqueue one slot of a periodic job (a new job runs its slot: run_new "1")."""
        task_id = f"{job_type}:{slot_ms}"
        keys = [
            self.periodic_prefix + job_type, self.task(task_id), self.waiting, self.signal,
            self.task_prefix,
        ]  # fmt: skip
        outcome, _ = self.send(
            "schedule", keys, [task_id, job_type, self.queue, slot_ms, "", "0", "1", 0]
        )
        if outcome == b"enqueued":
            self.ids.append(task_id)
        return text(outcome)

    def browse(
        self, state: str, limit: Number, after: tuple[str, str] | None = None, job: str = ""
    ) -> tuple[int, tuple[str, str] | None, list[list[str]]]:
        """A page of ``state``, newest first: (total, the next page's cursor, rows)."""
        score, last = after or ("", "")
        args = ["desc", score, last, limit, 2000, job, 500]
        total, _, score, last, *rows = self.send(
            "browse", [getattr(self, state), self.task_prefix], args
        )
        cursor = (text(score), text(last)) if last else None
        return int(total), cursor, [[text(v) for v in row] for row in rows]

    def delete(self, ids: Sequence[str]) -> tuple[list[str], list[str]]:
        keys = [self.waiting, self.scheduled, self.dead, self.task_prefix, self.done_prefix]
        deleted, skipped = self.send("delete", keys, list(ids))
        return [text(i) for i in deleted], [text(i) for i in skipped]

    def steer(self, **fields: str) -> dict[str, str]:
        """Pause (paused="1"), resume (paused=""), or set limits at run time."""
        args: list[Number] = []
        for name, value in fields.items():
            args += [name, value]
        reply = self.send("queue_control", [self.control, self.signal], args)
        return {text(reply[i]): text(reply[i + 1]) for i in range(0, len(reply), 2)}

    def run_now(self, task_id: str) -> str:
        """Make one scheduled task ready now (the dashboard's "run now"): "waiting", or the
        state that refused it."""
        keys = [self.task(task_id), self.scheduled, self.waiting, self.signal]
        return text(self.send("run_now", keys, [task_id]))

    def hasten(self, limit: Number = 100) -> int:
        """Make the scheduled tasks due now (a test's drain)."""
        keys = [self.scheduled, self.waiting, self.signal, self.task_prefix]
        return int(self.send("hasten", keys, [limit]))


def where(q: PlainRunner, task_id: str) -> tuple[list[str], str]:
    """The sets that hold ``task_id``, and the state its hash says ("" for no hash)."""
    sets = [name for name in SETS if q.client.zscore(getattr(q, name), task_id) is not None]
    return sets, text(q.client.hget(q.task(task_id), "state"))


def places(q: PlainRunner) -> dict[str, str]:
    """Where each task of ``q`` is: the one set that holds its id (its hash says the same),
    or "succeeded" for a task in no set whose hash says so. Fails on a task that is lost
    (in no set and not succeeded) or in two sets."""
    found = {}
    for task_id in q.ids:
        sets, state = where(q, task_id)
        assert len(sets) <= 1, f"{task_id} is in {sets}"
        assert state == (sets[0] if sets else "succeeded"), (
            f"{task_id} is in {sets or 'no set'} and its hash says {state or 'nothing'}"
        )
        found[task_id] = state
    return found


def assert_every_key_ends(q: PlainRunner) -> None:
    """The hash of a finished or dead task expires; a running or queued task's lives until
    it ends. Beyond task hashes, only the queue's sets, its signal list, the periodic
    records, the registry of queue names, the counters' totals (one hash per queue, a
    few fields per job type) and the last minute counted (it expires once a later one is
    counted) live on: any other key must expire."""
    totals = q.stats_prefix + "total"
    last_minute = f"{q.stats_prefix}m:{text(q.client.hget(totals, 'minute'))}"
    kept = {q.waiting, q.pending, q.scheduled, q.dead, q.signal, "culex:queues", totals}
    kept.add(q.control)  # a queue's pause flag and limits: a few fields, set by people
    kept.add(last_minute)
    for key in q.client.scan_iter():  # the test's own server: every key is this queue's
        name, ttl = key.decode(), q.client.pttl(key)
        if name.startswith(q.task_prefix):
            state = text(q.client.hget(key, "state"))
            ended = state in ("succeeded", "dead")
            assert (ttl > 0) == ended, f"{name} says {state} and its TTL is {ttl} ms"
        elif name not in kept and not name.startswith(q.periodic_prefix):
            assert ttl > 0, f"{name} never expires"


def test_the_plain_runner_imports_nothing_of_culex() -> None:
    here = Path(__file__).parent
    for module in ("test_protocol.py", "plain_workflows.py", "plain_durable.py"):
        body = ast.parse((here / module).read_text("utf-8")).body
        imported = {
            alias.name for node in body if isinstance(node, ast.Import) for alias in node.names
        }
        imported |= {node.module or "" for node in body if isinstance(node, ast.ImportFrom)}
        assert not any(name.split(".")[0] == "culex" for name in imported), module
    tree = ast.parse(Path(__file__).read_text("utf-8"))
    runner = next(n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "PlainRunner")
    assert not any(isinstance(node, ast.Import | ast.ImportFrom) for node in ast.walk(runner))


def test_a_plain_runner_runs_every_state_change_through_the_shipped_files(r: redis.Redis) -> None:
    sources = shipped()
    q = PlainRunner(r, sources, "plain")

    # success, with its lease renewed on the way
    assert q.enqueue("done", "AddJob", '{"a": 2, "b": 3}') == "waiting"
    assert q.wait(timeout=10)  # enqueue signalled the queue
    assert q.end("done") == ("waiting", None)  # not ended: a waiter is marked
    [held] = q.claim()
    assert (held.id, held.attempt, held.type, json.loads(held.params)) == (
        "done", 1, "AddJob", {"a": 2, "b": 3},
    )  # fmt: skip
    deadline = score(r, q.pending, "done")
    assert q.heartbeat([held], lease_ms=2 * q.LEASE_MS) == []
    assert score(r, q.pending, "done") > deadline
    now = q.beat("plain-1", q.LEASE_MS, host="elsewhere", tasks='[{"id": "done"}]')
    assert score(r, "culex:{runners}", "plain-1") == now + q.LEASE_MS  # in the registry
    assert q.complete([(held, "5")]) == []
    assert r.hget(q.task("done"), "result") == b"5"
    assert q.end("done", block=10) == ("succeeded", "5")  # complete woke the waiter

    # a failure retried, then dead, then retried from dead and done
    q.enqueue("flaky", "AddJob")
    [first] = q.claim()
    assert q.fail(first, "boom", retry_delay_ms=0) == "scheduled"
    [second] = q.claim()  # due at once: claim promotes it
    assert (second.id, second.attempt, second.retry_count) == ("flaky", 2, 1)
    assert q.fail(second, "boom again", retry_delay_ms=None) == "dead"
    assert q.complete([(first, "late")]) == ["flaky"]  # a stale report is refused
    assert q.fail(first, "late", retry_delay_ms=0) is None
    assert q.retry_dead(["flaky", "done"]) == (["flaky"], ["done"])
    [third] = q.claim()
    assert (third.id, third.attempt, third.retry_count) == ("flaky", 3, 0)
    assert q.complete([(third, "1")]) == []

    # a failure without retry stays dead
    q.enqueue("doomed", "AddJob")
    [held] = q.claim()
    assert q.fail(held, "no retry", retry_delay_ms=None) == "dead"

    # cancel a waiting and a scheduled task; a running one is left to its runner
    q.enqueue("unwanted", "AddJob")
    assert q.enqueue("someday", "AddJob", delay_ms=HOUR_MS) == "scheduled"
    assert q.cancel("unwanted") == "cancelled"
    assert q.cancel("someday", "not needed") == "cancelled"
    assert r.hget(q.task("someday"), "last_error") == b"cancelled: not needed"
    assert q.cancel("unwanted") == "dead"

    # cancel a running task: requested; its runner reads the requests, stops the attempt
    # and reports it with fail, which buries it with the request's reason, never retried
    q.enqueue("stopped", "AddJob")
    [held] = q.claim()
    assert q.cancel("stopped", "user left") == "cancelling"
    assert q.cancel("stopped") == "cancelling"  # asked twice: the first reason stands
    assert q.cancel_requests() == ["stopped"]
    assert not q.release(held)  # not handed back to run again
    assert q.fail(held, "stopped", retry_delay_ms=0) == "dead"
    assert r.hget(q.task("stopped"), "last_error") == b"cancelled: user left"
    assert q.cancel_requests() == []

    # a graceful stop hands a task back without counting a failure
    q.enqueue("handed-back", "AddJob")
    [held] = q.claim()
    assert q.release(held)
    assert not q.release(held)
    [again] = q.claim()
    assert (again.id, again.attempt, again.retry_count) == ("handed-back", 2, 0)
    assert q.complete([(again, "null")]) == []

    # a job reports its progress, then pushes back: scheduled again, no failure counted
    q.enqueue("pushed-back", "AddJob")
    [held] = q.claim()
    assert q.progress(held, "0.5", "half way")
    assert q.log(held, "fetched", "half way") == 2
    assert q.retry_later(held, 0)
    assert q.log(held, "fetched", "half way", "pushed back") == 3  # (kept once each)
    assert not q.progress(held, "0.6")  # no longer pending: refused
    assert not q.retry_later(held, 0)
    [again] = q.claim()  # due at once: claim promotes it
    assert (again.id, again.attempt, again.retry_count) == ("pushed-back", 2, 0)
    assert r.hmget(q.task("pushed-back"), "progress", "progress_message") == [b"0.5", b"half way"]
    assert q.log(held, "stale") == 0  # (attempt 2 holds it now: refused)
    logged = json.loads(r.hget(q.task("pushed-back"), "logs") or b"[]")
    assert [line["line"] for line in logged] == ["fetched", "half way", "pushed back"]
    assert q.complete([(again, "null")]) == []

    # a runner dies: its expired leases are reclaimed as stalls, apart from the retries
    q.enqueue("orphan", "AddJob", max_retries=0)
    q.enqueue("orphan-for-good", "AddJob")
    lost = q.claim(lease_ms=0)  # a lease of 0 ms has run out at once
    assert q.reclaim(max_stalls=1) == {"orphan": "waiting", "orphan-for-good": "waiting"}
    assert q.heartbeat(lost) == ["orphan", "orphan-for-good"]  # the lost runner learns it
    rerun = {held.id: held for held in q.claim(lease_ms=0)}
    assert (rerun["orphan"].attempt, rerun["orphan"].retry_count) == (2, 0)
    assert q.complete([(lost[0], "late")]) == ["orphan"]
    assert q.complete([(rerun["orphan"], "2")]) == []
    assert q.reclaim(max_stalls=1) == {"orphan-for-good": "dead"}  # its second stall

    # one slot of a periodic job, enqueued once however many runners ask
    seconds, _ = r.time()
    slot = seconds * 1000 - 60_000
    assert q.schedule("TickJob", slot) == "enqueued"
    assert q.schedule("TickJob", slot) == "done"
    [tick] = q.claim()
    assert tick.id == f"TickJob:{slot}"
    assert q.complete([(tick, "null")]) == []
    assert r.hget(q.periodic_prefix + "TickJob", "last_outcome") == b"succeeded"
    record, state = q.send("read_periodic", [q.periodic_prefix + "TickJob", q.task_prefix], [])
    assert (dict(zip(record[::2], record[1::2], strict=True))[b"last_task"], state) == (
        tick.id.encode(), b"succeeded",
    )  # fmt: skip

    # a periodic job paused: its slot enqueues nothing; resumed, the slots it missed pass
    record_key = q.periodic_prefix + "TickJob"
    assert text(q.send("periodic_pause", [record_key], ["pause", "0"])) == "paused"
    assert q.schedule("TickJob", slot + 30_000) == "paused"
    assert text(q.send("periodic_pause", [record_key], ["resume", "0"])) == "resumed"
    assert q.schedule("TickJob", slot + 30_000) == "done"  # passed over, not caught up

    # a task that expires (ARGV[12], ms from now) and is not started by then: dead, not run
    expiring = [q.task("expired"), q.waiting, q.scheduled, q.signal]
    q.send("enqueue", expiring, ["expired", "AddJob", q.queue, "{}", "", 0, 4, "", "", "", "", 0])
    assert q.claim() == []
    assert r.hmget(q.task("expired"), "state", "last_error") == [b"dead", b"expired"]
    assert q.delete(["expired"]) == (["expired"], [])  # (the dead counted below are others)

    # browse a state's tasks page by page; delete tasks that are not running
    dead = {"doomed", "unwanted", "someday", "stopped", "orphan-for-good"}
    total, cursor, rows = q.browse("dead", limit=3)
    assert (total, len(rows)) == (5, 3) and cursor is not None
    _, end, more = q.browse("dead", limit=3, after=cursor)
    assert end is None and {row[0] for row in rows + more} == dead
    assert [row[0] for row in q.browse("dead", 9, job="Nobody")[2]] == []
    q.enqueue("scrap", "AddJob", delay_ms=HOUR_MS)
    assert q.delete(["scrap", "done"]) == (["scrap"], ["done"])
    assert where(q, "scrap") == ([], "")
    q.ids.remove("scrap")

    # a test's drain makes a task scheduled for an hour from now due at once
    assert q.enqueue("hastened", "AddJob", delay_ms=HOUR_MS) == "scheduled"
    assert q.hasten() == 1
    assert q.wait(timeout=10)  # hasten signalled the queue
    [hastened] = q.claim()
    assert (hastened.id, hastened.attempt) == ("hastened", 1)
    assert q.complete([(hastened, "null")]) == []
    # "run now" makes one scheduled task ready at once, and refuses any other
    assert q.enqueue("run-now", "AddJob", delay_ms=HOUR_MS) == "scheduled"
    q.client.delete(q.signal)
    assert q.run_now("run-now") == "waiting"
    assert q.wait(timeout=10)  # run_now signalled the queue
    assert q.run_now("run-now") == "waiting"  # (refused: it is not scheduled)
    [ran] = q.claim()
    assert (ran.id, ran.attempt) == ("run-now", 1)
    assert q.complete([(ran, "null")]) == []

    # flow control: a paused queue starts nothing; limits hold per claim, across runners
    q.enqueue("held-back", "AddJob")
    assert q.steer(paused="1") == {"paused": "1"}
    assert q.claim() == []
    assert q.steer(paused="") == {}
    assert q.wait(timeout=10)  # resuming signalled the queue
    q.enqueue("second-in-line", "AddJob")
    [one] = q.claim(concurrency=1)
    assert q.claim(concurrency=1) == []  # one is running
    q.client.delete(q.signal)  # (the enqueues' own wake-ups)
    assert q.complete([(one, "null")]) == []
    assert q.wait(timeout=10)  # the freed slot signalled the queue
    [two] = q.claim(rate=1, rate_ms=HOUR_MS)
    assert q.complete([(two, "null")]) == []
    q.enqueue("over-the-rate", "AddJob")
    assert q.claim(rate=1, rate_ms=HOUR_MS) == []  # one start this hour already
    q.steer(rate="0", rate_ms="0")  # a limit set at run time replaces the declared one
    [late] = q.claim(rate=1, rate_ms=HOUR_MS)
    assert late.id == "over-the-rate"
    assert q.complete([(late, "null")]) == []
    # priorities: the highest first, whatever the order of enqueue
    q.enqueue("low", "AddJob", priority=-3)
    q.enqueue("high", "AddJob", priority=3)
    ranked = q.claim()
    assert [held.id for held in ranked] == ["high", "low"]
    assert q.complete([(held, "null") for held in ranked]) == []

    # a workflow run, enqueued, run, failed, retried (plain_workflows.py)
    workflow_session(q)

    # a durable task: steps, a sleep, signals before and after its receive (plain_durable.py)
    durable_session(q)

    # tasks still under way when the run ends
    q.enqueue("later", "AddJob", delay_ms=HOUR_MS)
    q.enqueue("running", "AddJob")
    assert [held.id for held in q.claim()] == ["running"]
    q.enqueue("queued", "AddJob")

    assert places(q) == {
        "done": "succeeded", "flaky": "succeeded", "doomed": "dead", "unwanted": "dead",
        "stopped": "dead",
        "someday": "dead", "handed-back": "succeeded", "orphan": "succeeded",
        "orphan-for-good": "dead", f"TickJob:{slot}": "succeeded", "later": "scheduled",
        "running": "pending", "queued": "waiting", "hastened": "succeeded", "run-now": "succeeded",
        "held-back": "succeeded", "second-in-line": "succeeded", "over-the-rate": "succeeded",
        "pushed-back": "succeeded",
        "low": "succeeded", "high": "succeeded", "wf-up": "succeeded", "wf-down": "succeeded",
        "durable": "succeeded",
    }  # fmt: skip
    assert_every_key_ends(q)

    # what a scrape of the metrics reads of the queue, in one call
    start = q.waiting.removesuffix("waiting")
    read = q.send("read_queues", [start], [])
    sets = [q.waiting, q.pending, q.scheduled, q.dead, f"{start}groups:ready"]
    assert read[:5] == [r.zcard(key) for key in sets] and read[1:4] == [1, 1, 5]
    assert float(read[5]) == r.zrange(q.waiting, 0, 0, withscores=True)[0][1]
    assert read[6] == b""  # (no grouped task is ready)
    counters = read[8:]
    assert read[7] == len(counters) > 0
    assert dict(zip(counters[::2], counters[1::2], strict=True)) == r.hgetall(f"{start}stats:total")
    assert set(q.sent) == set(sources)  # every shipped script took part
    for name, (keys, args) in q.sent.items():
        header = contract(sources[name])
        assert header.takes(keys, args), f"{name}.lua: sent {keys} KEYS, {args} ARGV; {header}"


# -- a number that is not one: every check before the first write --------------------------
# (docs/design.md#checks-before-writes)


class GarblingRunner(PlainRunner):
    """Sends ARGV[index] of one script as "x" once armed: a foreign client's slip."""

    garble: tuple[str, int] | None = None

    def send(self, name: str, keys: list[str], args: Sequence[Number]) -> Any:
        if self.garble and self.garble[0] == name:
            args = list(args)
            args[self.garble[1] - 1] = "x"
        return super().send(name, keys, args)


def holding(q: PlainRunner, **enqueue: Any) -> Held:
    q.enqueue("t", "AddJob", **enqueue)
    [held] = q.claim()
    return held


def _enqueue(q: PlainRunner) -> Callable[[], object]:
    return lambda: q.enqueue("t", "AddJob")


def _enqueue_with_priority(q: PlainRunner) -> Callable[[], object]:
    return lambda: q.enqueue("t", "AddJob", priority=5)


def _claim(q: PlainRunner) -> Callable[[], object]:
    q.enqueue("t", "AddJob")
    return q.claim


def _claim_a_due_retry(q: PlainRunner) -> Callable[[], object]:
    q.fail(holding(q), "boom", retry_delay_ms=0)
    return q.claim


def _claim_an_id_without_hash(q: PlainRunner) -> Callable[[], object]:
    q.client.zadd(q.waiting, {"ghost": 1})  # claim buries it, with dead_ttl_ms
    return q.claim


def _complete(q: PlainRunner) -> Callable[[], object]:
    held = holding(q)
    return lambda: q.complete([(held, "1")])


def _retry(q: PlainRunner) -> Callable[[], object]:
    held = holding(q)
    return lambda: q.fail(held, "boom", retry_delay_ms=0)


def _bury(q: PlainRunner) -> Callable[[], object]:
    held = holding(q)
    return lambda: q.fail(held, "boom", retry_delay_ms=None)


def _retry_later(q: PlainRunner) -> Callable[[], object]:
    held = holding(q)
    return lambda: q.retry_later(held, 0)


def _progress(q: PlainRunner) -> Callable[[], object]:
    held = holding(q)
    return lambda: q.progress(held, "0.5", "half way")


def _heartbeat(q: PlainRunner) -> Callable[[], object]:
    held = holding(q)
    return lambda: q.heartbeat([held])


def _beat(q: PlainRunner) -> Callable[[], object]:
    q.beat("r1", 60_000, host="h")
    return lambda: q.beat("r1", 60_000, host="other")


def _reclaim(q: PlainRunner) -> Callable[[], object]:
    q.enqueue("t", "AddJob", max_retries=0)
    q.claim(lease_ms=0)
    return q.reclaim


def _retry_dead(q: PlainRunner) -> Callable[[], object]:
    q.fail(holding(q), "boom", retry_delay_ms=None)
    return lambda: q.retry_dead(["t"])


def _schedule(q: PlainRunner) -> Callable[[], object]:
    return lambda: q.schedule("TickJob", 60_000)


def _hasten(q: PlainRunner) -> Callable[[], object]:
    q.enqueue("t", "AddJob", delay_ms=HOUR_MS)
    return q.hasten


def _cancel(q: PlainRunner) -> Callable[[], object]:
    q.enqueue("t", "AddJob")
    return lambda: q.cancel("t")


def _browse(q: PlainRunner) -> Callable[[], object]:
    q.enqueue("t", "AddJob")
    return lambda: q.browse("waiting", 10)


NUMBERS = [  # (script, ARGV index of a number it reads, a state it acts on and the call)
    ("enqueue", 5, _enqueue), ("enqueue", 6, _enqueue), ("enqueue", 9, _enqueue_with_priority),
    ("claim", 1, _claim), ("claim", 2, _claim), ("claim", 3, _claim_a_due_retry),
    ("claim", 4, _claim_an_id_without_hash),
    ("complete", 4, _complete),
    ("fail", 4, _retry), ("fail", 5, _bury), ("fail", 6, _bury),
    ("retry_later", 3, _retry_later), ("progress", 2, _progress),
    ("heartbeat", 1, _heartbeat),
    ("beat", 2, _beat),
    ("reclaim", 1, _reclaim), ("reclaim", 2, _reclaim), ("reclaim", 3, _reclaim),
    ("reclaim", 4, _reclaim), ("reclaim", 5, _reclaim),
    ("retry_dead", 1, _retry_dead),
    ("schedule", 4, _schedule),
    ("cancel", 3, _cancel), ("cancel", 4, _cancel),
    ("browse", 4, _browse), ("browse", 5, _browse), ("browse", 7, _browse),
    ("hasten", 1, _hasten),
]  # fmt: skip


@pytest.mark.parametrize(
    ("name", "index", "prepare"), NUMBERS, ids=[f"{n}-ARGV{i}" for n, i, _ in NUMBERS]
)
def test_a_number_that_is_not_one_is_refused_before_any_write(
    r: redis.Redis, name: str, index: int, prepare: Callable[[PlainRunner], Callable[[], object]]
) -> None:
    """A script sent by hand may get "x" where it reads a number: it must answer with an
    error and change nothing, not stop half-way with a task in no set."""
    q = GarblingRunner(r, shipped(), "plain")
    call = prepare(q)
    before = snapshot(r)
    q.garble = (name, index)
    with pytest.raises(redis.ResponseError):
        call()
    after = snapshot(r)
    changed = sorted(
        k.decode() for k in before.keys() | after.keys() if before.get(k) != after.get(k)
    )
    lost = [i for i in ("t", "ghost") if where(q, i)[0] == [] and where(q, i)[1] not in SUCCESS]
    also = f"; tasks in no set: {lost}" if lost else ""
    assert not changed, (
        f'{name}.lua with ARGV[{index}] = "x" wrote before it failed: {changed}{also}'
    )


# -- culex and a foreign runner on one queue --------------------------------------------


async def test_culex_and_a_plain_runner_take_each_others_tasks(r: redis.Redis) -> None:
    import culex  # the other side of the wire: only this test uses culex itself

    from ..test_wire_format import AddJob  # a culex job: a + b, on the queue "foreign"

    def loaded(*names: str) -> bool:  # by the SHA-1 of the file's own bytes
        return all(r.script_exists(*(sha1(sources[n].encode()).hexdigest() for n in names)))

    culex.configure(successful_job_ttl=60)
    sources = shipped()
    q = PlainRunner(r, sources, AddJob.queue)
    r.script_flush()

    # culex enqueues, the plain runner runs it, culex reads the result
    task = await AddJob(a=2, b=3).aenqueue()
    assert loaded("enqueue")  # culex sent the file as it is: no prelude, same SHA-1
    assert q.wait(timeout=10)
    [held] = q.claim()
    assert (held.id, held.type, json.loads(held.params)) == (task.id, "AddJob", {"a": 2, "b": 3})
    assert q.complete([(held, json.dumps(2 + 3))]) == []
    assert await task.aresult(timeout=10) == 5

    # the plain runner enqueues, a culex runner runs it
    r.script_flush()
    q.enqueue("from-plain", "AddJob", '{"a": 4, "b": 5}')
    async with running(culex.Runner(run_from=[AddJob.queue])):
        assert await culex.Task("from-plain", AddJob.queue).aresult(timeout=10) == 9
    assert loaded("claim", "complete")
    q.ids.append(task.id)
    assert places(q) == {"from-plain": "succeeded", task.id: "succeeded"}
    assert_every_key_ends(q)
