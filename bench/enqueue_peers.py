"""Enqueue at the producer's pace, culex against its peers: each system's documented
enqueue call in a loop, and made by many callers at once.

    python bench/enqueue_peers.py [--calls 4000] [--runs 2] [--only culex,arq,...]
        [--server auto|redis|valkey|PATH]

For each system, on one private server flushed in between: ``one`` (its enqueue call in a
loop, one at a time) and ``at_once`` (the same number of calls made by 100 coroutines for
an async producer, 8 threads for a sync one), through produce.py with the system's own
interpreter (the peers' environments of peers.py, made on first use). culex is measured
twice: its sync ``enqueue()`` (against the sync peers) and its ``aenqueue()`` (against the
async peers). Prints the medians and culex's ratio to the best peer of its kind; asserts
nothing. (The peers' workers are not started: only the producer side is measured.)
"""

from __future__ import annotations

import statistics
import sys
import tempfile
from pathlib import Path

import peers
import redis
from scenarios import System
from server import arguments, private_server

ASYNC_PEERS = ("arq", "saq", "taskiq", "streaq")
SYNC_PEERS = ("rq", "dramatiq", "huey", "celery")
# (row, system, producer class, kind)
ROWS = [
    ("culex enqueue()", "culex", "Producer", "sync"),
    ("culex aenqueue()", "culex", "AsyncProducer", "async"),
    *[(peer, peer, "Producer", "async") for peer in ASYNC_PEERS],
    *[(peer, peer, "Producer", "sync") for peer in SYNC_PEERS],
]
SCENARIOS = ("one", "at_once")


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--calls", type=int, default=4000)
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--only", default="", help="systems, by name, comma-separated")
    args = parser.parse_args()
    only = set(args.only.split(",")) if args.only else None
    rows = [row for row in ROWS if only is None or row[1] in only]
    rates: dict[tuple[str, str], list[float]] = {}
    with private_server(args.server) as server, tempfile.TemporaryDirectory() as logs:
        client = redis.Redis.from_url(server.url)
        systems: dict[str, System] = {}
        for _, name, _, _ in rows:
            if name not in systems:
                if name != "culex":
                    peers.ensure(name)
                python = sys.executable if name == "culex" else str(peers.python(name))
                systems[name] = System(name, python, server.url, Path(logs))
        for run in range(args.runs):
            for row, name, producer, _ in rows:
                for scenario in SCENARIOS:
                    client.flushall()
                    result = systems[name].produce(scenario, args.calls, producer)
                    rate = float(result.get("rate", 0.0))
                    rates.setdefault((row, scenario), []).append(rate)
                    print(f"run {run + 1} {row:<18} {scenario:<8} {rate:>9,.0f}/s", flush=True)
    median = {key: statistics.median(values) for key, values in rates.items()}
    print()
    print("| system | kind | in a loop (/s) | at once (/s) |")
    print("|---|---|---|---|")
    for row, _, _, kind in rows:
        print(f"| {row} | {kind} | {median[row, 'one']:,.0f} | {median[row, 'at_once']:,.0f} |")
    for culex_row, kind, peers_of_kind in (
        ("culex enqueue()", "sync", SYNC_PEERS),
        ("culex aenqueue()", "async", ASYNC_PEERS),
    ):
        present = [p for p in peers_of_kind if (p, "one") in median]
        if (culex_row, "one") not in median or not present:
            continue
        for scenario in SCENARIOS:
            best = max(present, key=lambda p: median[p, scenario])
            ratio = median[culex_row, scenario] / median[best, scenario]
            print(f"{culex_row}, {scenario}: {ratio:.2f}x the best {kind} peer ({best})")


if __name__ == "__main__":
    main()
