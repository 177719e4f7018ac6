"""A durable enqueue (the ``durable_enqueue`` setting): how a server confirms that a task
it stored is safe, asked once per server, and the call sent behind the writes that waits
for it (:func:`sent`). enqueue.py sends it with every enqueue; :func:`confirmed` with each
round trip of another write the setting covers (a workflow's enqueue, a signal).
"""

from __future__ import annotations

from typing import Any, TypeVar

from .. import config
from .._redis import commands
from .._redis.address import Address
from .._redis.calls import Call
from ..errors import ConfigurationError, ServerError, ServerUnavailable
from ..server.procedures import Procedure

T = TypeVar("T")

# How long a durable write waits for the server to confirm it (read when it is sent).
DURABLE_TIMEOUT_MS = 5000

# How each server (by redis_url) confirms a durable enqueue: asked once (_durability).
_durability_of: dict[str | None, str] = {}
config.on_change(_durability_of.clear)


Confirm = tuple[Call[bool], str]  # the call sent behind the writes; what it confirms, if not


def confirmation(
    settings: config.Settings, timeout_ms: int | None = None
) -> Procedure[Confirm | None]:
    """The procedure of what confirms a durable enqueue on this server: None (every reply comes
    after its fsync), or the call to send behind the writes, that waits up to
    ``timeout_ms`` (default DURABLE_TIMEOUT_MS)."""
    if timeout_ms is None:
        timeout_ms = DURABLE_TIMEOUT_MS
    way = _durability_of.get(settings.redis_url)
    if way is None:
        way = _durability_of[settings.redis_url] = yield from _durability(settings)
    if way == "always":
        return None
    if way == "waitaof":
        return commands.wait_fsync(timeout_ms), "the server did not fsync the write"
    return commands.wait_replica(timeout_ms), "no replica confirmed the write"


def _durability(settings: config.Settings) -> Procedure[str]:
    """Ask the server, in one round trip, how it can confirm that a write is safe:
    "always" (appendonly with appendfsync always: it replies only after the fsync),
    "waitaof" (WAITAOF, Redis 7.2+ and Valkey, with appendonly on) or "replica" (WAIT 1).
    Behind sentinels or in a cluster it is always "replica": a failover promotes a
    replica, and a write that is only on the dead master's disk is not on it.
    Raises ConfigurationError, saying what to change, when it can do none of them: before
    any task is stored."""
    waitaof, appendonly, appendfsync, replicas, cluster = yield [
        commands.has_wait_fsync(),
        commands.config_get("appendonly"),
        commands.config_get("appendfsync"),
        commands.connected_replicas(),
        commands.cluster_enabled(),
    ]
    kind = Address.parse(settings.redis_url).kind if settings.redis_url else "server"
    if kind != "server" or cluster is True:
        return "replica"
    readable = not isinstance(appendonly, ServerError)  # CONFIG is often off on managed servers
    waitaof = waitaof is True
    replicas = replicas if isinstance(replicas, int) else 0
    if appendonly == "yes" and appendfsync == "always":
        return "always"
    if waitaof and (appendonly == "yes" or not readable):
        return "waitaof"
    if replicas >= 1:
        return "replica"
    if not readable:
        found = "CONFIG GET is refused, so its appendfsync cannot be read"
    else:
        found = f"appendonly is {appendonly}, appendfsync {appendfsync}"
    missing = "" if waitaof else "; it has no WAITAOF (Redis before 7.2)"
    where = Address.parse(settings.redis_url).shown if settings.redis_url else "the embedded server"
    raise ConfigurationError(
        f"durable_enqueue: the server at {where} cannot confirm that a task is on disk "
        f"({found}{missing}; no replica is connected). Turn on appendonly with appendfsync "
        "always (CONFIG SET appendonly yes, CONFIG SET appendfsync always), or appendonly "
        "alone on a server with WAITAOF, or connect a replica; or set durable_enqueue=False"
    )


def sent(
    calls: list[Call[Any]], confirm: Confirm | None, refused: str = "raise"
) -> Procedure[list[Any]]:
    """Send ``calls`` in one round trip, with the durability check behind them if
    ``confirm`` names one; the value is their replies. A refused call raises (with
    ``refused="return"``, its ServerError is its reply); a failed check always raises,
    ServerUnavailable (what a producer sends again, with the same id: the write may be
    stored) when the server could not be reached or confirmed nothing in time."""
    replies: list[Any]
    if confirm is None:
        replies = yield calls
    else:
        check, unconfirmed = confirm
        replies = yield [*calls, check]
        confirmed = replies.pop()
        if isinstance(confirmed, ServerError):
            failed = ServerUnavailable if isinstance(confirmed, ServerUnavailable) else ServerError
            raise failed(f"durable_enqueue: the check behind the write failed: {confirmed}")
        if not confirmed:
            raise ServerUnavailable(f"durable_enqueue: {unconfirmed} in time")
    if refused == "return":
        return replies
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def confirmed(procedure: Procedure[T]) -> Procedure[T]:
    """``procedure``; with ``durable_enqueue``, each of its round trips carries the check
    behind its calls (sent to every node they wrote to), so that what it wrote, once
    acknowledged, survives its master as an enqueue does. A call refused raises, as it
    would alone; a failed check raises as :func:`sent` says."""
    settings = config.settings()
    confirm = (yield from confirmation(settings)) if settings.durable_enqueue else None
    if confirm is None:
        return (yield from procedure)
    try:
        step = next(procedure)
        while True:
            if isinstance(step, list):
                step = procedure.send((yield from sent(step, confirm, "return")))
            else:
                step = procedure.send((yield from sent([step], confirm))[0])
    except StopIteration as done:
        value: T = done.value
        return value
