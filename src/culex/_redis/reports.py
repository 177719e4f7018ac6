"""What a runner reports of an attempt: its end (complete, fail, retry_later, release) and
its progress while it runs. A report names the attempt, and one whose attempt no longer
holds the task is refused (stale). Each builds a :class:`~culex._redis.calls.Call`.
"""

from __future__ import annotations

from collections.abc import Sequence

from . import scripts
from .calls import Arg, Call, text
from .keys import QueueKeys


def _accepted(reply: int) -> bool:
    return reply == 1


def _parse_refused(reply: list[bytes]) -> list[tuple[str, int]]:
    return [(text(reply[i]), int(reply[i + 1])) for i in range(0, len(reply), 2)]


def complete(
    keys: QueueKeys, done: Sequence[tuple[str, int, str, int]], *, events: bool = False
) -> Call[list[tuple[str, int]]]:
    """Store results of (id, attempt, result JSON, ms to keep the hash); the reply lists
    the refused reports (stale) as (id, attempt): a batch may hold two attempts of one
    task. ``events``: each success's event goes to the queue's stream."""
    args: list[Arg] = []
    for quadruple in done:
        args += quadruple
    return Call(
        (
            keys.pending,
            keys.task_prefix,
            keys.periodic_prefix,
            keys.done_prefix,
            keys.stats_prefix,
            keys.control,
            keys.signal,
            keys.dedupe,
            keys.groups_prefix,
            keys.cancels,
            keys.succeeded,
            *keys.events_if(events),
        ),
        tuple(args),
        _parse_refused,
        scripts.COMPLETE,
    )


def _parse_fail(reply: bytes | int) -> str | None:
    return None if isinstance(reply, int) else text(reply)  # (fail.lua: 0 when refused)


def fail(
    keys: QueueKeys,
    task_id: str,
    attempt: int,
    error: str,
    *,
    retry_delay_ms: int | None,
    dead_ttl_ms: int,
    dead_max: int,
    traceback: str | None = None,
    errors_kept: int = 5,
    events: bool = False,
) -> Call[str | None]:
    """ "scheduled" or "dead"; None when refused (stale attempt). No delay: dead; and dead
    with the request's reason when the task's cancel was requested (cancel). With a
    ``traceback`` ("" for none), the attempt joins the task's ``errors``, which keeps the
    newest ``errors_kept`` (culex.jobs.failures). ``events``: the attempt's failed (or dead)
    event goes to the queue's stream."""
    return Call(
        (
            keys.task(task_id),
            keys.pending,
            keys.scheduled,
            keys.dead,
            keys.periodic_prefix,
            keys.done(task_id),
            keys.stats_prefix,
            keys.control,
            keys.signal,
            keys.dedupe,
            keys.groups_prefix,
            keys.cancels,
            *keys.events_if(events),
        ),
        (
            task_id,
            attempt,
            error,
            -1 if retry_delay_ms is None else retry_delay_ms,
            dead_ttl_ms,
            dead_max,
            *(() if traceback is None else (traceback, errors_kept)),
        ),
        _parse_fail,
        scripts.FAIL,
    )


def release(keys: QueueKeys, task_id: str, attempt: int, delay_ms: int = 0) -> Call[bool]:
    """Hand a pending task back to waiting without counting a failure; with ``delay_ms``,
    to scheduled, due that much later."""
    named = (keys.task(task_id), keys.pending, keys.waiting, keys.signal, keys.groups_prefix)
    if delay_ms:
        return Call(
            (*named, keys.scheduled), (task_id, attempt, delay_ms), _accepted, scripts.RELEASE
        )
    return Call(named, (task_id, attempt), _accepted, scripts.RELEASE)


def retry_later(
    keys: QueueKeys,
    task_id: str,
    attempt: int,
    delay_ms: int,
    *,
    dead_ttl_ms: int,
    dead_max: int,
    events: bool = False,
) -> Call[bool]:
    """Put a pending task in scheduled, due after ``delay_ms``, without counting a failed
    attempt (culex.RetryLater); one whose cancel was requested goes to dead instead, as
    fail sends it (``dead_ttl_ms``, ``dead_max``). False when refused (stale attempt, or
    not pending)."""
    return Call(
        (
            keys.task(task_id),
            keys.pending,
            keys.scheduled,
            keys.control,
            keys.signal,
            keys.groups_prefix,
            keys.dead,
            keys.done(task_id),
            keys.periodic_prefix,
            keys.stats_prefix,
            keys.dedupe,
            keys.cancels,
            *keys.events_if(events),
        ),
        (task_id, attempt, delay_ms, dead_ttl_ms, dead_max),
        lambda reply: reply in (b"scheduled", "scheduled", b"dead", "dead"),
        scripts.RETRY_LATER,
    )


def log(keys: QueueKeys, task_id: str, attempt: int, lines: Sequence[str]) -> Call[int]:
    """Keep an attempt's log lines (each a JSON object, culex.jobs.task_logs) with its task;
    the reply is how many the task keeps now, 0 when refused (another attempt holds it)."""
    return Call((keys.task(task_id),), (attempt, *lines), int, scripts.LOG)


def progress(
    keys: QueueKeys, task_id: str, attempt: int, fraction: float, message: str
) -> Call[bool]:
    """Store a running attempt's progress on its task; False when refused (the attempt
    no longer holds the task: its lease was lost, or it has ended)."""
    return Call(
        (keys.task(task_id),), (attempt, repr(fraction), message), _accepted, scripts.PROGRESS
    )
