"""The garbage collector's pauses in a busy ``culex run``, with and without its freeze.

    python bench/collector.py [--tasks 50000] [--concurrency 100]

``culex run`` calls ``gc.freeze()`` once the job module is imported (cli/running.py), so that
a full collection skips the modules, classes and functions loaded at start-up. This
drains ``--tasks`` prefilled no-op tasks twice: once as ``culex run`` is, and once with
the freeze undone by the first task (``gc.unfreeze()``: the runner as it was before). The
job module times every collection (``gc.callbacks``) and the figures are printed per
generation. Same server kind and settings as compare.py. Prints the figures; asserts
nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import culex_run
import redis
from server import private_server

JOBS = """
import atexit
import gc
import json
import os
import time

import culex

pauses = []  # (generation, seconds)
started = [0.0]


def timed(phase, info):
    if phase == "start":
        started[0] = time.perf_counter()
    else:
        pauses.append((info["generation"], time.perf_counter() - started[0]))


gc.callbacks.append(timed)
atexit.register(lambda: open("pauses.json", "w").write(json.dumps(pauses)))
first = [True]


class Noop(culex.QueuedJob):
    queue = "bench"

    async def perform(self) -> None:
        if first[0]:  # from the first task on: culex run's own start-up collection is not counted
            first[0] = False
            if os.environ.get("BENCH_UNFREEZE") == "1":
                gc.unfreeze()
            pauses.clear()
"""


def drain(url: str, folder: Path, tasks: int, concurrency: int, unfreeze: bool) -> list[Any]:
    """Fill the queue, run ``culex run`` until it is empty, stop it; its collections."""
    client = redis.Redis.from_url(url)
    client.flushall()
    culex_run.enqueue(folder, "gc_jobs", url, tasks)
    env = {"BENCH_UNFREEZE": "1" if unfreeze else "0"}
    worker = culex_run.start(folder, "gc_jobs", url, concurrency, env)
    try:
        culex_run.wait_drained(client, 0.05)
    finally:
        worker.terminate()
        worker.wait(30)
        client.close()
    pauses: list[Any] = json.loads((folder / "pauses.json").read_text())
    return pauses


def summary(pauses: list[Any]) -> str:
    lines = []
    for generation in (0, 1, 2):
        times = sorted(s * 1000 for g, s in pauses if g == generation)
        if times:
            lines.append(
                f"    gen{generation}: {len(times):,} collections, median "
                f"{times[len(times) // 2]:.2f} ms, longest {times[-1]:.2f} ms, "
                f"{sum(times):.0f} ms in all"
            )
    return "\n".join(lines)


def main() -> None:
    args = culex_run.runner_arguments(__doc__, tasks=50_000)
    folder = culex_run.jobs_folder("gc_jobs", JOBS)
    with private_server(args.server) as server:
        results = {
            unfreeze: drain(server.url, folder, args.tasks, args.concurrency, unfreeze)
            for unfreeze in (False, True)
        }
    print(f"culex run draining {args.tasks:,} no-op tasks, concurrency {args.concurrency}:")
    print("  as culex run is (start-up objects frozen):")
    print(summary(results[False]))
    print("  with the freeze undone by the first task:")
    print(summary(results[True]))


if __name__ == "__main__":
    main()
