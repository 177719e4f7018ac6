"""What one Prometheus scrape costs: ``culex.operations.metrics.render`` over many queues, timed.

    python bench/metrics.py [--queues N] [--tasks N] [--scrapes N] [--server ...]

Fills N queues with tasks (waiting), then renders the metrics again and again on one
private server. Prints one JSON object: the median milliseconds per scrape, the round
trips of one scrape (no task has run: no minute of counters to add), and the size of
the text.
"""

from __future__ import annotations

import json
import statistics
import time

from server import arguments, private_server


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--tasks", type=int, default=1000, help="per queue")
    parser.add_argument("--scrapes", type=int, default=30)
    args = parser.parse_args()
    import culex
    from culex.operations import metrics

    with private_server(args.server) as server:
        culex.configure(redis_url=server.url)
        for i in range(args.queues):

            class FillJob(culex.QueuedJob, abstract=True):
                queue = f"bench_metrics_{i}"
                name = f"FillJob{i}"

                def perform(self) -> None:
                    pass

            culex.enqueue_many(FillJob() for _ in range(args.tasks))
        metrics.render()  # (scripts loaded, connection made)
        timings = []
        for _ in range(args.scrapes):
            start = time.perf_counter()
            text = metrics.render()
            timings.append((time.perf_counter() - start) * 1000)
        rounds = _round_trips(culex.settings())
    print(
        json.dumps(
            {
                "queues": args.queues,
                "tasks_per_queue": args.tasks,
                "scrape_ms": round(statistics.median(timings), 2),
                "round_trips": rounds,
                "bytes": len(text),
            }
        )
    )


def _round_trips(settings: object) -> int:
    from culex.operations import scrape
    from culex.server import configured

    procedure = scrape.snapshot_procedure(settings)  # type: ignore[arg-type]
    driver = configured.sync_driver(None)
    rounds = 0
    step = next(procedure)
    try:
        while True:
            rounds += 1
            step = procedure.send(
                driver.run_many(step) if isinstance(step, list) else driver.run(step)
            )
    except StopIteration:
        return rounds


if __name__ == "__main__":
    main()
