"""culex only: a ``culex run`` of a job module written into a new folder, fed and drained.

What ``memory.py`` and ``collector.py`` share: their options, the folder that holds the
job module, the runner's command, the bulk enqueue that fills its queue (in a child, so
the producer's memory is not the runner's) and the wait until the queue is empty.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import redis
from server import arguments

from culex._redis.keys import queue_keys

QUEUE = "bench"  # the queue of the job modules' Noop


def runner_arguments(description: str | None, tasks: int) -> argparse.Namespace:
    """The options of a culex-only script that drains tasks with one ``culex run``."""
    parser = arguments(description)
    parser.add_argument("--tasks", type=int, default=tasks)
    parser.add_argument("--concurrency", type=int, default=100)
    return parser.parse_args()


def jobs_folder(module: str, source: str) -> Path:
    """A new folder holding the job module ``module``.py for ``culex run`` to import."""
    folder = Path(tempfile.mkdtemp(prefix=f"culex-bench-{module}-"))
    (folder / f"{module}.py").write_text(textwrap.dedent(source))
    return folder


def start(
    folder: Path, module: str, url: str, concurrency: int, env: dict[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """``culex run MODULE`` in ``folder`` against ``url``; its log is thrown away."""
    command = [sys.executable, "-m", "culex", "run", module]
    command += ["--concurrency", str(concurrency), "--redis-url", url]
    return subprocess.Popen(
        command, cwd=folder, env={**os.environ, **(env or {})}, stderr=subprocess.DEVNULL
    )


def enqueue(folder: Path, module: str, url: str, tasks: int, params: str = "") -> None:
    """``tasks`` of the module's ``Noop(params)`` with ``culex.enqueue_many``, in a child."""
    produce = f"import culex, {module}; culex.configure(redis_url={url!r}); "
    produce += f"culex.enqueue_many([{module}.Noop({params}) for _ in range({tasks})])"
    subprocess.run([sys.executable, "-c", produce], cwd=folder, check=True)


def wait_drained(client: redis.Redis, pause: float) -> None:
    """Until the queue has no task waiting or running, looking every ``pause`` seconds."""
    keys = queue_keys("culex", QUEUE)
    while client.zcard(keys.waiting) or client.zcard(keys.pending):
        time.sleep(pause)
