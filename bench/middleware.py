"""What middleware costs: an enqueue's own Python, and a drain of no-op tasks.

    python bench/middleware.py [--calls N] [--tasks N] [--runs N] [--server auto|valkey|redis|PATH]

1. The Python-side cost of building one enqueue's call (``culex.jobs.enqueue._call``: the
   params, the middleware's headers and sealing, the script's KEYS and ARGV; no round
   trip), with no middleware, with each of three alone (an Audit-like one that writes a
   header, ContextMiddleware with two variables set, EncryptedParams with a 32-byte key)
   and with the three: the median µs per call over ``--runs`` runs of ``--calls`` calls,
   the five in turns within each run.
2. ``BenchMiddlewareJob(...).enqueue()`` in a loop, the whole call with its round trip:
   ``--calls`` / 20 calls with none, then with the three, 4 x ``--runs`` such pairs: µs per
   enqueue (medians) and the median of the pairs' differences (the middleware's cost with
   the longer call it sends and the server stores).
3. A drain (culex.testing.drain, the runner's own attempt path) of ``--tasks`` no-op tasks
   enqueued with none and with the three, in turns, ``--runs`` times each: tasks/s
   (medians) and the median of the runs' ratios.

``--instructions``: instead, the instructions of building one call with each of the five
(valgrind's cachegrind, two loops of different lengths in child processes, their
difference over the calls): repeatable on a machine too busy for timings.

Prints the figures as text, and one JSON object on the last line. No threshold: figures.
"""

from __future__ import annotations

import argparse
import contextvars
import dataclasses
import json
import os
import re
import statistics
import subprocess
import sys
import time
from typing import Any

from server import arguments, private_server

import culex
from culex.jobs import enqueue

tenant: contextvars.ContextVar[str] = contextvars.ContextVar("tenant")
locale: contextvars.ContextVar[str] = contextvars.ContextVar("locale")


class Audit(culex.Middleware):
    """Writes who enqueued (a header); does nothing around perform."""

    def on_enqueue(self, job: Any, headers: dict[str, str]) -> None:
        headers["by"] = "bench-user"


class BenchMiddlewareJob(culex.QueuedJob):
    queue = "bench_middleware"
    n: int
    email: str = "someone@example.com"

    def perform(self) -> None:
        pass


def three() -> list[culex.Middleware]:
    return [
        Audit(),
        culex.ContextMiddleware(tenant, locale),
        culex.EncryptedParams(keys={"k1": os.urandom(32)}, current="k1"),
    ]


def call_costs(made: dict[str, list[culex.Middleware]], calls: int, runs: int) -> dict[str, float]:
    """Median µs to build one enqueue's call with each list of ``made``, in turns (each run
    builds ``calls`` calls with each list in turn: the machine's drift hits all alike)."""
    job = BenchMiddlewareJob(n=1)
    build = enqueue._call
    control = enqueue.NO_CONTROL
    per: dict[str, list[float]] = {name: [] for name in made}
    for _ in range(runs):
        for name, middleware in made.items():
            settings = dataclasses.replace(culex.settings(), middleware=tuple(middleware))
            start = time.perf_counter()
            for i in range(calls):
                build(job, settings, None, 0, f"id{i}", "", control, True)
            per[name].append((time.perf_counter() - start) / calls * 1e6)
    return {name: statistics.median(us) for name, us in per.items()}


def configurations() -> dict[str, list[culex.Middleware]]:
    """The lists measured: none, each of the three alone, the three."""
    made = three()
    return {
        "none": [],
        "audit": made[:1],
        "context": made[1:2],
        "encrypted": made[2:],
        "three": made,
    }


def configured(middleware: list[culex.Middleware], url: str) -> None:
    """An empty server, and culex configured on it with ``middleware``."""
    import redis

    redis.Redis.from_url(url).flushall()
    enqueue._registered.clear()
    culex.configure(redis_url=url, middleware=middleware)


def enqueued(middleware: list[culex.Middleware], calls: int, url: str) -> float:
    """µs per ``enqueue()`` of ``calls`` enqueues, one after another, with ``middleware``."""
    configured(middleware, url)
    BenchMiddlewareJob(n=0).enqueue()  # (the queue registered, the script loaded)
    job = BenchMiddlewareJob(n=1)
    start = time.perf_counter()
    for _ in range(calls):
        job.enqueue()
    return (time.perf_counter() - start) / calls * 1e6


def drained(middleware: list[culex.Middleware], tasks: int, url: str) -> float:
    """Tasks/s of a drain of ``tasks`` no-op tasks enqueued with ``middleware``."""
    configured(middleware, url)
    culex.enqueue_many(BenchMiddlewareJob(n=i) for i in range(tasks))
    from culex.testing import drain

    start = time.perf_counter()
    ran = drain("bench_middleware", timeout=600)
    took = time.perf_counter() - start
    assert len(ran) == tasks and all(a.outcome == "succeeded" for a in ran)
    return tasks / took


def instructions(which: str, calls: int) -> int:
    """The instructions of a child that builds ``calls`` calls with ``which`` (a name of
    configurations()). Hash seed fixed and no bytecode written: two children differ only
    in their loop's length."""
    child = [sys.executable, __file__, "--loop", which, "--calls", str(calls)]
    valgrind = [
        "valgrind",
        "--tool=cachegrind",
        "--cache-sim=no",
        "--cachegrind-out-file=/dev/null",
    ]
    env = {**os.environ, "PYTHONHASHSEED": "0", "PYTHONDONTWRITEBYTECODE": "1"}
    said = subprocess.run(
        [*valgrind, *child], check=True, capture_output=True, text=True, env=env
    ).stderr
    found = re.search(r"I\s+refs:\s+([\d,]+)", said)
    if found is None:
        raise SystemExit(f"no instruction count in valgrind's output:\n{said}")
    return int(found.group(1).replace(",", ""))


def counted(calls: int) -> None:
    per = {}
    for which in configurations():
        few, many = instructions(which, calls // 10), instructions(which, calls)
        per[which] = (many - few) / (calls - calls // 10)
        print(f"build one enqueue call, {which:9}: {per[which] / 1000:.1f}k instructions")
    print(f"added by the three: {(per['three'] - per['none']) / 1000:.1f}k instructions")
    print(json.dumps({"call_instructions": per}))


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--tasks", type=int, default=5_000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--instructions", action="store_true")
    parser.add_argument("--loop", choices=tuple(configurations()), help=argparse.SUPPRESS)
    args = parser.parse_args()
    tenant.set("acme")
    locale.set("fr")
    if args.loop:  # (a child of --instructions)
        call_costs({args.loop: configurations()[args.loop]}, args.calls, 1)
        return
    if args.instructions:
        counted(args.calls)
        return
    costs = call_costs(configurations(), args.calls, args.runs)
    for name, us in costs.items():
        print(f"build one enqueue call, {name:9}: {us:6.2f} µs")
    print(f"added by the three: {costs['three'] - costs['none']:.2f} µs per enqueue")
    rates: dict[str, list[float]] = {"none": [], "three": []}
    round_trip: dict[str, list[float]] = {"none": [], "three": []}
    with private_server(args.server) as server:
        # (short runs in turns, many of them: the machine's drift hits both alike)
        for _ in range(args.runs * 4):
            round_trip["none"].append(enqueued([], args.calls // 20, server.url))
            round_trip["three"].append(enqueued(three(), args.calls // 20, server.url))
        for _ in range(args.runs):
            rates["none"].append(drained([], args.tasks, server.url))
            rates["three"].append(drained(three(), args.tasks, server.url))
    ratios = [a / b for a, b in zip(rates["none"], rates["three"], strict=True)]
    whole = {name: statistics.median(us) for name, us in round_trip.items()}
    added = statistics.median(
        b - a for a, b in zip(round_trip["none"], round_trip["three"], strict=True)
    )
    print(
        f"enqueue() with its round trip, {args.runs * 4} pairs of {args.calls // 20} calls: "
        f"none {whole['none']:.2f} µs, the three {whole['three']:.2f} µs; added (median of the "
        f"pairs' differences): {added:+.2f} µs"
    )
    for name, runs in rates.items():
        shown = ", ".join(f"{r:,.0f}" for r in runs)
        print(
            f"drain of {args.tasks} no-op tasks, {name}: {statistics.median(runs):,.0f}/s ({shown})"
        )
    print(f"median ratio none / three: {statistics.median(ratios):.3f}")
    print(
        json.dumps(
            {
                "call_us": costs,
                "enqueue_us": round_trip,
                "drain_per_s": rates,
                "ratio": statistics.median(ratios),
            }
        )
    )


if __name__ == "__main__":
    main()
