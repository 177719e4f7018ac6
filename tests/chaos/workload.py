"""The chaos suite's workload: a producer, the drain, and where the figures go."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import culex
from culex._redis.keys import queue_keys

from .ledger import Client, Ledger, key_bytes

RESULTS = Path(__file__).resolve().parents[2] / "bench" / "results" / "chaos"
GIVE_UP_AFTER = 60.0  # seconds one enqueue may keep failing before the producer gives up


class Producer(threading.Thread):
    """Enqueues tasks with client-made ids at a steady rate, each one until acknowledged.

    Client-made ids make enqueue idempotent: after an error (the reply may have been lost
    while the write happened) the same id is sent again, so nothing is duplicated.
    """

    def __init__(
        self,
        ledger: Ledger,
        tasks: Sequence[tuple[str, culex.QueuedJob, str]],
        rate: float,
    ) -> None:
        super().__init__(name="chaos-producer", daemon=True)
        self.ledger = ledger
        self.tasks = tasks
        self.rate = rate
        self.errors = 0  # clear culex errors while the server was away (retried)
        self.unclear: list[str] = []  # anything else enqueue raised
        self.longest_stall = 0.0  # the longest time one id took to be acknowledged
        self.gave_up: list[str] = []
        self._halt = threading.Event()

    def run(self) -> None:
        began = time.monotonic()
        for n, (task_id, job, expect) in enumerate(self.tasks):
            pause = began + n / self.rate - time.monotonic()
            if self._halt.wait(max(0.0, pause)):
                return
            self._enqueue(task_id, job, expect)

    def _enqueue(self, task_id: str, job: culex.QueuedJob, expect: str) -> None:
        self.ledger.sending(task_id, job.queue, expect)
        first = time.monotonic()
        while not self._halt.is_set():
            try:
                job.enqueue(id=task_id)
            except culex.CulexError:
                self.errors += 1
            except Exception as exc:  # enqueue must raise culex errors only
                self.unclear.append(f"{type(exc).__module__}.{type(exc).__name__}: {exc}")
            else:
                self.ledger.acknowledged(task_id)
                self.longest_stall = max(self.longest_stall, time.monotonic() - first)
                return
            if time.monotonic() - first > GIVE_UP_AFTER:
                self.gave_up.append(task_id)
                return
            self._halt.wait(0.05)

    def stop(self) -> None:
        self._halt.set()
        self.join(timeout=10)

    def figures(self) -> dict[str, Any]:
        return {
            "enqueue_errors_retried": self.errors,
            "enqueue_unclear_errors": len(self.unclear),
            "enqueue_longest_stall_s": round(self.longest_stall, 3),
        }


def drain(
    r: Client,
    ledger: Ledger,
    timeout: float,
    tick: Callable[[], object] = lambda: None,
    prefix: str = "culex",
) -> float:
    """Wait until every acknowledged task is succeeded or dead; returns the seconds it took.

    ``tick`` runs on every round (e.g. to restart runners that died). On timeout it
    returns anyway: the check then names what did not finish.
    """
    began = time.monotonic()
    left = set(ledger.acked)
    while left and time.monotonic() - began < timeout:
        tick()
        ids = sorted(left)
        pipe = r.pipeline(transaction=False)
        for task_id in ids:
            queue, _ = ledger.sent[task_id]
            pipe.hget(key_bytes(queue_keys(prefix, queue).task(task_id)), "state")
        for task_id, state in zip(ids, pipe.execute(), strict=True):
            if state in (b"succeeded", b"dead"):
                left.discard(task_id)
        if left:
            time.sleep(0.2)
    return time.monotonic() - began


def publish(name: str, figures: dict[str, Any]) -> None:
    """Print a scenario's figures (seen with ``pytest -s``) and keep them as JSON."""
    figures = {"scenario": name, "recorded_at": time.strftime("%Y-%m-%dT%H:%M:%S"), **figures}
    text = json.dumps(figures, indent=2, sort_keys=False)
    print(f"\n== chaos: {name} ==\n{text}")
    RESULTS.mkdir(parents=True, exist_ok=True)
    (RESULTS / f"{name}.json").write_text(text + "\n")
