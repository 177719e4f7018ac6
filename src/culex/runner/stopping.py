"""A runner's stop: its helper loops end, its running tasks finish or go back to waiting.

A stop hands back what is still running when the grace period ends. Python cannot end a
thread, so a sync perform still running then would go on beside the run another runner
starts: a runner that owns its process (Runner.run) hands its task back and ends the
process at once; one on a loop of the application's own (Runner.arun) does not hand such
a task back but waits for it (docs/reliability.md, "Graceful stop").
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable
from typing import Any, NoReturn

from .. import logs
from .._redis.claims import Claimed
from . import isolation
from .backoff import Backoff
from .lease import LeaseKeeper
from .outcome import task_name
from .reporter import Reporter
from .slots import Slots

logger = logging.getLogger("culex")

HELPER_STOP_TIMEOUT = 5.0  # seconds a helper loop may take to stop
# A task handed back while a thread of this process still runs it is due this much later:
# the process ends right after the hand-back, so no other runner starts the task while
# the thread may still run a step of it (a process the machine holds back a moment).
HANDED_BACK_DUE_MS = 1000
# A helper loop that raised starts again after a pause: RESTART[0] s, twice as long after
# each failure in a row, up to RESTART[1]; one that ran STEADY s before it raised was well.
RESTART = (0.5, 30.0)
STEADY = 60.0


def start_helpers(
    loops: dict[str, Callable[[asyncio.Event], Awaitable[None]]], stopping: asyncio.Event
) -> list[asyncio.Task[Any]]:
    """Start each helper loop (name -> its ``run``, given ``stopping``) as a task that
    keeps it going (:func:`kept_going`)."""
    return [
        asyncio.create_task(kept_going(name, loop, stopping), name=name)
        for name, loop in loops.items()
    ]


async def kept_going(
    name: str, loop: Callable[[asyncio.Event], Awaitable[None]], stopping: asyncio.Event
) -> None:
    """Run the helper loop ``loop(stopping)`` (the releaser's, the reclaimer's, the
    scheduler's...) until it returns or ``stopping`` is set. One that raises is logged at
    once, with its traceback, and started again after a short pause: a bug met by one pass
    must not end the loop for good while the runner goes on beating and running tasks."""
    backoff = Backoff(*RESTART)
    while not stopping.is_set():
        began = time.monotonic()
        try:
            await loop(stopping)
            return
        except Exception:
            if time.monotonic() - began >= STEADY:
                backoff.failures = 0
            pause = backoff.failed()
            logger.exception("%s failed; it starts again in %.1f s", name, pause)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopping.wait(), pause)


async def stop_helpers(helpers: list[asyncio.Task[Any]]) -> None:
    """Stop the helper loops. Each also ends on its own once stopping is set, so a
    cancellation lost inside a client library cannot keep the runner from exiting."""
    for helper in helpers:
        helper.cancel()
    _, stuck = await asyncio.wait(helpers, timeout=HELPER_STOP_TIMEOUT)
    for helper in stuck:
        logger.warning("%s did not stop in time; leaving it", helper.get_name())
    for helper in helpers:
        if helper.done() and not helper.cancelled() and helper.exception() is not None:
            logger.error("%s failed", helper.get_name(), exc_info=helper.exception())


async def finish(
    slots: Slots,
    reporter: Reporter,
    keeper: LeaseKeeper,
    grace_period: float,
    *,
    owns_process: bool,
) -> None:
    """Graceful stop: wait up to ``grace_period``, then hand unfinished tasks back.

    No task is handed back while its perform still runs in this process: a child
    process is killed first; a thread cannot be, so a runner that ``owns_process`` ends
    it just after the hand-back, and one that does not keeps such a task and waits for it
    instead."""
    if slots.running:
        _, unfinished = await asyncio.wait(list(slots.running), timeout=grace_period)
        held = {task: slots.running[task] for task in unfinished}
        isolation.kill(claimed.id for claimed in held.values())
        threads = [task for task, claimed in held.items() if claimed in slots.threaded]
        for task in threads if not owns_process else ():
            logger.warning(
                "task %s runs on in a thread after the grace period; a thread cannot be "
                "stopped, so it is not handed back: waiting for it to end",
                task_name(held.pop(task)),
            )
        for task in held:
            task.cancel()
        if threads and owns_process:
            await reporter.flush()
            await _release_and_exit(reporter, list(held.values()))
        if held:
            await _release(reporter, keeper, list(held.values()))
        if threads:
            await asyncio.wait(threads)
    await reporter.flush()


async def _release_and_exit(reporter: Reporter, held: list[Claimed]) -> NoReturn:
    """Hand ``held`` back and end the process at once, with the threads that still run
    their performs: nothing of this process runs them once another runner can."""
    logger.warning(
        "the grace period is over; handing back %s (due again in %.0f s), and ending the "
        "process with the threads that still run them",
        ", ".join(task_name(claimed) for claimed in held),
        HANDED_BACK_DUE_MS / 1000,
    )
    logs.flush_all()  # before the hand-back: from then on, not a moment is lost
    results = await reporter.hand_back(held, HANDED_BACK_DUE_MS)
    failed = [claimed for claimed, done in zip(held, results, strict=True) if done is not True]
    for claimed in failed:
        logger.warning(
            "task %s could not be handed back: it comes back when its lease ends",
            task_name(claimed),
        )
    exit_now(0)


async def _release(reporter: Reporter, keeper: LeaseKeeper, held: list[Claimed]) -> None:
    handed = await reporter.hand_back(held)
    for claimed, result in zip(held, handed, strict=True):
        if result is True:
            logger.info("task %s handed back to waiting", task_name(claimed))
        keeper.drop(claimed)


def exit_now(code: int) -> NoReturn:
    """End the process with its threads, skipping exit handlers (which would wait for
    them), once the log is written out."""
    logs.flush_all()
    os._exit(code)
