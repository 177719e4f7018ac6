"""The calls of durable tasks: a step's record, a sleep or a wait for a signal (the
attempt suspends), and a signal sent to a task. Each builds a
:class:`~culex._redis.calls.Call`; no I/O here (the job's side is culex.jobs.steps).
"""

from __future__ import annotations

from typing import Any

from . import scripts
from .calls import Call, text
from .keys import QueueKeys

# The limits of a durable task, stated here and enforced by the scripts it sends them to.
MAX_STEPS = 1_000  # records a task keeps: steps, sleeps and received signals
MAX_STEP_BYTES = 1 << 20  # the largest step result (1 MiB of JSON)
MAX_TASK_BYTES = 16 << 20  # every step result of a task together (16 MiB)
MAX_SIGNAL_BYTES = 1 << 20  # the largest signal value (1 MiB of JSON)
MAX_KEPT_SIGNALS = 100  # signals a task keeps, sent and not received yet (signal.lua's default)
MAX_KEPT_BYTES = 4 << 20  # their values together (4 MiB: signal.lua's default)
MAX_NAME = 200  # bytes of a step's or a signal's name


def _reply(reply: Any) -> tuple[str, ...]:
    return tuple(text(part) if not isinstance(part, int) else str(part) for part in reply)


def step(
    keys: QueueKeys,
    task_id: str,
    attempt: int,
    index: int,
    name: str,
    result: str,
    *,
    max_steps: int,
    max_step_bytes: int,
    max_task_bytes: int,
) -> Call[tuple[str, ...]]:
    """Record step ``index`` of a task's attempt: ("recorded",), ("stale",), ("conflict",
    record JSON) or ("limit", "steps" | "step" | "task")."""
    return Call(
        (keys.task(task_id),),
        (attempt, index, name, result, max_steps, max_step_bytes, max_task_bytes),
        _reply,
        scripts.STEP,
    )


def suspend(
    keys: QueueKeys,
    task_id: str,
    attempt: int,
    index: int,
    kind: str,
    name: str,
    delay_ms: int | None,
    *,
    max_steps: int,
) -> Call[tuple[str, ...]]:
    """Sleep (``kind`` "sleep") or wait for signal ``name`` ("receive"; ``delay_ms`` None:
    for ever): ("suspended", until), ("signal", value), ("timeout",), ("stale",),
    ("cancel",), ("conflict", record) or ("limit", "steps")."""
    return Call(
        (
            keys.task(task_id),
            keys.pending,
            keys.scheduled,
            keys.control,
            keys.signal,
            keys.groups_prefix,
        ),
        (attempt, index, kind, name, "" if delay_ms is None else delay_ms, max_steps),
        _reply,
        scripts.SUSPEND,
    )


def signal(
    keys: QueueKeys,
    task_id: str,
    name: str,
    value: str,
    *,
    max_bytes: int,
    max_kept: int,
    max_kept_bytes: int,
    keep: bool,
) -> Call[tuple[str, ...]]:
    """Send signal ``name`` to a task: (outcome, the task's state, the signal it awaits;
    "" for none). The outcome: "delivered", "kept", "full" (its kept signals at a bound:
    nothing kept), "skipped" (``keep`` False and the task does not await that name:
    nothing kept), "ended" or "unknown"."""
    return Call(
        (keys.task(task_id), keys.scheduled, keys.waiting, keys.signal, keys.groups_prefix),
        (name, value, max_bytes, max_kept, max_kept_bytes, "keep" if keep else "deliver"),
        _reply,
        scripts.SIGNAL,
    )
