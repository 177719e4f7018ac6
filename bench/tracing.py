"""What tracing costs an enqueue: one sync ``enqueue`` call after another, timed.

    python bench/tracing.py [--count N] [--runs N] [--server auto|valkey|redis|PATH]

Three modes, each in its own interpreter (the PYTHONPATH given decides which culex):
``absent`` (OpenTelemetry hidden: its import fails), ``idle`` (OpenTelemetry installed,
no active span) and ``span`` (the SDK installed, every enqueue made inside a span: the
task carries the trace, and culex opens its PRODUCER span). Each mode also times culex's
own check alone (``tracing.in_span``, then ``tracing.Producing`` in ``span`` mode: it opens a
span; ``tracing.producing`` in a checkout from before culex/runner/attempt_span.py), when that
module exists. Prints one JSON object: per mode, the median microseconds per enqueue over the runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from server import arguments, private_server

MODES = ("absent", "idle", "span")


def child(url: str, mode: str, count: int, runs: int) -> dict[str, Any]:
    if mode == "absent":
        sys.modules["opentelemetry"] = None  # type: ignore[assignment]  # import fails
    import culex

    culex.configure(redis_url=url)

    class BenchJob(culex.QueuedJob):
        queue = "bench_tracing"
        n: int

        def perform(self) -> None:
            pass

    def timed() -> float:
        start = time.perf_counter()
        for i in range(count):
            BenchJob(n=i).enqueue()
        return (time.perf_counter() - start) / count * 1e6

    if mode == "span":
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider

        trace.set_tracer_provider(TracerProvider())
        with trace.get_tracer("bench").start_as_current_span("request"):
            per = [timed() for _ in range(runs)]
            check = _check_cost(BenchJob(n=0))
    else:
        per = [timed() for _ in range(runs)]
        check = _check_cost(BenchJob(n=0))
    return {"enqueue_us": round(statistics.median(per), 2), "check_us": check}


def _check_cost(job: Any) -> float | None:
    try:
        from culex import tracing
    except ImportError:
        return None
    n = 200_000
    types, queue, jobs = [job.type_], job.queue, [job]
    older = not hasattr(tracing, "in_span")  # (tracing.producing took the jobs)
    start = time.perf_counter()
    for _ in range(n):
        if older:
            tracing.producing(jobs)
        elif tracing.in_span():
            tracing.Producing(types, queue, 1)
    return round((time.perf_counter() - start) / n * 1e6, 3)


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--count", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        url, mode = args.child
        print(json.dumps(child(url, mode, args.count, args.runs)))
        return
    results: dict[str, Any] = {}
    with private_server(args.server) as server:
        for mode in MODES:
            out = subprocess.run(
                [
                    sys.executable,
                    __file__,
                    "--count",
                    str(args.count),
                    "--runs",
                    str(args.runs),
                    "--child",
                    server.url,
                    mode,
                ],
                check=True,
                capture_output=True,
                text=True,
            )
            results[mode] = json.loads(out.stdout.strip().splitlines()[-1])
            redis_flush(server.url)
    print(json.dumps(results))


def redis_flush(url: str) -> None:
    import redis

    client = redis.Redis.from_url(url)
    client.flushall()
    client.close()


if __name__ == "__main__":
    main()
