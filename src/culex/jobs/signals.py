"""A signal sent to a durable task (``Task.signal``, docs/durable.md#signals): its name
and value checked before anything is sent (the value is JSON that holds it as given), the
call, and its reply: what became of the signal, and what the task awaits."""

from __future__ import annotations

import json
from typing import Any

from .._redis import steps as durable
from .._redis.keys import QueueKeys
from ..errors import short
from ..server.procedures import Procedure, one_call
from . import durability
from .codecs import is_json


class SignalReply(str):
    """What ``task.signal(...)`` did, as the str it always was: "delivered", "kept",
    "skipped" (``keep=False``, and the task does not await that name: nothing kept),
    "ended" or "unknown"; with what the call found: ``state``, the task's state (None: no
    task), and ``awaiting``, the signal it waits for (None: none; a task that awaits a
    signal is in scheduled until it comes, and takes it when it runs next)."""

    state: str | None
    awaiting: str | None

    def __new__(cls, outcome: str, state: str = "", awaiting: str = "") -> SignalReply:
        reply = super().__new__(cls, outcome)
        reply.state = state or None
        reply.awaiting = awaiting or None
        return reply


def signal_procedure(
    keys: QueueKeys, task_id: str, name: str, value: Any, keep: bool
) -> Procedure[SignalReply]:
    """Send signal ``name`` with ``value`` to the task; a ValueError or TypeError, nothing
    sent, for a name or a value culex takes not, or when the task keeps as many signals
    as it may."""
    if not isinstance(name, str) or not 0 < len(name.encode()) <= durable.MAX_NAME:
        raise ValueError(f"signal: a name is a str of 1 to 200 bytes, got {short(name)}")
    if not is_json(value):  # (a tuple comes back a list, a dict's key 1 as "1", or twice)
        raise TypeError(
            "signal: the value must be JSON as given (str, int, a finite float, "
            f"bool, None, list, dict with str keys), got {short(value)}"
        )
    text = json.dumps(value, ensure_ascii=False)
    if len(text.encode()) > durable.MAX_SIGNAL_BYTES:
        raise ValueError(f"signal: the value is larger than {durable.MAX_SIGNAL_BYTES:,} bytes")
    call = durable.signal(
        keys,
        task_id,
        name,
        text,
        max_bytes=durable.MAX_SIGNAL_BYTES,
        max_kept=durable.MAX_KEPT_SIGNALS,
        max_kept_bytes=durable.MAX_KEPT_BYTES,
        keep=keep,
    )
    # (durable_enqueue: confirmed as an enqueue is)
    return durability.confirmed(one_call(call, lambda reply: _replied(reply, name)))


def _replied(reply: tuple[str, ...], name: str) -> SignalReply:
    if reply[0] == "full":
        raise ValueError(
            f"signal {name!r}: a task keeps at most {durable.MAX_KEPT_SIGNALS:,} signals "
            f"that its receives have not taken, {durable.MAX_KEPT_BYTES:,} bytes of values "
            "together: nothing kept (a signal it awaits is always taken)"
        )
    return SignalReply(*reply[:3])
