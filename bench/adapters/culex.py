"""culex, the checkout under test: an async ``perform``, the ``culex run`` runner."""

from __future__ import annotations

import culex

from . import SyncProducer
from .record import URL, arecord

CONCURRENCY = 100
WORKER = [
    "{python}",
    "-m",
    "culex",
    "run",
    "adapters.culex",
    "--concurrency",
    str(CONCURRENCY),
    "--redis-url",
    "{url}",
]
# E: the same runner with its per-task INFO lines off
WORKER_QUIET = [*WORKER[:3], "--log-level", "WARNING", *WORKER[3:]]
SETTINGS = f"culex run, concurrency {CONCURRENCY} (async perform), log level INFO (default)"


class Noop(culex.QueuedJob):
    queue = "bench"
    stamp: float

    async def perform(self) -> None:
        await arecord(self.stamp)


class Producer(SyncProducer):
    """Sync ``enqueue()`` and ``culex.enqueue_many()``, the documented producer calls."""

    def __enter__(self) -> Producer:
        culex.configure(redis_url=URL)
        return self

    def one(self, stamp: float, delay: float) -> None:
        Noop(stamp=stamp).enqueue(delay=delay or None)

    def many(self, stamps: list[float]) -> str | None:
        if not hasattr(culex, "enqueue_many"):  # an older checkout: a loop, and say so
            for stamp in stamps:
                Noop(stamp=stamp).enqueue()
            return "culex.enqueue_many is missing: a loop of enqueue() instead"
        culex.enqueue_many([Noop(stamp=s) for s in stamps])
        return None


class AsyncProducer(Producer):
    """``aenqueue()``: culex's async producer call (an extra row, culex only)."""

    async def one(self, stamp: float, delay: float) -> None:  # type: ignore[override]
        await Noop(stamp=stamp).aenqueue(delay=delay or None)
