"""The chaos suite's history and its check: a total-queue test in the manner of Jepsen.

The history is kept outside Redis, in three parts:

- what the producer sent and what the server acknowledged (client-made task ids);
- what the test did to the runners: SIGKILL, SIGTERM, SIGSTOP/SIGCONT, a runner that died
  on its own (a poison task's ``os._exit``);
- what the runners executed: one line per start and per end of every execution, written
  and fsynced by the job itself (``chaos_jobs.record``).

After the queue is drained, :meth:`Ledger.check` compares the three with the final state of
every task in Redis. Nothing acknowledged may be lost, nothing never sent may run, and a task
may run again only for a reason the history shows: its attempt raised (a retry), its runner
stopped gracefully and handed it back, its runner was killed while it ran, or its runner was
frozen past its lease.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import threading
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import redis
from redis.cluster import RedisCluster

from culex._redis.keys import queue_keys

# A client of one server, or of a cluster (its pipelines split the reads by node).
Client = redis.Redis | RedisCluster

# What a task must end as.
SUCCEEDED = "succeeded"
DEAD = "dead"
FINAL = "final"  # succeeded or dead: a task whose outcome the test does not prescribe

# Why a task ran again. Only the first two are not duplicates: the earlier execution is
# known to have ended without doing the work to completion.
RETRY = "retry"  # the earlier attempt raised
HANDED_BACK = "handed back"  # cancelled by a graceful stop, released to waiting
KILLED = "killed"  # its runner was killed (or died) while it ran
LEASE_LOST = "lease lost"  # its runner was frozen (SIGSTOP) past the lease
NOT_DUPLICATES = (RETRY, HANDED_BACK)

# Faults the test records, by kind.
KILL = "kill"  # SIGKILL sent by the test
DIED = "died"  # the runner exited on its own (a poison task's os._exit)
TERM = "term"  # SIGTERM: graceful stop
STOP = "stop"  # SIGSTOP
CONT = "cont"  # SIGCONT
DEATHS = (KILL, DIED)


@dataclass(frozen=True, slots=True)
class Execution:
    """One execution of one attempt of a task, as its job logged it."""

    id: str
    attempt: int
    retry: int  # the task's retry_count when this attempt was claimed
    pid: int
    start: float
    end: float | None
    outcome: str | None  # "ok", "raise", "cancelled", "exit"; None: never ended (killed)


@dataclass(frozen=True, slots=True)
class Fault:
    kind: str
    pid: int
    t: float


@dataclass(frozen=True, slots=True)
class Rerun:
    """A task executed again after ``before``; ``cause`` None means nothing explains it."""

    id: str
    before: Execution
    again: Execution
    cause: str | None
    fault: Fault | None

    @property
    def recovery(self) -> float | None:
        """Seconds from the kill of the earlier execution's runner to the re-execution."""
        if self.cause != KILLED or self.fault is None:
            return None
        return self.again.start - self.fault.t


@dataclass
class Verdict:
    """The outcome of the check. ``ok`` is the total-queue property."""

    sent: int
    acknowledged: int
    indeterminate: list[str]  # sent, never acknowledged: may or may not exist
    executions: list[Execution]
    faults: list[Fault]
    lost: dict[str, str]  # acknowledged id -> what is wrong with its final state
    unexpected: list[str]  # executed, never sent
    reused_attempts: list[tuple[str, int]]  # one attempt number executed twice (fencing)
    wrong_result: dict[str, str]  # succeeded, but not with the result of its last attempt
    stuck: list[str]  # ids still in waiting, pending or scheduled after the drain
    reruns: list[Rerun]
    states: Counter[str] = field(default_factory=Counter)

    @property
    def duplicates(self) -> list[Rerun]:
        return [r for r in self.reruns if r.cause not in NOT_DUPLICATES]

    @property
    def unexplained(self) -> list[Rerun]:
        return [r for r in self.reruns if r.cause is None]

    @property
    def recoveries(self) -> list[float]:
        return [r.recovery for r in self.reruns if r.recovery is not None]

    @property
    def ok(self) -> bool:
        return not (
            self.lost
            or self.unexpected
            or self.reused_attempts
            or self.wrong_result
            or self.stuck
            or self.unexplained
        )

    def figures(self) -> dict[str, Any]:
        recoveries = sorted(self.recoveries)
        causes = Counter(r.cause or "unexplained" for r in self.reruns)
        return {
            "tasks_acknowledged": self.acknowledged,
            "tasks_indeterminate": len(self.indeterminate),
            "executions": len(self.executions),
            "final_states": dict(self.states),
            "faults": dict(Counter(f.kind for f in self.faults)),
            "reruns_by_cause": dict(causes),
            "duplicates": len(self.duplicates),
            "unexplained_duplicates": len(self.unexplained),
            "lost": len(self.lost),
            "unexpected": len(self.unexpected),
            "reused_attempts": len(self.reused_attempts),
            "wrong_result": len(self.wrong_result),
            "stuck": len(self.stuck),
            "killed_tasks_rerun": len(recoveries),
            "recovery_max_s": round(recoveries[-1], 3) if recoveries else None,
            "recovery_median_s": round(statistics.median(recoveries), 3) if recoveries else None,
        }

    def problems(self, limit: int = 10) -> str:
        """What is wrong, briefly, for an assertion message."""
        lines: list[str] = []

        def show(title: str, items: Iterable[Any]) -> None:
            listed = list(items)
            if listed:
                lines.append(f"{title} ({len(listed)}): {listed[:limit]}")

        show("lost", self.lost.items())
        show("unexpected executions", self.unexpected)
        show("attempt numbers executed twice", self.reused_attempts)
        show("final result not from the last attempt", self.wrong_result.items())
        show("stuck after the drain", self.stuck)
        show("unexplained duplicates", (_describe(r) for r in self.unexplained))
        return "\n".join(lines) or "no problem"


def _describe(rerun: Rerun) -> str:
    b, a = rerun.before, rerun.again
    end = f"{b.outcome} at {b.end:.3f}" if b.end is not None else "no end line"
    return (
        f"{rerun.id}: attempt {b.attempt} on pid {b.pid} started {b.start:.3f} ({end}); "
        f"attempt {a.attempt} on pid {a.pid} started {a.start:.3f}"
    )


class Ledger:
    """The history of one chaos run, in ``directory``; thread-safe."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.exec_dir = directory / "executions"
        self.exec_dir.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._enqueues = os.open(directory / "enqueues.jsonl", _APPEND, 0o644)
        self._faults_fd = os.open(directory / "faults.jsonl", _APPEND, 0o644)
        self.sent: dict[str, tuple[str, str]] = {}  # id -> (queue, what it must end as)
        self.acked: set[str] = set()
        self.faults: list[Fault] = []

    def close(self) -> None:
        os.close(self._enqueues)
        os.close(self._faults_fd)

    # -- writing the history --------------------------------------------------------------

    def sending(self, task_id: str, queue: str, expect: str = SUCCEEDED) -> None:
        """Record an enqueue about to be sent (before: a lost reply may still create it)."""
        with self._lock:
            if task_id not in self.sent:
                self.sent[task_id] = (queue, expect)
                _append(self._enqueues, {"ev": "sent", "id": task_id, "q": queue, "x": expect})

    def acknowledged(self, task_id: str) -> None:
        with self._lock:
            self.acked.add(task_id)
            _append(self._enqueues, {"ev": "ack", "id": task_id})

    def fault(self, kind: str, pid: int, t: float | None = None) -> Fault:
        fault = Fault(kind, pid, time.time() if t is None else t)
        with self._lock:
            self.faults.append(fault)
            _append(self._faults_fd, {"ev": kind, "pid": pid, "t": fault.t})
        return fault

    # -- reading the executions -------------------------------------------------------------

    def executions(self, pid: int | None = None) -> list[Execution]:
        """Every execution the jobs logged (of one runner process if ``pid`` is given)."""
        pattern = "exec-*.jsonl" if pid is None else f"exec-{pid}.jsonl"
        events: dict[tuple[str, int, int], dict[str, Any]] = {}
        for path in sorted(self.exec_dir.glob(pattern)):
            for line in path.read_bytes().splitlines():
                try:
                    event = json.loads(line)
                except ValueError:
                    continue  # a torn last line of a killed process
                key = (event["id"], event["attempt"], event["pid"])
                seen = events.setdefault(key, {"retry": event["retry"]})
                if event["ev"] == "start":
                    seen["start"] = event["t"]
                else:
                    seen["end"], seen["outcome"] = event["t"], event["ev"]
        return [
            Execution(
                task_id,
                attempt,
                seen["retry"],
                pid_,
                seen.get("start", seen.get("end", 0.0)),
                seen.get("end"),
                seen.get("outcome"),
            )
            for (task_id, attempt, pid_), seen in events.items()
        ]

    def in_flight(self, pid: int) -> list[Execution]:
        return [e for e in self.executions(pid) if e.outcome is None]

    # -- the check -----------------------------------------------------------------------------

    def check(self, r: Client, prefix: str = "culex") -> Verdict:
        """Compare the history with the final state in Redis (call after a drain)."""
        executions = self.executions()
        by_id: dict[str, list[Execution]] = {}
        for e in executions:
            by_id.setdefault(e.id, []).append(e)
        for runs in by_id.values():
            runs.sort(key=lambda e: (e.attempt, e.start))
        hashes = read_tasks(r, prefix, {i: q for i, (q, _) in self.sent.items()})
        verdict = Verdict(
            sent=len(self.sent),
            acknowledged=len(self.acked),
            indeterminate=sorted(set(self.sent) - self.acked),
            executions=executions,
            faults=list(self.faults),
            lost={},
            unexpected=sorted(set(by_id) - set(self.sent)),
            reused_attempts=[],
            wrong_result={},
            stuck=stuck_ids(r, prefix, {q for q, _ in self.sent.values()}),
            reruns=[],
        )
        for task_id in sorted(self.acked):
            _, expect = self.sent[task_id]
            fields = hashes.get(task_id, {})
            verdict.states[fields.get("state", "missing")] += 1
            problem = _judge(expect, fields, by_id.get(task_id, []))
            if problem:
                verdict.lost[task_id] = problem
            wrong = _wrong_result(fields)
            if wrong:
                verdict.wrong_result[task_id] = wrong
        for task_id, runs in by_id.items():
            attempts = Counter(e.attempt for e in runs)
            verdict.reused_attempts += [(task_id, a) for a, n in attempts.items() if n > 1]
            for before, again in itertools.pairwise(runs):
                cause, fault = self._explain(before, again)
                verdict.reruns.append(Rerun(task_id, before, again, cause, fault))
        return verdict

    def _explain(self, before: Execution, again: Execution) -> tuple[str | None, Fault | None]:
        if before.outcome == "raise":
            return RETRY, None
        if before.outcome == "cancelled":
            # A runner cancels its tasks only when it stops (a pid is SIGTERM'd once).
            term = next((f for f in self.faults if f.pid == before.pid and f.kind == TERM), None)
            if term is not None:
                return HANDED_BACK, term
        # A death or a stop is recorded once in effect: after all the process logged.
        mine = [f for f in self.faults if f.pid == before.pid and f.t >= before.start]
        death = next((f for f in mine if f.kind in DEATHS and f.t <= again.start), None)
        if death is not None:
            return KILLED, death
        stop = next((f for f in mine if f.kind == STOP and f.t <= again.start), None)
        if stop is not None:
            return LEASE_LOST, stop
        return None, None


_APPEND = os.O_WRONLY | os.O_APPEND | os.O_CREAT


def _append(fd: int, record: dict[str, Any]) -> None:
    os.write(fd, json.dumps(record).encode() + b"\n")
    os.fsync(fd)


def _judge(expect: str, fields: dict[str, str], runs: list[Execution]) -> str | None:
    """What is wrong with an acknowledged task's end, or None."""
    state = fields.get("state", "")
    if not fields:
        return "no task hash after the drain"
    if expect == SUCCEEDED:
        if state != SUCCEEDED:
            return f"state {state!r}, last_error {fields.get('last_error', '')!r}"
        if not any(e.outcome == "ok" for e in runs):
            return "succeeded in Redis, but no execution ran to completion"
    elif expect == DEAD:
        if state != DEAD:
            return f"state {state!r}, expected dead"
        if not fields.get("last_error"):
            return "dead without a reason"
    elif state not in (SUCCEEDED, DEAD):
        return f"state {state!r}, expected succeeded or dead"
    return None


def _wrong_result(fields: dict[str, str]) -> str | None:
    """A succeeded task must hold the result of the attempt it is at (fencing)."""
    if fields.get("state") != SUCCEEDED or "result" not in fields:
        return None
    try:
        result = json.loads(fields["result"])
    except ValueError:
        return f"result is not JSON: {fields['result']!r:.80}"
    if isinstance(result, dict) and str(result.get("attempt")) != fields.get("attempt"):
        return f"result of attempt {result.get('attempt')}, task at attempt {fields['attempt']}"
    return None


def read_tasks(
    r: Client, prefix: str, queues: dict[str, str], chunk: int = 1000
) -> dict[str, dict[str, str]]:
    """The hash of every task (by id; {} when missing), read in pipelined chunks."""
    ids = list(queues)
    found: dict[str, dict[str, str]] = {}
    for start in range(0, len(ids), chunk):
        part = ids[start : start + chunk]
        pipe = r.pipeline(transaction=False)
        for task_id in part:
            pipe.hgetall(key_bytes(queue_keys(prefix, queues[task_id]).task(task_id)))
        for task_id, raw in zip(part, pipe.execute(), strict=True):
            found[task_id] = {text(k): text(v) for k, v in raw.items()}
    return found


def stuck_ids(r: Client, prefix: str, queues: Iterable[str]) -> list[str]:
    """Ids still waiting, pending or scheduled in ``queues``."""
    stuck: list[str] = []
    for queue in sorted(queues):
        keys = queue_keys(prefix, queue)
        for key in (keys.waiting, keys.pending, keys.scheduled):
            stuck += [f"{queue}/{key.rsplit(':', 1)[1]}/{text(i)}" for i in r.zrange(key, 0, -1)]
    return stuck


def key_bytes(key: str) -> bytes:
    """A key as the server knows it: ids that are not UTF-8 are kept as surrogates.

    (Encoded here: redis-py's hiredis packer ignores ``encoding_errors``.)
    """
    return key.encode("utf-8", "surrogateescape")


def text(value: object) -> str:
    """A reply value as text; bytes that are not UTF-8 are kept as surrogates."""
    return value.decode("utf-8", "surrogateescape") if isinstance(value, bytes) else str(value)
