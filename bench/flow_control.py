"""What flow control costs the claim: the server's time per claim.lua call (INFO
commandstats), with no control set, with limits, with priorities, and with groups.

    python bench/flow_control.py [--tasks 100000] [--calls 2000] [--server auto|redis|valkey|PATH]
    python bench/flow_control.py --before /tmp/culex-before/src   # claim.lua before and after

Each scenario fills one queue on a private server flushed in between (with
``enqueue_many``, as producers do), then makes ``--calls`` claims of 10 tasks (the tasks
claimed stay running) and prints the server's µs per claim call. The scenarios: no
control; rate and concurrency limits that never bite; 1,000,000 waiting tasks of mixed
priorities; 10,000 groups of 10 tasks; and 10,000 groups at their group_concurrency (each
holds a running task, so every group has left the ring and a claim finds nothing to take).
Prints the figures; asserts nothing.

``--before`` compares this checkout's claim.lua, sent with no control, with the claim.lua
of another checkout (e.g. the one before flow control: ``git archive <commit> src | tar
-x -C /tmp/culex-before``), sent with the 7 keys and 4 arguments it takes: rounds of
1,000 claims of 10 from 400,000 waiting tasks, the two in turns, the server's µs a claim.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path

import redis
from server import arguments, private_server

import culex
from culex import config
from culex._redis.claims import claim
from culex._redis.keys import queue_keys
from culex.server.configured import sync_driver

K = queue_keys("culex", "bench")
DAY_MS = 86_400_000


class BenchJob(culex.QueuedJob):
    queue = "bench"

    def perform(self) -> None:
        pass


def fill(tasks: int, *, groups: int = 0, priorities: bool = False) -> None:
    """``tasks`` tasks in the queue, spread over ``groups`` groups (0: none)."""
    batch = 10_000
    for start in range(0, tasks, batch):
        count = min(batch, tasks - start)
        if groups:
            for g in range(groups):
                jobs = [BenchJob() for _ in range(count // groups)]
                if jobs:
                    culex.enqueue_many(jobs, group=f"g{g}")
        elif priorities:
            for p in (-5, 0, 5):
                culex.enqueue_many([BenchJob() for _ in range(count // 3)], priority=p)
        else:
            culex.enqueue_many([BenchJob() for _ in range(count)])


def claims(calls: int, **limits: object) -> float:
    """µs of the server's time per claim.lua call (EVALSHA, INFO commandstats) over
    ``calls`` claims of 10 tasks; the tasks claimed stay running (completes would be
    EVALSHA calls too)."""
    driver = sync_driver(config.settings().redis_url)
    client = redis.Redis.from_url(config.settings().redis_url or "")
    client.config_resetstat()
    for _ in range(calls):
        driver.run(
            claim(K, limit=10, lease_ms=3_600_000, promote_limit=100,
                  dead_ttl_ms=DAY_MS, **limits)  # type: ignore[arg-type]
        )  # fmt: skip
    evalsha = client.info("commandstats").get("cmdstat_evalsha", {"usec": 0, "calls": 1})
    return float(evalsha["usec"]) / max(1, int(evalsha["calls"]))


def scenario(name: str, client: redis.Redis, setup: object, run: object) -> None:
    client.flushall()
    started = time.perf_counter()
    setup()  # type: ignore[operator]
    filled = time.perf_counter() - started
    per_call = run()  # type: ignore[operator]
    print(f"{name:<58} {per_call:>8.1f} µs a call   (filled in {filled:.1f} s)", flush=True)


def before_and_after(client: redis.Redis, before: Path, rounds: int = 10) -> None:
    """This claim.lua against ``before``'s, in turns: the server's µs per claim of 10."""
    fill(400_000)
    old = client.script_load((before / "culex/_redis/lua/claim.lua").read_text())
    new = claim(K, limit=10, lease_ms=1, promote_limit=1, dead_ttl_ms=1)
    new_sha = client.script_load(new.script.source)
    old_keys = new.keys[:7]
    took: dict[str, list[float]] = {"before": [], "after": []}
    for turn in range(rounds):
        for name in ("before", "after") if turn % 2 == 0 else ("after", "before"):
            client.config_resetstat()
            for _ in range(1000):
                if name == "before":
                    client.evalsha(old, 7, *old_keys, 10, 3_600_000, 100, DAY_MS)
                else:
                    client.evalsha(new_sha, len(new.keys), *new.keys, 10, 3_600_000, 100, DAY_MS)
            stats = client.info("commandstats")["cmdstat_evalsha"]
            took[name].append(float(stats["usec"]) / int(stats["calls"]))
    for name, values in took.items():
        shown = ", ".join(f"{v:.1f}" for v in values)
        print(f"{name:<7} claim of 10: median {statistics.median(values):.1f} µs ({shown})")


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--tasks", type=int, default=100_000)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--before", type=Path, help="src of a checkout to compare claim.lua with")
    args = parser.parse_args()
    with private_server(args.server) as server:
        culex.configure(redis_url=server.url)
        client = redis.Redis.from_url(server.url)
        if args.before is not None:
            before_and_after(client, args.before)
            return
        n, calls = args.tasks, args.calls
        print(f"claim.lua, 10 tasks a call, {calls} calls, server µs a call (INFO commandstats)")
        scenario("no control", client, lambda: fill(n), lambda: claims(calls))
        scenario(
            "rate 1000000/s and concurrency 1000000 (never reached)", client, lambda: fill(n),
            lambda: claims(calls, rate=(1_000_000, 1000), concurrency=1_000_000),
        )  # fmt: skip
        scenario(
            "1,000,000 waiting, priorities -5, 0, 5", client,
            lambda: fill(1_000_000, priorities=True), lambda: claims(calls),
        )  # fmt: skip
        scenario(
            "10,000 groups of 10 tasks", client, lambda: fill(100_000, groups=10_000),
            lambda: claims(calls),
        )  # fmt: skip
        scenario(
            "10,000 groups, group_concurrency 1, all at their limit", client,
            lambda: (fill(100_000, groups=10_000), claims(1000, group_concurrency=1)),
            lambda: claims(calls, group_concurrency=1),
        )  # fmt: skip


if __name__ == "__main__":
    main()
