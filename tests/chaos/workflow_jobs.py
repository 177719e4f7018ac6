"""The jobs of the workflow chaos test (``culex run /abs/path/workflow_jobs.py``), and the
producer of a large workflow that the test kills while it stores the run.

Every execution of a node writes a line when it starts and a line when it ends, in the
format of ``chaos_jobs.record`` (so ``Ledger.executions`` reads them), with the node's
run (the test's own label for it) and name. Each line is fsynced before the job goes on.

As a program: ``python workflow_jobs.py big IDS_FILE NODES`` builds a workflow of NODES
nodes (fan-ins of 50), writes its nodes to IDS_FILE, then enqueues it; the test kills it
part-way.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import signal
import sys
import threading
import time
from datetime import timedelta
from typing import Any

import culex
from culex.server.procedures import Procedure

LOG_DIR_ENV = "CHAOS_LOG_DIR"  # (chaos_jobs.LOG_DIR_ENV: the fleet sets it)
QUEUES = ("wfchaos-a", "wfchaos-b")
NEVER, ALWAYS, ONCE = "never", "always", "once"  # how a node fails

_lock = threading.Lock()
_log: dict[int, int] = {}  # pid -> file descriptor


def record(event: str, job: WfChaosNode, **more: object) -> None:
    """Append one event of this execution and fsync it before returning."""
    line = json.dumps(
        {
            "ev": event,
            "id": job.task_id,
            "attempt": job.attempt,
            "retry": job.retry_count,
            "pid": os.getpid(),
            "t": time.time(),
            "run": job.run_label,
            "node": job.node,
            **more,
        }
    )
    fd = _descriptor()
    os.write(fd, line.encode() + b"\n")
    os.fsync(fd)


def _descriptor() -> int:
    pid = os.getpid()
    with _lock:
        if pid not in _log:
            path = os.path.join(os.environ[LOG_DIR_ENV], f"exec-{pid}.jsonl")
            _log[pid] = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        return _log[pid]


class WfChaosNode(culex.QueuedJob):
    """A node: sleeps ``ms``, then succeeds, or fails as ``failing`` says: ``always`` (dead at
    once, no retry) or ``once`` (its first attempt that is not a stall raises; the retry
    succeeds). ``kill_ms`` >= 0: when its first attempt succeeds, it SIGKILLs its own
    runner that many ms after returning: between its report and the release of its
    downstreams, or during either (the line "ok" then says ``"kill": kill_ms``)."""

    queue = QUEUES[0]
    max_retries = 1
    run_label: str
    node: str
    ms: int = 0
    failing: str = NEVER
    kill_ms: int = -1

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(milliseconds=50)

    async def perform(self) -> dict[str, int]:
        record("start", self)
        if self.ms:
            await asyncio.sleep(self.ms / 1000)
        if self.failing == ALWAYS:
            record("raise", self)
            self.fail(f"{self.node}: this node always fails", retry=False)
        if self.failing == ONCE and self.retry_count == 0:
            record("raise", self)
            raise RuntimeError(f"{self.node}: the first attempt fails")
        if self.kill_ms >= 0 and self.attempt == 1:
            record("ok", self, kill=self.kill_ms)
            pid = os.getpid()
            threading.Timer(self.kill_ms / 1000, os.kill, (pid, signal.SIGKILL)).start()
        else:
            record("ok", self)
        # Who finished it: the ledger checks the result is its last attempt's (fencing).
        return {"pid": os.getpid(), "attempt": self.attempt}


class WfChaosNodeB(WfChaosNode):
    """The same node on the other queue (so releases cross slots)."""

    queue = QUEUES[1]


JOBS: tuple[type[culex.QueuedJob], ...] = (WfChaosNode, WfChaosNodeB)

# The share of the releaser's drains (of the passes that finish unfinished operations)
# that, having taken something, SIGKILL their own runner after step 1, 2 or 3 of theirs:
# with the entries (runs) taken and leased, partly applied. A kill from outside lands in
# those few milliseconds too rarely. Each is noted first in kills-<pid>.jsonl.
DRAIN_KILL_ENV = "CHAOS_WF_DRAIN_KILL"
FINISH_KILL_ENV = "CHAOS_WF_FINISH_KILL"
# Each such death costs the run the unfinished lease (30 s): a test's few operations left
# unfinished would otherwise wait on a long tail of them.
FINISH_KILLS_AT_MOST = 2


def _killing(steps: Procedure[Any], share: float, what: str) -> Procedure[Any]:
    """``steps`` as they are, but when armed (``share``) and its first reply took
    something, the process dies after its ``n``-th reply."""
    armed, kill_after, took, n = random.random() < share, random.randint(1, 3), False, 0
    try:
        step = next(steps)
        while True:
            reply = yield step
            n += 1
            if n == 1:
                took = any(reply) if isinstance(reply, list) else bool(reply)
            if armed and took and n == kill_after and _may_die(what):
                _die(what, n)
            step = steps.send(reply)
    except StopIteration as stop:
        return stop.value


def _may_die(what: str) -> bool:
    if what != "finish":
        return True
    directory = os.environ[LOG_DIR_ENV]
    done = 0
    for name in os.listdir(directory):
        if name.startswith("kills-"):
            with open(os.path.join(directory, name), "rb") as kills:
                done += kills.read().count(b'"what": "finish"')
    return done < FINISH_KILLS_AT_MOST


def _die(what: str, step: int) -> None:
    line = json.dumps(
        {"ev": "kill", "what": what, "step": step, "pid": os.getpid(), "t": time.time()}
    )
    fd = os.open(
        os.path.join(os.environ[LOG_DIR_ENV], f"kills-{os.getpid()}.jsonl"),
        os.O_WRONLY | os.O_APPEND | os.O_CREAT,
        0o644,
    )
    os.write(fd, line.encode() + b"\n")
    os.fsync(fd)
    os.kill(os.getpid(), signal.SIGKILL)


def _arm_releaser() -> None:
    drain_share = float(os.environ.get(DRAIN_KILL_ENV) or 0)
    finish_share = float(os.environ.get(FINISH_KILL_ENV) or 0)
    if not (drain_share or finish_share):
        return
    from culex.runner import releaser  # (it calls the two by the names it imported)
    from culex.workflows import release

    drain, finish = release.drain, release.finish_unfinished

    def killing_drain(*args: Any, **kwargs: Any) -> Procedure[int]:
        return _killing(drain(*args, **kwargs), drain_share, "drain")

    def killing_finish(*args: Any, **kwargs: Any) -> Procedure[int]:
        return _killing(finish(*args, **kwargs), finish_share, "finish")

    releaser.drain = killing_drain  # type: ignore[attr-defined]
    releaser.finish_unfinished = killing_finish  # type: ignore[attr-defined]


_arm_releaser()
FAN_IN = 50  # upstreams of each merge of the large workflow


def big_workflow(nodes: int) -> culex.Workflow:
    """Fan-ins: FAN_IN nodes, then a merge after them, over and over (both queues)."""
    wf = culex.Workflow("chaos-big")
    n = 0
    while n < nodes:
        members = []
        for _ in range(min(FAN_IN, nodes - n - 1)):
            job = (WfChaosNode if n % 2 else WfChaosNodeB)(run_label="big", node=f"n{n}")
            members.append(wf.add(job, name=f"n{n}"))
            n += 1
        wf.add(WfChaosNode(run_label="big", node=f"n{n}"), name=f"n{n}", after=members)
        n += 1
    return wf


def _produce_big(ids_file: str, nodes: int) -> None:
    wf = big_workflow(nodes)
    names = {node.task.id: node.name for node in wf.nodes.values()}
    described = [
        [node.task.queue, node.task.id, node.name, [names[up.id] for up in node.after]]
        for node in wf.nodes.values()
    ]
    with open(ids_file, "w") as out:
        json.dump(described, out)
    print("storing", flush=True)
    run = wf.enqueue()
    print(f"enqueued {run.id}", flush=True)


if __name__ == "__main__" and sys.argv[1:2] == ["big"]:
    _produce_big(sys.argv[2], int(sys.argv[3]))
