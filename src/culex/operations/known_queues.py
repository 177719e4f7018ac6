"""The known queues: every queue a task was enqueued to, as its registry (a set) names
them, read by the operations that look at every queue unless told which.

Light on purpose: queue_control.py, which the jobs import, reads it too."""

from __future__ import annotations

from typing import Any

from .._redis import commands
from .._redis.calls import Call
from .._redis.keys import queues_key
from ..server.procedures import Procedure, raised


def queue_names(prefix: str, queues: list[str] | None) -> Procedure[list[str]]:
    """The queues asked (``queues``), or for None every known queue, sorted (one read of
    the registry)."""
    if queues is not None:
        return queues
    names: list[str] = yield commands.known_queues(queues_key(prefix))
    return names


def names_and_now(prefix: str, queues: list[str] | None) -> Procedure[tuple[list[str], int]]:
    """The queues asked (or for None every known one, sorted) and the server's clock (ms),
    in one round trip."""
    calls: list[Call[Any]] = [commands.server_time()]
    if queues is None:
        calls.append(commands.known_queues(queues_key(prefix)))
    now, *known = raised((yield calls))
    return (queues if queues is not None else known[0]), now
