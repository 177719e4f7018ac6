"""A runner that a supervisor started (``culex run --processes N``): what it tells the
supervisor, on a pipe of its own whose other end the supervisor reads, one line each.

``ready``: its signal handlers are set, so the supervisor may pass it SIGTSTP (a runner
whose handlers are not yet set would be suspended by one: its default action).

``recycle REASON``: it has run ``--max-tasks-per-process`` tasks, or its resident memory
(RSS) has passed ``--max-memory-per-process`` MB, and asks to be replaced. The supervisor
answers with SIGUSR1 when its turn comes (one runner at a time: culex.runner.supervisor):
the runner goes quiet, finishes what it runs, and exits; a new runner takes its place.

A runner claims no task past its limit (:meth:`Supervised.left`, which the claim loop asks):
never more than M tasks in all, however many one claim could take, and none once its RSS
has passed MB, while it waits for its turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import resource
import sys
from collections.abc import AsyncIterator, Callable

from .slots import Slots

logger = logging.getLogger("culex")

MB = 1 << 20


def rss_bytes() -> int:
    """This process's resident memory now, in bytes: from /proc/self/statm where there is
    one (Linux); elsewhere the peak so far (getrusage), which never shrinks."""
    try:
        with open("/proc/self/statm", "rb") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except (OSError, ValueError, IndexError):
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        return peak if sys.platform == "darwin" else peak * 1024  # (bytes there, KB here)


class Supervised:
    """The pipe to the supervisor (``fd``), and the limits past which the runner asks to
    be replaced (None: no limit)."""

    def __init__(self, fd: int, max_tasks: int | None, max_memory_mb: int | None) -> None:
        self.fd = fd
        self.max_tasks = max_tasks
        self.max_memory_mb = max_memory_mb
        self.started = 0  # attempts started in this process
        self.tasks = 0  # attempts that ended in this process
        self.asked = False  # it has asked to be replaced (once is enough)

    def ready(self) -> None:
        """Tell the supervisor the runner's signal handlers are set."""
        self._say("ready")

    def left(self) -> int | None:
        """How many more tasks this runner may claim (None: no limit): none once it asked
        to be replaced, and never more than ``max_tasks`` started in all."""
        if self.asked:
            return 0
        if self.max_tasks is None:
            return None
        return max(0, self.max_tasks - self.started)

    def start(self) -> None:
        """An attempt starts (counted against ``max_tasks``)."""
        self.started += 1

    def ended(self) -> None:
        """An attempt ended: ask to be replaced once a limit is reached."""
        self.tasks += 1
        if self.asked:
            return
        reason = ""
        if self.max_tasks is not None and self.tasks >= self.max_tasks:
            reason = f"it has run {self.tasks} tasks (--max-tasks-per-process {self.max_tasks})"
        elif self.max_memory_mb is not None:
            rss = rss_bytes()
            if rss > self.max_memory_mb * MB:
                reason = (
                    f"its RSS, {rss / MB:.0f} MB, has passed --max-memory-per-process "
                    f"{self.max_memory_mb}"
                )
        if reason:
            self.asked = True
            logger.info("asking the supervisor to replace this runner: %s", reason)
            self._say(f"recycle {reason}")

    async def retire(self, slots: Slots, stop: Callable[[], None]) -> None:
        """Retire: call ``stop`` once nothing runs in the runner's ``slots``."""
        logger.info(
            "retiring: stopping once the %d running task(s) end (it has started %d in all)",
            len(slots.running),
            self.started,
        )
        while slots.running:
            await asyncio.wait(list(slots.running))
        stop()

    def _say(self, line: str) -> None:
        with contextlib.suppress(OSError):  # (the supervisor has ended: the runner stops)
            os.write(self.fd, f"{line}\n".encode())


async def reports(fd: int) -> AsyncIterator[tuple[str, str]]:
    """In the supervisor: what a runner says on its pipe, read from ``fd`` until the
    runner ends, as (word, rest) pairs: ("ready", ""), ("recycle", REASON)."""
    reader = asyncio.StreamReader()
    transport, _ = await asyncio.get_running_loop().connect_read_pipe(
        lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
    )
    try:
        async for raw in reader:
            word, _, rest = raw.decode(errors="replace").strip().partition(" ")
            yield word, rest
    finally:
        transport.close()
