"""A master of a Redis Cluster SIGKILLed under load: what stops, and for how long, with the
servers' ``cluster-require-full-coverage`` at ``yes`` (their default) and at ``no`` (what
docs/production.md recommends).

    python bench/cluster_failover.py                      # 3 kills each way
    python bench/cluster_failover.py --kills 1 --only no  # one kill, full coverage off

A cluster of 3 masters with a replica each (tests/topology.py: node timeout 1 s, a
replica may always take over), three queues, one on each master. A producer thread per
queue enqueues ``--rate`` tasks a second into it; one runner (in this process, concurrency
8, lease 5 s) runs them (10 ms each), each task noting when it began. After a steady
load the master of one queue (each in turn) is SIGKILLed; the harness waits until the
cluster has settled with its replica as master (every node says cluster_state:ok and maps
every slot to the same running master, polled every 20 ms), then starts the killed node
again (it comes back as a replica) and waits for that to settle too. Per kill:

- ``failover_s``: from the kill to settled;
- ``healthy_gap_s``: the longest time, from 1 s before the kill to 3 s after settled,
  in which no task of a healthy queue (the two others) began (the load starts one every
  ``1/rate`` s in each);
- ``victim_back_s``: from settled to the first task of the killed master's queue that
  began (the queue's tasks wait meanwhile);
- ``clusterdown``: CLUSTERDOWN replies of the healthy masters during the kill (INFO
  errorstats);
- ``enqueue_stall_s``: the longest one enqueue took, healthy queues / the victim's;
- ``runner_warnings``: the lines the runner logged at WARNING and above during the kill.

The record goes to ``bench/results/<start time>-<culex commit>-cluster-failover.json``.
Prints a table; asserts nothing.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from child import HERE
from compare import RESULTS, machine
from server import arguments, find_binary

sys.path.insert(0, str(HERE.parent))  # the repository root: its tests/ package starts clusters
import culex
from culex._redis.keys import queue_keys
from tests.topology import Cluster, Node

SETTINGS = ("yes", "no")
TASK_S = 0.01
STEADY_S = 3.0  # load before the first kill, and between kills
AFTER_S = 3.0  # what is looked at after the cluster settled
began: list[tuple[str, float]] = []  # (queue, time.monotonic()) of every perform


class FailoverJob(culex.QueuedJob):
    queue = "failover-a"

    async def perform(self) -> None:
        began.append((self.queue, time.monotonic()))
        await asyncio.sleep(TASK_S)


def queue_per_master(cluster: Cluster) -> dict[str, Node]:
    """One queue name on each master (its hash tag decides)."""
    chosen: dict[Node, str] = {}
    index = 0
    while len(chosen) < len(cluster.masters()):
        name = f"failover{index}"
        chosen.setdefault(cluster.master_of_key(queue_keys("culex", name).waiting), name)
        index += 1
    return {name: node for node, name in chosen.items()}


class Producer(threading.Thread):
    """Enqueues ``rate`` tasks a second into ``queue`` until stopped; an enqueue that
    raised is sent again (same id), as a user would."""

    def __init__(self, job: type[culex.QueuedJob], rate: float) -> None:
        super().__init__(daemon=True)
        self.job, self.rate = job, rate
        self.stalls: list[tuple[float, float]] = []  # (start, seconds) of every enqueue
        self.errors: list[str] = []
        self.halt = threading.Event()

    def run(self) -> None:
        n = 0
        start = time.monotonic()
        while not self.halt.wait(max(0.0, start + n / self.rate - time.monotonic())):
            first = time.monotonic()
            while not self.halt.is_set():
                try:
                    self.job().enqueue(id=f"{self.job.queue}-{n}")
                    break
                except culex.CulexError as exc:
                    self.errors.append(f"{type(exc).__name__}: {exc}"[:200])
                    time.sleep(0.05)
            self.stalls.append((first, time.monotonic() - first))
            n += 1


class Counting(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.lines: list[tuple[float, str]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append((time.monotonic(), record.getMessage()[:300]))


def clusterdown(cluster: Cluster, nodes: list[Node]) -> int:
    total = 0
    for node in nodes:
        stats = node.client().info("errorstats").get("errorstat_CLUSTERDOWN")
        total += int(stats["count"]) if stats else 0
    return total


def longest_gap(starts: list[float], since: float, until: float) -> float:
    points = [since, *sorted(t for t in starts if since <= t <= until), until]
    return max(b - a for a, b in itertools.pairwise(points))


def kill_once(
    cluster: Cluster,
    victim_queue: str,
    queues: dict[str, Node],
    producers: dict[str, Producer],
    log: Counting,
) -> dict[str, Any]:
    victim = cluster.master_of_key(queue_keys("culex", victim_queue).waiting)
    healthy = [cluster.master_of_key(queue_keys("culex", q).waiting) for q in queues]
    healthy = [node for node in healthy if node is not victim]
    downs = clusterdown(cluster, healthy)
    lines = len(log.lines)
    killed_at = time.monotonic()
    cluster.kill(victim)
    cluster.wait_failover(victim, timeout=60)
    settled_at = time.monotonic()
    downs = clusterdown(cluster, healthy) - downs
    cluster.restart(victim, timeout=60)
    time.sleep(max(0.0, settled_at + AFTER_S - time.monotonic()))
    since, until = killed_at - 1.0, settled_at + AFTER_S
    gaps = {
        queue: longest_gap([t for q, t in began if q == queue], since, until)
        for queue in queues
        if queue != victim_queue
    }
    back = [t - settled_at for q, t in began if q == victim_queue and t >= settled_at]

    def stall(queue: str) -> float:
        found = [s for t, s in producers[queue].stalls if since <= t <= until]
        return round(max(found, default=0.0), 3)

    return {
        "victim_queue": victim_queue,
        "failover_s": round(settled_at - killed_at, 3),
        "healthy_gap_s": round(max(gaps.values()), 3),
        "victim_back_s": round(min(back), 3) if back else None,
        "clusterdown": downs,
        "enqueue_stall_s": {
            "healthy": max(stall(q) for q in queues if q != victim_queue),
            "victim": stall(victim_queue),
        },
        "runner_warnings": len(log.lines) - lines,
        "runner_warning_kinds": sorted({text[:60] for _, text in log.lines[lines:]}),
    }


async def measure(binary: str, full_coverage: bool, kills: int, rate: float) -> dict[str, Any]:
    began.clear()
    with (
        tempfile.TemporaryDirectory(prefix="culex-failover-") as folder,
        Cluster(Path(folder), full_coverage=full_coverage, binary=binary) as cluster,
    ):
        queues = queue_per_master(cluster)
        jobs = {q: type(f"Job_{q}", (FailoverJob,), {"queue": q}) for q in queues}
        culex.configure(redis_url=cluster.url, lease=5.0, concurrency=8)
        log = Counting()
        logging.getLogger("culex").addHandler(log)
        runner = culex.Runner(run_from=list(queues))
        running = asyncio.create_task(runner.arun())
        producers = {q: Producer(job, rate) for q, job in jobs.items()}
        for producer in producers.values():
            producer.start()
        try:
            kills_done = []
            order = list(queues)
            for n in range(kills):
                await asyncio.sleep(STEADY_S)
                victim_queue = order[n % len(order)]
                print(f"  kill {n + 1}/{kills}: the master of {victim_queue}", flush=True)
                kills_done.append(
                    await asyncio.to_thread(
                        kill_once, cluster, victim_queue, queues, producers, log
                    )
                )
        finally:
            for producer in producers.values():
                producer.halt.set()
                producer.join(10)
            runner.stop()
            await asyncio.wait_for(running, 30)
            logging.getLogger("culex").removeHandler(log)
            for job in jobs.values():
                culex.registry.remove(job)
    return {
        "cluster_require_full_coverage": "yes" if full_coverage else "no",
        "kills": kills_done,
        "enqueue_errors_retried": sum(len(p.errors) for p in producers.values()),
        "enqueue_error_kinds": sorted({e[:80] for p in producers.values() for e in p.errors}),
    }


def render(results: dict[str, dict[str, Any]]) -> str:
    head = (
        "| full coverage | failover s | healthy queues' longest gap s | victim back after "
        "settled s | CLUSTERDOWN | enqueue stall healthy / victim s | runner warnings |"
    )
    lines = [head, "|---|---|---|---|---|---|---|"]

    def cell(values: list[Any]) -> str:
        known = [v for v in values if v is not None]
        if not known:
            return "-"
        low, high = min(known), max(known)
        middle = statistics.median(known)
        if isinstance(middle, float):
            return f"{middle:.2f} ({low:.2f}-{high:.2f})"
        return f"{middle} ({low}-{high})"

    for setting, got in results.items():
        kills = got["kills"]
        lines.append(
            f"| {setting} | {cell([k['failover_s'] for k in kills])} "
            f"| {cell([k['healthy_gap_s'] for k in kills])} "
            f"| {cell([k['victim_back_s'] for k in kills])} "
            f"| {cell([k['clusterdown'] for k in kills])} "
            f"| {cell([k['enqueue_stall_s']['healthy'] for k in kills])} / "
            f"{cell([k['enqueue_stall_s']['victim'] for k in kills])} "
            f"| {cell([k['runner_warnings'] for k in kills])} |"
        )
    return "\n".join(lines) + "\n(medians of the kills, (lowest-highest))"


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--kills", type=int, default=3)
    parser.add_argument("--rate", type=float, default=30.0, help="tasks a second per queue")
    parser.add_argument("--only", choices=SETTINGS, help="one setting of full coverage")
    args = parser.parse_args()
    binary = find_binary(args.server)
    started = time.strftime("%Y%m%d-%H%M%S")
    info = machine()
    info["server_binary"] = binary
    results: dict[str, dict[str, Any]] = {}
    for setting in [args.only] if args.only else list(SETTINGS):
        print(f"cluster-require-full-coverage {setting}", flush=True)
        results[setting] = asyncio.run(measure(binary, setting == "yes", args.kills, args.rate))
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{started}-{(info['culex_commit'] or 'unknown')[:7]}-cluster-failover.json"
    text = render(results)
    record = {
        "command": sys.argv,
        "machine": info,
        "settings": {"kills": args.kills, "rate": args.rate, "task_s": TASK_S},
        "results": results,
        "table": text,
    }
    out.write_text(json.dumps(record, indent=1))
    print()
    print(text)
    print(f"\nthe run's record: {out}")


if __name__ == "__main__":
    main()
