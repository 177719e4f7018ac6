"""The queues: how many tasks each holds in each state, a page of the known ones by name,
which hold tasks of a state, and how long the task that runs next in each has waited
(which queues are known: known_queues.py).

Each read is a procedure, with a blocking function and its ``a*`` async twin; all are found
in :mod:`culex.inspection` too."""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import Any

from .. import config
from .._redis import commands
from .._redis.calls import Call
from .._redis.keys import queue_keys
from ..server.procedures import Procedure, raised, run_async, run_sync
from .browsing import check_limit, check_state, state_sets
from .known_queues import queue_names


def queue_counts(
    settings: config.Settings | None = None, queues: list[str] | None = None
) -> dict[str, dict[str, int]]:
    """How many tasks each queue holds in each state (default: every known queue)."""
    settings = settings or config.settings()
    return run_sync(_counts(settings, queues), settings.redis_url)


async def aqueue_counts(
    settings: config.Settings | None = None, queues: list[str] | None = None
) -> dict[str, dict[str, int]]:
    """The async twin of :func:`queue_counts`."""
    settings = settings or config.settings()
    return await run_async(_counts(settings, queues), settings.redis_url)


def _counts(
    settings: config.Settings, queues: list[str] | None
) -> Procedure[dict[str, dict[str, int]]]:
    names = yield from queue_names(settings.prefix, queues)
    calls = [call for q in names for call in commands.count(queue_keys(settings.prefix, q))]
    results = (yield calls) if calls else []
    size = commands.COUNT_CALLS
    return {q: commands.sizes(results[i * size : (i + 1) * size]) for i, q in enumerate(names)}


@dataclass(frozen=True)
class QueuePage:
    """A page of the known queues, by name (:func:`queue_page`)."""

    names: list[str]
    total: int  # how many queues are known
    first: int  # the place of the page's first queue among them all (0: the first)
    next_after: str | None  # the ``after`` of the next page; None: this is the last
    previous_after: str | None  # the ``after`` of the page before ("": the start; None: none)


def queue_page(
    settings: config.Settings | None = None, *, after: str | None = None, limit: int = 50
) -> QueuePage:
    """``limit`` (1..1000) known queues by name, from the first after ``after`` (None: the
    start). The registry is a set, in no order: it is read whole (SMEMBERS) and sorted here,
    one round trip; at 100,000 queues that is ~70 ms (bench/dashboard.py), and every read
    of the queues themselves stays bounded by ``limit``."""
    settings = settings or config.settings()
    return run_sync(_queue_page(settings, after, limit), settings.redis_url)


async def aqueue_page(
    settings: config.Settings | None = None, *, after: str | None = None, limit: int = 50
) -> QueuePage:
    """The async twin of :func:`queue_page`."""
    settings = settings or config.settings()
    return await run_async(_queue_page(settings, after, limit), settings.redis_url)


MAX_QUEUE_PAGE = 1000


def _queue_page(settings: config.Settings, after: str | None, limit: int) -> Procedure[QueuePage]:
    if after is not None and not isinstance(after, str):
        raise TypeError(f"after must be a queue name or None, got {type(after).__name__}")
    check_limit(limit, MAX_QUEUE_PAGE)
    names = yield from queue_names(settings.prefix, None)
    start = 0 if after is None else bisect.bisect_right(names, after)
    shown = names[start : start + limit]
    more = start + limit < len(names)
    before = None if start == 0 else "" if start <= limit else names[start - limit - 1]
    return QueuePage(shown, len(names), start, shown[-1] if more and shown else None, before)


# Queues whose sets are sized in one round trip by queues_holding (and metrics): a batch.
BATCH = 1000


def queues_holding(
    state: str, settings: config.Settings | None = None, *, limit: int = 500
) -> dict[str, int]:
    """The first ``limit`` queues by name that hold a task in ``state``, with how many: the
    sizes of every known queue's sets of that state, read BATCH queues a round trip (one
    ZCARD each, not the five of :func:`queue_counts`), until ``limit`` are found."""
    settings = settings or config.settings()
    return run_sync(_holding(settings, state, limit), settings.redis_url)


async def aqueues_holding(
    state: str, settings: config.Settings | None = None, *, limit: int = 500
) -> dict[str, int]:
    """The async twin of :func:`queues_holding`."""
    settings = settings or config.settings()
    return await run_async(_holding(settings, state, limit), settings.redis_url)


def _holding(settings: config.Settings, state: str, limit: int) -> Procedure[dict[str, int]]:
    check_state(state)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise ValueError(f"limit must be a whole number from 1, got {limit!r}")
    names = yield from queue_names(settings.prefix, None)
    found: dict[str, int] = {}
    for first in range(0, len(names), BATCH):
        batch = names[first : first + BATCH]
        sets = [state_sets(queue_keys(settings.prefix, q), state) for q in batch]
        sizes = iter(raised((yield [commands.set_size(key) for keys in sets for key in keys])))
        for q, keys in zip(batch, sets, strict=True):
            held = sum(next(sizes) for _ in keys)
            if held:
                found[q] = held
                if len(found) == limit:
                    return found
    return found


def queue_latency(
    settings: config.Settings | None = None, queues: list[str] | None = None
) -> dict[str, float]:
    """How long the task that runs next in each queue has waited since it was ready, in
    seconds (0 when none waits), by the server's clock: how far behind its runners are.
    With one priority that is the oldest ready task; with several, it is the oldest of the
    highest priority waiting (a low-priority task may have waited longer)."""
    settings = settings or config.settings()
    return run_sync(_latency(settings, queues), settings.redis_url)


async def aqueue_latency(
    settings: config.Settings | None = None, queues: list[str] | None = None
) -> dict[str, float]:
    """The async twin of :func:`queue_latency`."""
    settings = settings or config.settings()
    return await run_async(_latency(settings, queues), settings.redis_url)


def _latency(settings: config.Settings, queues: list[str] | None) -> Procedure[dict[str, float]]:
    names = yield from queue_names(settings.prefix, queues)
    if not names:
        return {}
    calls: list[Call[Any]] = [commands.server_time()]
    for q in names:
        calls += commands.oldest_waiting(queue_keys(settings.prefix, q))
    now, *heads = yield calls
    latency = {}
    for i, q in enumerate(names):
        ready = commands.earliest(heads[i * 2 : i * 2 + 2])
        latency[q] = 0.0 if ready is None else max(0.0, (now - ready) / 1000)
    return latency
