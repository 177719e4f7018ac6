"""What one-call enqueue costs, in instructions: the producer's and the server's.

    python bench/enqueue_instructions.py --before /tmp/culex-before/src [--after SRC]
        [--calls 1000,3000] [--modes sync,async] [--server auto|redis|valkey|PATH]

A one-call enqueue's rate is a round trip: the producer's Python, the server's script, and
the wake-ups in between. On this shared machine its rate moves by more than most changes
to either side, so this counts each side's instructions instead (valgrind's cachegrind:
the same from run to run whatever else the machine does). For each checkout (``src``
folders, as instructions.py takes them) and mode (``sync``: ``enqueue()`` in a loop;
``async``: ``await aenqueue()`` in a loop), a child with that checkout first on its path
enqueues N tasks of a job with one int param, under valgrind, against a private server
that also runs under valgrind; done for two N, the difference over the calls between them
is one enqueue's cost on each side, without start-ups and imports. The child waits with
``busy_poll=0``: a spin's polls count the server's time, not the producer's work. Prints
the figures; asserts nothing. Needs valgrind (apt-get install valgrind).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import redis
from server import arguments, find_binary, free_port

AFTER = Path(__file__).resolve().parent.parent / "src"
VALGRIND = ["valgrind", "--tool=cachegrind", "--cache-sim=no", "--cachegrind-out-file=/dev/null"]

CHILD = """
import asyncio, sys
import culex

culex.configure(redis_url=sys.argv[1], busy_poll=0)
calls, mode = int(sys.argv[2]), sys.argv[3]

class CountedJob(culex.QueuedJob):
    queue = "counted"
    n: int

    def perform(self) -> None:
        pass

async def one_after_another():
    for n in range(calls + 1):
        await CountedJob(n=n).aenqueue()

if mode == "async":
    asyncio.run(one_after_another())
else:
    for n in range(calls + 1):
        CountedJob(n=n).enqueue()
"""


def counted(stderr: str) -> int:
    found = re.search(r"I\s+refs:\s+([\d,]+)", stderr)
    if found is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{stderr}")
    return int(found.group(1).replace(",", ""))


@contextlib.contextmanager
def counted_server(binary: str) -> Iterator[tuple[str, list[int]]]:
    """A private server under valgrind: its URL, and a list that holds its count once it
    has stopped."""
    port = free_port()
    total: list[int] = []
    with tempfile.TemporaryDirectory() as folder:
        args = ["--port", str(port), "--save", "", "--appendonly", "no", "--dir", folder]
        server = subprocess.Popen(
            [*VALGRIND, binary, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True
        )
        client = redis.Redis(port=port)
        for _ in range(300):
            with contextlib.suppress(redis.ConnectionError):
                if client.ping():
                    break
            time.sleep(0.1)
        try:
            yield f"redis://127.0.0.1:{port}/0", total
        finally:
            with contextlib.suppress(redis.ConnectionError):
                client.shutdown(nosave=True)
            _, stderr = server.communicate(timeout=120)
            total.append(counted(stderr))


def one_run(binary: str, src: Path, mode: str, calls: int) -> tuple[int, int]:
    """The instructions of the producer and of the server for ``calls`` enqueues."""
    env = {**os.environ, "PYTHONPATH": str(src)}
    with counted_server(binary) as (url, server_total):
        producer = subprocess.run(
            [*VALGRIND, sys.executable, "-c", CHILD, url, str(calls), mode],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
    return counted(producer.stderr), server_total[0]


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--before", type=Path, required=True, help="src of the checkout before")
    parser.add_argument("--after", type=Path, default=AFTER, help="default: this checkout's src")
    parser.add_argument("--calls", default="1000,3000", help="the two runs' sizes")
    parser.add_argument("--modes", default="sync,async")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    binary = find_binary(args.server)
    small, large = (int(n) for n in args.calls.split(","))
    print(f"server: {binary}")
    print("| mode | checkout | producer (k instr./enqueue) | server (k instr./enqueue) | sum |")
    print("|---|---|---|---|---|")
    sums: dict[tuple[str, str], float] = {}
    for mode in args.modes.split(","):
        for name, src in (("before", args.before), ("after", args.after)):
            runs = [one_run(binary, src, mode, calls) for calls in (small, large)]
            producer = (runs[1][0] - runs[0][0]) / (large - small) / 1000
            server = (runs[1][1] - runs[0][1]) / (large - small) / 1000
            sums[mode, name] = producer + server
            print(
                f"| {mode} | {name} | {producer:.1f} | {server:.1f} | {producer + server:.1f} |",
                flush=True,
            )
    print()
    for mode in args.modes.split(","):
        ratio = sums[mode, "before"] / sums[mode, "after"]
        print(f"{mode}: before / after, producer + server: {ratio:.3f} (above 1: after is cheaper)")


if __name__ == "__main__":
    main()
