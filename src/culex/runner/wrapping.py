"""Middleware on the runner's side (culex.middleware): the stored params opened, the
attempt run inside each ``around_perform``, and ``on_failure`` / ``on_dead`` told how it
ended. A runner and culex.testing's drain both go through here.

The middleware is the process's (``culex.configure(middleware=...)``), read per task:
with none, each step is a look at a cached None.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import TYPE_CHECKING, Any

from .. import config
from ..errors import TaskFailed
from ..middleware.hooks import ParamsUnreadable

if TYPE_CHECKING:
    from .._redis.claims import Claimed
    from ..jobs.job import Job
    from ..middleware.hooks import Middleware
    from .outcome import Outcome

logger = logging.getLogger("culex")


class Plan:
    """The process's middleware, and those of it that do something at each step (their
    class overrides the hook): asked per task, made once per change of the settings."""

    __slots__ = ("aaround", "all", "around", "openers")

    def __init__(self, middleware: tuple[Middleware, ...]) -> None:
        self.all = middleware
        self.around = _overriding(middleware, "around_perform")
        self.aaround = _overriding(middleware, "aaround_perform")
        self.openers = _overriding(middleware, "open_params")[::-1]  # (the last first)


def _overriding(middleware: tuple[Middleware, ...], hook: str) -> tuple[Middleware, ...]:
    from ..middleware.hooks import Middleware

    return tuple(m for m in middleware if getattr(type(m), hook) is not getattr(Middleware, hook))


def configured() -> Plan | None:
    """The process's middleware (None for none: one look at a list per task)."""
    if _known:
        return _known[0]
    middleware = config.settings().middleware
    _known.append(Plan(middleware) if middleware else None)
    return _known[0]


_known: list[Plan | None] = []
config.on_change(_known.clear)


def opened_params(claimed: Claimed, openers: tuple[Middleware, ...]) -> bytes:
    """A task's stored params as its job decodes them: each middleware's open_params, the
    last first (``openers`` is in that order). Raises ParamsUnreadable, with what a
    middleware raised as its cause."""
    try:
        params = claimed.params.decode()
        for each in openers:
            params = each.open_params(claimed.id, params)
    except ParamsUnreadable:
        raise
    except Exception as exc:
        raise ParamsUnreadable(
            f"middleware did not open the params: {type(exc).__name__}: {exc}"
        ) from exc
    return params.encode()


def around_sync(
    middleware: tuple[Middleware, ...], run: Callable[[Job], Any]
) -> Callable[[Job], Any]:
    """``run`` inside each middleware's around_perform, the first outermost."""

    def step(job: Job, index: int) -> Any:
        if index == len(middleware):
            return run(job)
        return middleware[index].around_perform(job, lambda: step(job, index + 1))

    return lambda job: step(job, 0)


def around_async(
    middleware: tuple[Middleware, ...], job: Job, run: Callable[[], Awaitable[Any]]
) -> Awaitable[Any]:
    """``run()`` inside each middleware's aaround_perform, the first outermost."""

    def step(index: int) -> Awaitable[Any]:
        if index == len(middleware):
            return run()
        return middleware[index].aaround_perform(job, lambda: step(index + 1))

    return step(0)


async def tell_ended(outcome: Outcome, job: Job | None) -> None:
    """Tell the middleware how an attempt ended: on_failure when it failed (not for a
    task the runner could not build: ``job`` None), on_dead when the task goes to dead.
    What a hook raises is logged, never raised."""
    plan = configured()
    if plan is None or outcome.error is None or outcome.over or outcome.later_ms is not None:
        return
    claimed = outcome.claimed
    error = outcome.exception or TaskFailed(claimed.id, outcome.error)
    dead = outcome.retry_delay_ms is None
    for each in plan.all:
        if job is not None:
            await _told(each.on_failure, claimed.queue, claimed.id, job, error, not dead)
        if dead:
            await _told(each.on_dead, claimed.queue, claimed.id, job, error)


async def tell_buried(queue: str, buried: Iterable[tuple[str, str]]) -> None:
    """Tell the middleware of tasks of ``queue`` that a script of this runner buried with
    no attempt of theirs ending here, as (id, last_error) pairs: a claim's (expired before
    it started, cancelled, broken) and a reclaim's (its lease expired past max_stalls).
    on_dead gets no job, and a :class:`culex.TaskFailed` with the reason; what it raises
    is logged."""
    plan = configured()
    if plan is None:
        return
    for task_id, reason in buried:
        error = TaskFailed(task_id, reason)
        for each in plan.all:
            await _told(each.on_dead, queue, task_id, None, error)


async def _told(hook: Callable[..., Any], queue: str, task_id: str, *args: Any) -> None:
    try:
        said = hook(*args)
        if inspect.isawaitable(said):
            await said
    except Exception:
        logger.exception(
            "middleware %s raised for task %s<%s> (the task's outcome stands)",
            getattr(hook, "__qualname__", hook),
            queue,
            task_id,
        )
