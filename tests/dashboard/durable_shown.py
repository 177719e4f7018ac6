"""A durable job for the tests of what the CLI and the dashboard show of durable tasks (and
how they send signals): a step, a sleep, a receive that times out at once, then a wait for
"approved" (for ever, or ``wait_s``), and a last step. Its class name is its own: a name
used twice across test modules breaks the session's registry."""

from __future__ import annotations

import contextlib

import culex

QUEUE = "durable-shown"


def asked(who: str) -> str:
    return f"asked {who}"


class ShownApprovalJob(culex.QueuedJob):
    queue = QUEUE
    who: str = "ops"
    wait_s: float | None = None

    def perform(self) -> str:
        self.step("ask", asked, self.who)
        self.sleep(0.01)
        with contextlib.suppress(culex.SignalTimeout):  # (no signal yet: it times out)
            self.receive("early", timeout=0)
        by = self.receive("approved", timeout=self.wait_s)
        self.step("welcome", asked, "welcome")
        return f"approved by {by['by']}"


def runner() -> culex.Runner:
    return culex.Runner(run_from=[QUEUE])
