"""The jobs of the workflow outage test (``culex run /abs/path/workflow_outage_jobs.py``):
the workflow chaos test's nodes (workflow_jobs), and durable nodes.

A durable node runs the durable chaos test's steps (durable_chaos_jobs: STEPS steps, each
handed the value of the step before, each execution logged to steps-<pid>.jsonl) with its
sleep after SLEEP_AFTER of them, and logs its attempts as every workflow node does
(workflow_jobs.record; an attempt that ends in its sleep logs "suspended").
"""

from __future__ import annotations

import importlib
import os

import culex
from culex.errors import AttemptOver

try:
    from . import durable_chaos_jobs, workflow_jobs
except ImportError:  # (loaded by path in a runner: its folder is on sys.path)
    durable_chaos_jobs = importlib.import_module("durable_chaos_jobs")
    workflow_jobs = importlib.import_module("workflow_jobs")

STEPS = durable_chaos_jobs.STEPS


class WfDurableNode(workflow_jobs.WfChaosNode):
    """A node of STEPS durable steps of ``ms`` each, and a sleep; it always succeeds."""

    max_retries = 1

    async def perform(self) -> dict[str, int]:
        workflow_jobs.record("start", self)
        value = ""
        for k in range(STEPS):
            if k == durable_chaos_jobs.SLEEP_AFTER:
                try:
                    await self.asleep(durable_chaos_jobs.NAP)
                except AttemptOver as over:  # ("suspended"; "stale": not its attempt's)
                    workflow_jobs.record(over.why, self)
                    raise
            value = await self.astep(
                f"s{k}", durable_chaos_jobs.awork, self.task_id, k, self.attempt, value, self.ms
            )
        workflow_jobs.record("ok", self)
        return {"pid": os.getpid(), "attempt": self.attempt}


class WfDurableNodeB(WfDurableNode):
    """The same node on the other queue."""

    queue = workflow_jobs.QUEUES[1]


JOBS: tuple[type[culex.QueuedJob], ...] = (*workflow_jobs.JOBS, WfDurableNode, WfDurableNodeB)
