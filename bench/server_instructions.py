"""What a task costs the server, in instructions: its enqueue, claim and report.

    python bench/server_instructions.py --before /tmp/culex-before/src [--after SRC]
        [--tasks 1000,4000] [--server auto|redis|valkey|PATH]

For each checkout (``src`` folders, as instructions.py takes them), a child with that
checkout first on its path enqueues N no-op tasks with ``enqueue_many`` and runs them with
``culex.testing.drain`` (the runner's own claim and report path, in one process), against a
private server that runs under valgrind's cachegrind (enqueue_instructions.py's). Done for
two N, the difference of the server's counts over the tasks between them is one task's
cost on the server, without its start-up. A server's count moves by a few k from run to
run (its timers tick while valgrind slows it): compare the checkouts of one run. Prints
the figures; asserts nothing. Needs valgrind (apt-get install valgrind).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from enqueue_instructions import counted_server
from server import arguments, find_binary

AFTER = Path(__file__).resolve().parent.parent / "src"

CHILD = """
import sys
import culex
from culex.testing import drain

culex.configure(redis_url=sys.argv[1])
tasks = int(sys.argv[2])

class ServerCostJob(culex.QueuedJob):
    queue = "server_cost"
    n: int

    def perform(self) -> None:
        pass

culex.enqueue_many(ServerCostJob(n=n) for n in range(tasks))
ran = drain(["server_cost"], timeout=600)  # (the server runs under valgrind: slow)
assert len(ran) == tasks and all(a.outcome == "succeeded" for a in ran)
"""


def server_count(binary: str, src: Path, tasks: int) -> int:
    """The server's instructions for enqueuing and running ``tasks`` tasks."""
    with counted_server(binary) as (url, total):
        env = {**os.environ, "PYTHONPATH": str(src)}
        subprocess.run([sys.executable, "-c", CHILD, url, str(tasks)], env=env, check=True)
    return total[0]


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--before", type=Path, required=True, help="src of the checkout before")
    parser.add_argument("--after", type=Path, default=AFTER, help="default: this checkout's src")
    parser.add_argument("--tasks", default="1000,4000", help="the two runs' sizes")
    args = parser.parse_args()
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed (apt-get install valgrind)")
    binary = find_binary(args.server)
    small, large = (int(n) for n in args.tasks.split(","))
    print(f"server: {binary}")
    per: dict[str, float] = {}
    for name, src in (("before", args.before), ("after", args.after)):
        counts = [server_count(binary, src, tasks) for tasks in (small, large)]
        per[name] = (counts[1] - counts[0]) / (large - small) / 1000
        print(f"{name}: {per[name]:.1f}k server instructions per task", flush=True)
    print(f"before / after: {per['before'] / per['after']:.3f} (above 1: after is cheaper)")


if __name__ == "__main__":
    main()
