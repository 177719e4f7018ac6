"""One module per system under test, all with the same shape.

Each module defines the no-op task (one ``INCR`` on the benchmark server, or in the
latency scenarios one ``RPUSH`` of how late it started: see ``record``) and:

- ``WORKER``: the command that starts ONE worker process, as its docs show, with the
  settings stated in ``SETTINGS``. ``{python}`` stands for the interpreter of the system's
  environment, ``{bin}`` for its scripts folder, ``{url}`` for the server's URL.
- ``SETTINGS``: a short description of the worker's concurrency and options.
- ``Producer``: a context manager (sync or async, as the system's client is) with
  ``one(stamp, delay)`` (enqueue one task, due ``delay`` seconds from now) and
  ``many(stamps)`` (the bulk API), or ``many = None`` when the system has none; raising
  NotImplementedError marks a scenario n/a with its message.

The modules run in a subprocess with the system's own interpreter (``bench/produce.py`` and
the worker command), with ``bench/`` on ``PYTHONPATH`` and the URL in ``BENCH_REDIS_URL``.
"""

from __future__ import annotations

from typing import Any, Self


class SyncProducer:
    """The base of a sync ``Producer`` with nothing to open or close and no bulk API."""

    many: Any = None

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        pass
