"""culex's runner memory with nothing of the harness in it: RSS idle and after a drain.

    python bench/memory.py [--tasks 20000] [--concurrency 100]

The table's "RSS in B" is measured with the harness's task body, which imports redis-py
for its one round trip (adapters/record.py): free for a peer built on redis-py, about
6 MB more for culex, which has its own client (the column "RSS in B, stdlib task body"
takes it out for every system). Here the task does nothing at all and culex runs alone,
so the figure is culex's own. Same server kind and settings as compare.py.
Prints the figures; asserts nothing.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import culex_run
import redis
from server import private_server

JOBS = """
import culex

class Noop(culex.QueuedJob):
    queue = "bench"
    stamp: float

    async def perform(self) -> None:
        pass
"""


def memory(pid: int) -> dict[str, float]:
    """VmRSS and VmHWM (peak) of a process, in MB."""
    fields = dict(
        line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
    )
    return {k: int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM")}


def main() -> None:
    args = culex_run.runner_arguments(__doc__, tasks=20_000)
    folder = culex_run.jobs_folder("bare_jobs", JOBS)
    with private_server(args.server) as server:
        worker = culex_run.start(folder, "bare_jobs", server.url, args.concurrency)
        client = redis.Redis.from_url(server.url)
        try:
            while len(client.client_list()) < 2:  # until the runner has connected
                time.sleep(0.05)
            time.sleep(1.0)  # and settled
            idle = memory(worker.pid)
            culex_run.enqueue(folder, "bare_jobs", server.url, args.tasks, "stamp=0")
            culex_run.wait_drained(client, 0.01)
            after = memory(worker.pid)
        finally:
            worker.terminate()
            worker.wait(15)
            client.close()
    print(f"culex runner, a task that imports nothing, concurrency {args.concurrency}:")
    print(
        f"  idle RSS {idle['VmRSS']:.1f} MB; peak RSS over a drain of {args.tasks:,} tasks "
        f"{after['VmHWM']:.1f} MB ({os.uname().machine}, Python {sys.version.split()[0]})"
    )


if __name__ == "__main__":
    main()
