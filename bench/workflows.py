"""Workflows: what an edge costs the server, how soon a downstream starts after its last
upstream ended, and what the workflow machinery costs tasks outside any workflow.

    python bench/workflows.py                          # all three parts
    python bench/workflows.py --only cost --edges 100000
    python bench/workflows.py --only drain --base /tmp/base-ac6d054/src --runs 5

- ``cost``: a fan-out (one root, N downstreams) and a chord (N upstreams, one body) of a
  no-op job, enqueued and run to the end by one runner, and N no-op tasks outside any
  workflow (``enqueue_many``, drained by the same runner) beside them. For each: the
  server's INFO commandstats usec over the enqueue and over the run, divided by N (the
  edges; the tasks for the plain ones), and the CPU it used (INFO cpu). A second fan-out
  of at most 10,000 with the slowlog logging every call gives each script's share of the
  scripts' time (the slowlog's own cost inflates the sum; the shares stand).
- ``latency``: ``--latency-runs`` runs of two upstreams into one downstream, on three
  queues, one run at a time, ``--gap`` s apart; each node stamps its perform's start and
  end (perf_counter, in the runner's own process): latency = the downstream's start minus
  the later of its upstreams' ends (the upstream's report, the release, the claim).
  p50/p99, on one server and on a cluster of 3 masters (a queue on each).
- ``drain``: N no-op tasks outside any workflow, enqueued with ``enqueue_many``, drained
  by one runner in its own process, for this checkout and for ``--base`` (a checkout from
  before workflows: ``git archive ac6d054 src | tar -x -C /tmp/base-ac6d054``, made when
  missing), in turns; the runner's hot path changed (claim's 9th element, complete's
  ``on_end`` read, the releaser loop). The rates' medians and the median of the per-run
  ratios (this / base).

Each measure runs in a child process with the checkout first on its path, on private
servers without persistence (bench/server.py; the cluster as bench/cluster.py makes it),
flushed in between. Prints the figures; asserts nothing.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import child
import redis
from server import arguments, find_binary, private_server, server_cpu

HERE = Path(__file__).resolve().parent
SRC = HERE.parent / "src"
BASE_COMMIT = "ac6d054"
PARTS = ("cost", "latency", "drain")
SHARES_EDGES = 10_000

CHILD = """
import asyncio, json, sys, time
import redis as redispy
import culex

url, mode, n, queues = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4].split(",")
culex.configure(redis_url=url)
done = [0]
finished = asyncio.Event()
stamps = {}  # key -> [upstream ends..., downstream start]

class Noop(culex.QueuedJob):
    queue = queues[0]
    async def perform(self) -> None:
        done[0] += 1
        if done[0] >= target[0]:
            finished.set()

class Up(culex.QueuedJob):
    queue = queues[0]
    k: int
    async def perform(self) -> None:
        stamps.setdefault(self.k, {}).setdefault("ends", []).append(time.perf_counter())

class Up2(Up):
    queue = queues[1 % len(queues)]

class Down(culex.QueuedJob):
    queue = queues[2 % len(queues)]
    k: int
    async def perform(self) -> None:
        stamps.setdefault(self.k, {})["start"] = time.perf_counter()

target = [n]

def stats(url):
    if url.startswith("redis+cluster://"):
        return {}
    info = redispy.Redis.from_url(url).info("commandstats")
    return {k.removeprefix("cmdstat_"): v["usec"] for k, v in info.items()}

async def run_to_end(runner, coro):
    task = asyncio.create_task(runner.arun())
    try:
        return await coro
    finally:
        runner.stop()
        await task

async def cost(shape):
    wf = culex.Workflow(ttl=60)
    if shape == "fan":
        root = wf.add(Noop())
        for _ in range(n):
            wf.add(Noop(), after=[root])
    else:
        ups = [wf.add(Noop()) for _ in range(n)]
        wf.add(Noop(), after=ups)
    before = stats(url)
    t0 = time.perf_counter()
    run = await wf.aenqueue()
    t1 = time.perf_counter()
    stored = stats(url)
    runner = culex.Runner(run_from=queues[:1], concurrency=50)
    state = await run_to_end(runner, run.await_(timeout=1200))
    t2 = time.perf_counter()
    return {"state": state, "enqueue_s": t1 - t0, "run_s": t2 - t1,
            "before": before, "stored": stored, "after": stats(url)}

async def plain():
    for start in range(0, n, 1000):
        await culex.aenqueue_many([Noop() for _ in range(min(1000, n - start))])
    before = stats(url)
    t0 = time.perf_counter()
    runner = culex.Runner(run_from=queues[:1], concurrency=50)
    await run_to_end(runner, finished.wait())
    took = time.perf_counter() - t0
    return {"rate": n / took, "run_s": took, "before": before, "stored": before,
            "after": stats(url)}

async def latency(gap):
    runner = culex.Runner(run_from=queues, concurrency=20)
    async def runs():
        await asyncio.sleep(0.5)
        for k in range(n):
            wf = culex.Workflow(ttl=60)
            a, b = wf.add(Up(k=k)), wf.add(Up2(k=k))
            wf.add(Down(k=k), after=[a, b])
            run = await wf.aenqueue()
            await run.await_(timeout=30)
            await asyncio.sleep(gap)
    await run_to_end(runner, runs())
    late = [s["start"] - max(s["ends"]) for s in stamps.values()]
    return {"latencies": late}

if mode == "latency":
    out = asyncio.run(latency(float(sys.argv[5])))
elif mode == "plain":
    out = asyncio.run(plain())
else:
    out = asyncio.run(cost(mode))
print(json.dumps(out))
"""


def in_child(src: Path, url: str, mode: str, n: int, queues: list[str], *extra: str) -> Any:
    return child.run(
        sys.executable,
        ["-c", CHILD, url, mode, str(n), ",".join(queues), *extra],
        what=f"{mode} with {src}",
        env={**os.environ, "PYTHONPATH": str(src)},
        timeout=1800,
    )


def usec(before: dict[str, int], after: dict[str, int], only: str) -> int:
    """Server usec of command ``only`` between two commandstats."""
    return after.get(only, 0) - before.get(only, 0)


def part_cost(binary: str, edges: int) -> None:
    print(f"## cost: server usec per edge, N = {edges:,}\n")
    print("| what | enqueue: scripts / N | run: scripts / N | server CPU / N "
          "| wall enqueue + run (s) |")  # fmt: skip
    print("|---|---|---|---|---|")
    with private_server(binary) as server:
        client = redis.Redis.from_url(server.url)
        for mode, label in (("plain", "plain tasks"), ("fan", "fan-out"), ("chord", "chord")):
            client.flushall()
            cpu = server_cpu(client)
            got = in_child(SRC, server.url, mode, edges, ["wfb"])
            used = server_cpu(client) - cpu
            b, s, a = got["before"], got["stored"], got["after"]
            print(
                f"| {label} | {usec(b, s, 'evalsha') / edges:.1f} "
                f"| {usec(s, a, 'evalsha') / edges:.1f} "
                f"| {used / edges * 1e6:.1f} | {got.get('enqueue_s', 0):.1f} + "
                f"{got['run_s']:.1f} |",
                flush=True,
            )
        client.flushall()
        edges = min(edges, SHARES_EDGES)  # (the slowlog holds every call: a bounded run)
        print(f"\nEach script's share of the scripts' time (a fan-out of {edges:,}, the slowlog")
        print("on: it logs the commands the scripts call too, and its own cost inflates the")
        print("usec; the shares stand):\n")
        client.config_set("slowlog-log-slower-than", 0)
        client.config_set("slowlog-max-len", 40 * edges + 1000)
        client.slowlog_reset()
        in_child(SRC, server.url, "fan", edges, ["wfb"])
        shares = script_shares(client)
        client.config_set("slowlog-log-slower-than", 10000)
        total = sum(shares.values())
        print("| script | share | usec / edge (slowlog on) |")
        print("|---|---|---|")
        for name, spent in sorted(shares.items(), key=lambda kv: -kv[1]):
            print(f"| {name} | {spent / total:.0%} | {spent / edges:.1f} |")


def script_shares(client: redis.Redis) -> dict[str, int]:
    """usec by script (EVALSHA's sha named) in the slowlog."""
    sys.path.insert(0, str(SRC))
    from culex._redis import scripts

    names = {s.sha: s.name for s in vars(scripts).values() if isinstance(s, scripts.Script)}
    spent: dict[str, int] = {}
    for entry in client.slowlog_get(-1):
        words = entry["command"].split()
        if words[0].upper() != b"EVALSHA":
            continue  # (the slowlog also has the commands the scripts called)
        name = names.get(words[1].decode(), words[1].decode()[:8])
        spent[name] = spent.get(name, 0) + int(entry["duration"])
    return spent


def percentiles(values: list[float]) -> str:
    ordered = sorted(values)
    p50 = ordered[len(ordered) // 2]
    p90 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.9))]
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return f"{p50 * 1000:.2f} | {p90 * 1000:.2f} | {p99 * 1000:.2f} | {ordered[-1] * 1000:.2f}"


def part_latency(binary: str, runs: int, gap: float) -> None:
    from cluster import choose_queues, deployed

    print(f"\n## latency: last upstream's end -> downstream's start, {runs} runs\n")
    print("| deployment | p50 (ms) | p90 (ms) | p99 (ms) | max (ms) |")
    print("|---|---|---|---|---|")
    with private_server(binary) as server:
        got = in_child(SRC, server.url, "latency", runs, ["wfl-a", "wfl-b", "wfl-c"], str(gap))
        print(f"| standalone | {percentiles(got['latencies'])} |", flush=True)
    queues = [group[0] for group in choose_queues(1)]
    with deployed("3-shards", binary, [[q] for q in queues]) as deployment:
        got = in_child(SRC, deployment.url, "latency", runs, queues, str(gap))
        print(f"| cluster, 3 masters | {percentiles(got['latencies'])} |", flush=True)


def base_checkout(path: Path) -> Path:
    """The src of the checkout before workflows, made with git archive when missing."""
    if not (path / "culex").is_dir():
        folder = path.parent if path.name == "src" else path
        folder.mkdir(parents=True, exist_ok=True)
        archive = subprocess.run(
            ["git", "-C", str(HERE.parent), "archive", BASE_COMMIT, "src"],
            check=True,
            capture_output=True,
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(folder)], input=archive, check=True)
        path = folder / "src"
    return path


def part_drain(binary: str, tasks: int, runs: int, base: Path) -> None:
    base = base_checkout(base)
    print(f"\n## drain: {tasks:,} no-op tasks outside any workflow, one runner, {runs} runs\n")
    rates: dict[str, list[float]] = {"base": [], "this": []}
    with private_server(binary) as server:
        client = redis.Redis.from_url(server.url)
        for run in range(runs):
            order = ("base", "this") if run % 2 == 0 else ("this", "base")
            for name in order:
                client.flushall()
                src = base if name == "base" else SRC
                got = in_child(src, server.url, "plain", tasks, ["wfd"])
                rates[name].append(got["rate"])
                print(f"run {run + 1} {name:<4} {got['rate']:>9,.0f} tasks/s", flush=True)
    ratios = [t / b for t, b in zip(rates["this"], rates["base"], strict=True)]
    print("\n| base (tasks/s) | this (tasks/s) | this / base (median of runs) |")
    print("|---|---|---|")
    print(
        f"| {statistics.median(rates['base']):,.0f} | {statistics.median(rates['this']):,.0f} "
        f"| {statistics.median(ratios):.3f} |"
    )


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--only", default=",".join(PARTS))
    parser.add_argument("--edges", type=int, default=10_000)
    parser.add_argument("--latency-runs", type=int, default=300)
    parser.add_argument("--gap", type=float, default=0.01)
    parser.add_argument("--tasks", type=int, default=20_000)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument(
        "--base", type=Path, default=Path(tempfile.gettempdir()) / "base-ac6d054" / "src"
    )
    args = parser.parse_args()
    binary = find_binary(args.server)
    print(f"server: {binary}\n")
    parts = args.only.split(",")
    if "cost" in parts:
        part_cost(binary, args.edges)
    if "latency" in parts:
        part_latency(binary, args.latency_runs, args.gap)
    if "drain" in parts:
        part_drain(binary, args.tasks, args.runs, args.base)


if __name__ == "__main__":
    main()
