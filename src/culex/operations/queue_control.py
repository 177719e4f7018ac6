"""Steering a queue: pause and resume it, and limit how fast and how many of its tasks run.

A queue's limits are what its job classes declare (``rate_limit``, ``concurrency_limit``)
unless :func:`limit` set others at run time. Every check happens inside the claim
(claim.lua), with the server's clock, across all runners: a limited task waits in Redis,
never in a runner's slot, and never spends a retry (docs/flow-control.md).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from .. import config
from .._redis import commands, interventions
from .._redis.calls import Call, shown
from .._redis.keys import check_queue_name, queue_keys
from ..errors import ConfigurationError, short
from ..jobs.limits import Rate, concurrency, rate
from ..server.compatibility import warn_of_older
from ..server.procedures import Procedure, run_async, run_sync
from .known_queues import queue_names


@dataclass(frozen=True, slots=True)
class QueueControl:
    """A queue's state of flow control in Redis: paused, and the limits set at run time
    (None: what its job classes declare; ``"none"``: no limit, set by :func:`limit`)."""

    queue: str
    paused: bool
    rate: Rate | str | None
    concurrency: int | str | None
    group_rate: Rate | str | None = None
    group_concurrency: int | str | None = None


# -- pause and resume --------------------------------------------------------------------


def pause(queue: str, settings: config.Settings | None = None) -> QueueControl:
    """Pause ``queue``: it keeps accepting tasks, and no runner starts one until
    :func:`resume`. Tasks already running finish."""
    return _run_sync(queue, {"paused": "1"}, settings)


async def apause(queue: str, settings: config.Settings | None = None) -> QueueControl:
    """The async twin of :func:`pause`."""
    return await _run_async(queue, {"paused": "1"}, settings)


def resume(queue: str, settings: config.Settings | None = None) -> QueueControl:
    """Resume a paused queue; its runners start its tasks at once."""
    return _run_sync(queue, {"paused": ""}, settings)


async def aresume(queue: str, settings: config.Settings | None = None) -> QueueControl:
    """The async twin of :func:`resume`."""
    return await _run_async(queue, {"paused": ""}, settings)


# -- limits at run time -----------------------------------------------------------------

_UNCHANGED: Any = object()


def limit(
    queue: str,
    *,
    rate: Rate | str | None = _UNCHANGED,
    concurrency: int | None = _UNCHANGED,
    group_rate: Rate | str | None = _UNCHANGED,
    group_concurrency: int | None = _UNCHANGED,
    reset: bool = False,
    settings: config.Settings | None = None,
) -> QueueControl:
    """Change a queue's limits at run time, across every runner, from its next claim on:
    ``limit("emails", rate="50/s", concurrency=3)``, and per group of its tasks with
    ``group_rate=`` and ``group_concurrency=``. ``None`` lifts that limit (whatever the job
    classes declare); ``reset=True`` drops every limit set here, so the classes'
    declarations hold again. A limit not named stays as it is."""
    changes = _limit_changes(rate, concurrency, group_rate, group_concurrency, reset)
    return _run_sync(queue, changes, settings)


async def alimit(
    queue: str,
    *,
    rate: Rate | str | None = _UNCHANGED,
    concurrency: int | None = _UNCHANGED,
    group_rate: Rate | str | None = _UNCHANGED,
    group_concurrency: int | None = _UNCHANGED,
    reset: bool = False,
    settings: config.Settings | None = None,
) -> QueueControl:
    """The async twin of :func:`limit`."""
    changes = _limit_changes(rate, concurrency, group_rate, group_concurrency, reset)
    return await _run_async(queue, changes, settings)


def _limit_changes(
    rate_: object, concurrency_: object, group_rate: object, group_concurrency: object, reset: bool
) -> dict[str, str]:
    """The control hash's fields for these limits: "0" lifts one, "" drops what was set."""
    if not isinstance(reset, bool):
        raise ConfigurationError(f"reset must be True or False, got {short(reset)}")
    given = {
        "rate": rate_,
        "concurrency": concurrency_,
        "group_rate": group_rate,
        "group_concurrency": group_concurrency,
    }
    named = {field: value for field, value in given.items() if value is not _UNCHANGED}
    if reset:
        if named:
            raise ConfigurationError("limit(reset=True) takes no limit")
        return {field: "" for field in (*given, "rate_ms", "group_rate_ms")}
    if not named:
        raise ConfigurationError(
            "limit() needs rate=, concurrency=, group_rate=, group_concurrency= or reset=True"
        )
    changes: dict[str, str] = {}
    for field, value in named.items():
        if field.endswith("rate"):
            checked = None if value is None else rate(value, field)
            changes[field] = "0" if checked is None else str(checked.count)
            changes[f"{field}_ms"] = "0" if checked is None else str(checked.window_ms)
        else:
            changes[field] = "0" if value is None else str(concurrency(value, field))
    return changes


# -- reading -----------------------------------------------------------------------------


def controls(
    settings: config.Settings | None = None, queues: list[str] | None = None
) -> dict[str, QueueControl]:
    """Each queue's flow control (default: every known queue), in one round trip."""
    settings = settings or config.settings()
    return run_sync(_controls(settings, queues), settings.redis_url)


async def acontrols(
    settings: config.Settings | None = None, queues: list[str] | None = None
) -> dict[str, QueueControl]:
    """The async twin of :func:`controls`."""
    settings = settings or config.settings()
    return await run_async(_controls(settings, queues), settings.redis_url)


def _controls(
    settings: config.Settings, queues: list[str] | None
) -> Procedure[dict[str, QueueControl]]:
    names = yield from queue_names(settings.prefix, queues)
    if not names:
        return {}
    replies = yield [commands.read_control(queue_keys(settings.prefix, q)) for q in names]
    out = {}
    for q, reply in zip(names, replies, strict=True):
        out[q] = _control(q, reply if isinstance(reply, dict) else {})
    return out


# -- every limit in force, with where it comes from ---------------------------------------


@dataclass(frozen=True, slots=True)
class LimitInForce:
    """One limit of a queue as it holds now: ``name`` as the CLI says it ("rate",
    "concurrency", "group rate", "group concurrency"), ``value`` ("50/s", "3"; "none": no
    limit) and ``source``: "set at run time" (:func:`limit`), "declared by SendEmailJob"
    (the job class, as the runners that run the queue publish it in their records), "none",
    or "not known: no runner runs this queue" (no runner of this culex says what its job
    classes declare, and none was set at run time)."""

    name: str
    value: str
    source: str

    @property
    def set_or_declared(self) -> bool:
        """Whether it was set at run time or declared (what ``culex queues`` and the
        dashboard's queue page show): not "none", not "not known"."""
        return self.source == SET_AT_RUN_TIME or self.source.startswith("declared by ")


SET_AT_RUN_TIME: Final = "set at run time"
LIMIT_FIELDS: Final = ("rate", "concurrency", "group_rate", "group_concurrency")


def limits_in_force(
    settings: config.Settings | None = None, queues: list[str] | None = None
) -> dict[str, tuple[bool, list[LimitInForce]]]:
    """Each queue's pause flag and its four limits in force, with their sources (default:
    every known queue): the control hashes and the runner registry, in two round trips."""
    settings = settings or config.settings()
    return run_sync(_in_force(settings, queues), settings.redis_url)


async def alimits_in_force(
    settings: config.Settings | None = None, queues: list[str] | None = None
) -> dict[str, tuple[bool, list[LimitInForce]]]:
    """The async twin of :func:`limits_in_force`."""
    settings = settings or config.settings()
    return await run_async(_in_force(settings, queues), settings.redis_url)


def _in_force(
    settings: config.Settings, queues: list[str] | None
) -> Procedure[dict[str, tuple[bool, list[LimitInForce]]]]:
    states = yield from _controls(settings, queues)
    ids = yield commands.runner_ids(settings.prefix)
    records = (yield [commands.read_runner(settings.prefix, i) for i in ids]) if ids else []
    declared: dict[str, dict[str, Any]] = {}  # queue -> what its runners declare
    for record in sorted(
        (r for r in records if isinstance(r, dict) and "limits" in r),
        key=lambda r: r.get("started", ""),
    ):
        try:
            said = json.loads(record["limits"])
        except (ValueError, RecursionError):
            said = None
        for queue in record.get("queues", "").split(","):
            if queue and queue not in declared:
                found = said.get(queue) if isinstance(said, dict) else None
                declared[queue] = found if isinstance(found, dict) else {}
    return {
        queue: (state.paused, _sourced(state, declared.get(queue)))
        for queue, state in states.items()
    }


def _sourced(state: QueueControl, declared: dict[str, Any] | None) -> list[LimitInForce]:
    """The four limits of a queue: set at run time, else declared, else none."""
    out = []
    for field in LIMIT_FIELDS:
        name = field.replace("_", " ")
        set_now = getattr(state, field)
        by_class = (declared or {}).get(field)
        if set_now is not None:
            out.append(LimitInForce(name, str(set_now), SET_AT_RUN_TIME))
        elif isinstance(by_class, list) and len(by_class) == 2:
            value, job = (shown(str(part)) for part in by_class)
            out.append(LimitInForce(name, value, f"declared by {job}"))
        elif declared is None:
            out.append(LimitInForce(name, "none", "not known: no runner runs this queue"))
        else:
            out.append(LimitInForce(name, "none", "none"))
    return out


def _control(queue: str, fields: dict[str, str]) -> QueueControl:
    """A queue's control hash as read; a limit no culex writes (not a number, below 0) is
    its text as stored, never an error (it is what the pages and culex queues show)."""

    def set_rate(name: str) -> Rate | str | None:
        if fields.get(name) is None or fields.get(f"{name}_ms") is None:
            return None
        try:
            count, window = int(fields[name]), int(fields[f"{name}_ms"])
            return "none" if count == 0 else Rate(count, timedelta(milliseconds=window))
        except ValueError:  # (ConfigurationError is one too)
            return f"{fields[name]} per {fields[f'{name}_ms']} ms"

    def set_concurrency(name: str) -> int | str | None:
        if fields.get(name) is None:
            return None
        stored = fields[name]
        return (int(stored) or "none") if stored.isdigit() and stored.isascii() else stored

    return QueueControl(
        queue,
        fields.get("paused") == "1",
        set_rate("rate"),
        set_concurrency("concurrency"),
        set_rate("group_rate"),
        set_concurrency("group_concurrency"),
    )


def _change(
    queue: str, changes: dict[str, str], settings: config.Settings
) -> Procedure[QueueControl]:
    call = interventions.control(queue_keys(settings.prefix, check_queue_name(queue)), changes)
    return _changed(queue, call, changes, settings)


def _changed(
    queue: str, call: Call[dict[str, str]], changes: dict[str, str], settings: config.Settings
) -> Procedure[QueueControl]:
    """The change, then (for a pause or a limit) a warning when runners of an older culex
    run the queue: they ignore it (compatibility.py, one read of the registry)."""
    state = _control(queue, (yield call))
    if changes.get("paused") == "1":
        yield from warn_of_older(settings, [queue], "a pause: they go on starting its tasks")
    elif "paused" not in changes:
        yield from warn_of_older(
            settings, [queue], "limits set at run time: they start its tasks past them"
        )
    return state


def _run_sync(
    queue: str, changes: dict[str, str], settings: config.Settings | None
) -> QueueControl:
    settings = settings or config.settings()
    return run_sync(_change(queue, changes, settings), settings.redis_url)


async def _run_async(
    queue: str, changes: dict[str, str], settings: config.Settings | None
) -> QueueControl:
    settings = settings or config.settings()
    return await run_async(_change(queue, changes, settings), settings.redis_url)
