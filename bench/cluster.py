"""culex on a Redis Cluster: enqueue and drain rates with one runner per shard, beside one
shard and a standalone server, and what each shard's master spends and is sent per task.

    python bench/cluster.py                        # 60,000 tasks over 6 queues, 3 runs
    python bench/cluster.py --tasks 6000 --runs 1  # smaller, one run
    python bench/cluster.py --only standalone,3-shards
    python bench/cluster.py table bench/results/FILE-cluster.json   # its tables again

Deployments, each started privately on free ports of 127.0.0.1 from the same server binary
(``--server``, as every bench script), without persistence, and stopped at the end:

- ``standalone``: one server, culex's own client (``redis://``);
- ``standalone-redispy``: the same, through redis-py (``driver="redis-py"``), the client
  culex uses on a cluster, so the price of the client is told apart from the cluster's;
- ``1-shard``: a cluster of one master serving all 16,384 slots (``redis+cluster://``);
- ``3-shards``: a cluster of 3 masters, each serving a third of the slots;
- ``3-shards-replicas``: the same with a replica for each master (6 servers).

The queues (``--queues-per-shard`` for each of 3 slot ranges, named so that their hash tags
fall in them) and the tasks (round-robin over the queues) are the same everywhere. A task
does nothing (no I/O: the runner's own cost); the runners log at WARNING. For each
deployment: A, one ``enqueue()`` per task in one producer process; B, the tasks A left
drained by one runner per shard (each given ``--run-from`` its shard's queues, also on one
server, so the runners are the same everywhere); A2, ``culex.enqueue_many``; B1, the tasks
A2 left drained by ONE runner given every queue; and on 3 masters A again with every task
in the first master's queues (A-one-master: one server, the same client). The drain's
clock starts before the runners are spawned and stops when no task of any queue is
waiting or pending (the harness looks every POLL seconds with ZCARD, on each master its
own queues); "after start-up" counts from the first claim.

Around each phase, each master's INFO cpu (used_cpu_user + used_cpu_sys), commandstats and
errorstats: the server CPU and the calls per task of that shard's queues (the harness's
INFO and ZCARD taken out), and any MOVED, ASK, TRYAGAIN or CROSSSLOT reply. Each runner's
own CPU (utime + stime, start-up included) per task it ran. The record goes to
``bench/results/<start time>-<culex commit>-cluster.json`` with the pip freeze.
Prints the tables; asserts nothing.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import peers
import redis
import report
from child import HERE, answer
from compare import RESULTS, machine, source_digest
from server import arguments, find_binary, private_server, server_cpu

sys.path.insert(0, str(HERE.parent))  # the repository root: its tests/ package starts clusters
from culex._redis.keys import queue_keys
from tests.topology import HOST, SLOTS, Cluster, Node, free_ports, keyslot

SHARDS = 3  # slot ranges the queues are chosen from, whatever the deployment
POLL = 0.01  # seconds between two looks at the queues during a drain
MODULE = "cluster_jobs"
DEPLOYMENTS = ("standalone", "standalone-redispy", "1-shard", "3-shards", "3-shards-replicas")
REDIRECTS = ("MOVED", "ASK", "TRYAGAIN", "CROSSSLOT", "CLUSTERDOWN")
# What a client sends once per connection or process, not per task.
SETUP = ("command", "config|get", "cluster|slots", "cluster|shards", "cluster|nodes",
         "client|setinfo", "hello", "ping", "script|load", "select")  # fmt: skip


def slot_ranges(masters: int) -> list[tuple[int, int]]:
    """Equal ranges of the slots, one per master, in order."""
    return [(m * SLOTS // masters, (m + 1) * SLOTS // masters - 1) for m in range(masters)]


def shard_of_slot(slot: int, masters: int) -> int:
    return next(m for m, (a, b) in enumerate(slot_ranges(masters)) if a <= slot <= b)


def choose_queues(per_shard: int) -> list[list[str]]:
    """``per_shard`` queue names for each of SHARDS slot ranges (their hash tag decides)."""
    groups: list[list[str]] = [[] for _ in range(SHARDS)]
    index = 0
    while any(len(g) < per_shard for g in groups):
        name = f"bench{index}"
        group = groups[shard_of_slot(keyslot(name), SHARDS)]
        if len(group) < per_shard:
            group.append(name)
        index += 1
    return groups


class BenchCluster(Cluster):
    """``masters`` masters serving equal slot ranges, ``replicas`` replicas each, no
    persistence (as the bench's standalone server). Made with CLUSTER ADDSLOTSRANGE, MEET
    and REPLICATE: ``--cluster create`` refuses fewer than 3 masters."""

    def __init__(self, folder: Path, masters: int, replicas: int, binary: str) -> None:
        super().__init__(folder, masters=masters, binary=binary)
        self.replica_count = replicas

    def start(self) -> None:
        count = self.master_count * (1 + self.replica_count)
        ports = free_ports(2 * count)
        for index, (port, bus) in enumerate(zip(ports[::2], ports[1::2], strict=True)):
            folder = self.folder / f"node-{port}"
            argv = [self.server, "--port", str(port), "--bind", HOST, "--dir", str(folder),
                    "--cluster-enabled", "yes", "--cluster-port", str(bus),
                    "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(self.node_timeout_ms),
                    "--appendonly", "no", "--save", ""]  # fmt: skip
            self.nodes.append(Node(f"cluster node {index}", port, folder, argv))
        for node in self.nodes:
            node.start()
        first = self.nodes[0]
        for node, (low, high) in zip(self.nodes, slot_ranges(self.master_count), strict=False):
            node.client().execute_command("CLUSTER", "ADDSLOTSRANGE", low, high)
        for node in self.nodes[1:]:
            node.client().execute_command("CLUSTER", "MEET", HOST, first.port, ports[1])
        for index, replica in enumerate(self.nodes[self.master_count :]):
            master = self.nodes[index % self.master_count]
            master_id = master.client().execute_command("CLUSTER", "MYID")
            self._replicate(replica, master_id)
        self.wait_settled(60)

    def _replicate(self, replica: Node, master_id: str) -> None:
        deadline = time.monotonic() + 30
        while True:  # the replica must have heard of the master through the gossip first
            try:
                replica.client().execute_command("CLUSTER", "REPLICATE", master_id)
                return
            except redis.ResponseError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.05)


@dataclass
class Deployment:
    """What the phases need of a started deployment."""

    name: str
    url: str  # what the producer and the runners are given
    masters: list[redis.Redis]  # a client of each master, in slot order
    groups: list[list[str]]  # the queues, by the shard (slot range) they were chosen for
    env: dict[str, str] = field(default_factory=dict)  # more settings for culex processes
    replicas: list[list[redis.Redis]] = field(default_factory=list)  # each master's replicas

    def master_of(self, queue: str) -> int:
        return shard_of_slot(keyslot(queue), len(self.masters))

    def queues_of(self, master: int) -> list[str]:
        return [q for g in self.groups for q in g if self.master_of(q) == master]

    @property
    def queues(self) -> list[str]:
        return [q for g in self.groups for q in g]


@contextlib.contextmanager
def deployed(name: str, binary: str, groups: list[list[str]]) -> Iterator[Deployment]:
    if name.startswith("standalone"):
        with private_server(binary) as server:
            client = redis.Redis.from_url(server.url)
            env = {"CULEX_DRIVER": "redis-py"} if name == "standalone-redispy" else {}
            yield Deployment(name, server.url, [client], groups, env)
            client.close()
        return
    masters = 1 if name == "1-shard" else SHARDS
    replicas = 1 if name.endswith("-replicas") else 0
    with (
        tempfile.TemporaryDirectory(prefix="culex-bench-cluster-") as folder,
        BenchCluster(Path(folder), masters, replicas, binary) as cluster,
    ):
        nodes = cluster.masters()
        url = "redis+cluster://" + ",".join(node.address for node in nodes)
        clients = [redis.Redis(host=HOST, port=node.port) for node in nodes]
        followers = [
            [redis.Redis(host=HOST, port=node.port) for node in cluster.replicas_of(master)]
            for master in nodes
        ]
        yield Deployment(name, url, clients, groups, replicas=followers)
        for client in [*clients, *(c for group in followers for c in group)]:
            client.close()


# -- what the masters say -----------------------------------------------------------------


def snapshot(client: redis.Redis) -> dict[str, Any]:
    cpu = client.info("cpu")
    calls = {
        name.removeprefix("cmdstat_"): int(stats["calls"])
        for name, stats in client.info("commandstats").items()
    }
    errors = {
        name.removeprefix("errorstat_"): int(stats["count"])
        for name, stats in client.info("errorstats").items()
    }
    return {
        "cpu": float(cpu["used_cpu_user"]) + float(cpu["used_cpu_sys"]),
        "calls": calls,
        "errors": errors,
    }


def snapshots(deployment: Deployment) -> list[dict[str, Any]]:
    """Each master's snapshot, with the CPU its replicas have used (``replica_cpu``)."""
    taken = [snapshot(client) for client in deployment.masters]
    for index, replicas in enumerate(deployment.replicas):
        if replicas:
            taken[index]["replica_cpu"] = sum(server_cpu(replica) for replica in replicas)
    return taken


def waiting(deployment: Deployment) -> dict[str, int]:
    """The tasks waiting in each queue, as its master counts them."""
    return {
        queue: int(deployment.masters[m].zcard(queue_keys("culex", queue).waiting))
        for m in range(len(deployment.masters))
        for queue in deployment.queues_of(m)
    }


def shard_figures(
    deployment: Deployment,
    before: list[dict[str, Any]],
    after: list[dict[str, Any]],
    polls: list[int],
    tasks: dict[str, int],
) -> list[dict[str, Any]]:
    """Per master, from the snapshots before and after: the tasks of its queues (``tasks``
    by queue, as counted in them), server CPU and calls per task (without the harness's
    own), and the redirections it answered."""
    shards = []
    for index, (old, new) in enumerate(zip(before, after, strict=True)):
        own = sum(tasks[q] for q in deployment.queues_of(index))
        calls = {k: v - old["calls"].get(k, 0) for k, v in new["calls"].items()}
        calls["zcard"] = calls.get("zcard", 0) - polls[index]  # the harness's looks
        calls = {k: v for k, v in calls.items() if v and k != "info"}
        errors = {k: v - old["errors"].get(k, 0) for k, v in new["errors"].items()}
        shards.append(
            {
                "queues": deployment.queues_of(index),
                "tasks": own,
                "server_cpu_s": new["cpu"] - old["cpu"],
                "server_cpu_us_per_task": (new["cpu"] - old["cpu"]) * 1e6 / own if own else None,
                "replica_cpu_us_per_task": (
                    (new["replica_cpu"] - old["replica_cpu"]) * 1e6 / own
                    if own and "replica_cpu" in new
                    else None
                ),
                "calls": calls,
                "calls_per_task": {k: v / own for k, v in calls.items()} if own else None,
                "redirections": sum(errors.get(k, 0) for k in REDIRECTS),
                "errors": {k: v for k, v in errors.items() if v},
            }
        )
    return shards


def spread(values: list[float]) -> float:
    """(largest - smallest) / mean: 0 for an even split."""
    mean = statistics.mean(values) if values else 0.0
    return (max(values) - min(values)) / mean if mean else 0.0


# -- the phases ---------------------------------------------------------------------------


def jobs_folder(queues: list[str]) -> Path:
    """A folder holding the job module: one no-op job per queue (Noop0 in queues[0], ...)."""
    lines = ["import culex", ""]
    for index, queue in enumerate(queues):
        lines += [
            f"class Noop{index}(culex.QueuedJob):",
            f"    queue = {queue!r}",
            "",
            "    async def perform(self) -> None:",
            "        pass",
            "",
        ]
    lines.append(f"JOBS = [{', '.join(f'Noop{i}' for i in range(len(queues)))}]")
    folder = Path(tempfile.mkdtemp(prefix="culex-bench-cluster-jobs-"))
    (folder / f"{MODULE}.py").write_text("\n".join(lines) + "\n")
    return folder


def culex_env(deployment: Deployment) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, "CULEX_REDIS_URL": deployment.url, **deployment.env}


def enqueue(deployment: Deployment, folder: Path, how: str, tasks: int) -> dict[str, Any]:
    """A (``one``) or A2 (``many``): ``tasks`` round-robin over the queues, in a child."""
    before = snapshots(deployment)
    out = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "produce", how, str(tasks)],
        cwd=folder,
        env=culex_env(deployment),
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    if out.returncode != 0:
        raise RuntimeError(f"{deployment.name}: produce {how} failed: {out.stderr[-2000:]}")
    after = snapshots(deployment)
    result = dict(json.loads(out.stdout.strip().splitlines()[-1]))
    result["shards"] = shard_figures(
        deployment, before, after, [0] * len(before), waiting(deployment)
    )
    return result


def produce(how: str, tasks: int) -> None:
    """The child of :func:`enqueue`: runs in the job folder, the URL in the environment."""
    sys.path.insert(0, os.getcwd())
    import culex

    jobs = __import__(MODULE).JOBS
    made = [jobs[i % len(jobs)]() for i in range(tasks)]
    start, cpu = time.perf_counter(), time.process_time()
    if how == "one":
        for job in made:
            job.enqueue()
    else:
        culex.enqueue_many(made)
    elapsed, used = time.perf_counter() - start, time.process_time() - cpu
    answer({"rate": tasks / elapsed, "producer_cpu_us_per_task": used * 1e6 / tasks})


def cpu_seconds(pid: int) -> float:
    """utime + stime of a running process (/proc/PID/stat fields 14 and 15)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def check_succeeded(deployment: Deployment) -> None:
    """Every task left its queue as a success: none dead, none scheduled for a retry."""
    for master, client in enumerate(deployment.masters):
        for queue in deployment.queues_of(master):
            keys = queue_keys("culex", queue)
            failed = client.zcard(keys.dead) + client.zcard(keys.scheduled)
            if failed:
                raise RuntimeError(f"{deployment.name}: {failed} tasks of {queue} failed")


def drain(
    deployment: Deployment, folder: Path, groups: list[list[str]], tasks: int, concurrency: int
) -> dict[str, Any]:
    """B: the ``tasks`` waiting are drained by one runner per group of queues."""
    keys = [
        [queue_keys("culex", q) for q in deployment.queues_of(m)]
        for m in range(len(deployment.masters))
    ]
    pipes = [client.pipeline(transaction=False) for client in deployment.masters]
    polls = [0] * len(pipes)
    log = folder / f"{deployment.name}-{len(groups)}.log"

    def left(master: int) -> tuple[int, int]:
        """Tasks of ``master``'s queues waiting, and waiting or pending."""
        pipe = pipes[master]
        for k in keys[master]:
            pipe.zcard(k.waiting)
            pipe.zcard(k.pending)
        counts = pipe.execute()
        polls[master] += len(counts)
        return sum(counts[::2]), sum(counts)

    counted = waiting(deployment)
    if sum(counted.values()) != tasks:
        raise RuntimeError(f"{deployment.name}: {sum(counted.values())} tasks wait, not {tasks}")
    before = snapshots(deployment)
    start = time.perf_counter()
    runners = []
    with open(log, "ab") as out:
        for group in groups:
            command = [
                sys.executable,
                "-m",
                "culex",
                "--log-level",
                "WARNING",
                "run",
                MODULE,
                "--concurrency",
                str(concurrency),
                "--run-from",
                ",".join(group),
            ]
            runners.append(
                subprocess.Popen(
                    command,
                    cwd=folder,
                    env=culex_env(deployment),
                    stdout=out,
                    stderr=subprocess.STDOUT,
                    start_new_session=True,
                )
            )
    first: float | None = None
    done: list[float | None] = [None] * len(pipes)
    try:
        while None in done:
            unclaimed = 0
            for master in range(len(pipes)):
                if done[master] is None:
                    still, busy = left(master)
                    unclaimed += still
                    if not busy:
                        done[master] = time.perf_counter() - start
            if first is None and unclaimed < tasks:
                first = time.perf_counter() - start
            if any(r.poll() is not None for r in runners):
                raise RuntimeError(f"a runner exited: {log.read_text()[-2000:]}")
            if time.perf_counter() - start > 120 + tasks / 100:
                raise TimeoutError(f"{deployment.name}: no end: {log.read_text()[-2000:]}")
            time.sleep(POLL)
        elapsed = time.perf_counter() - start
        shards = shard_figures(deployment, before, snapshots(deployment), polls, counted)
        cpu = [cpu_seconds(r.pid) for r in runners]
        check_succeeded(deployment)
    finally:
        for runner in runners:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(runner.pid, signal.SIGTERM)
        for runner in runners:
            runner.wait(30)
    for pipe in pipes:
        pipe.reset()
    first = first or elapsed
    return {
        "rate": tasks / elapsed,
        "first_claim_s": first,
        "rate_after_first": tasks / (elapsed - first) if elapsed > first else None,
        "drained_s": {str(m): t for m, t in enumerate(done)},
        "shards": shards,
        "runners": [
            {
                "queues": group,
                "cpu_s": used,
                "tasks": sum(counted[q] for q in group),
                "cpu_us_per_task": used * 1e6 / sum(counted[q] for q in group),
            }
            for group, used in zip(groups, cpu, strict=True)
        ],
    }


def measure(deployment: Deployment, tasks: int, concurrency: int) -> dict[str, Any]:
    """A, B (a runner per shard), A2, B1 (one runner), each on emptied masters."""
    folder = jobs_folder(deployment.queues)
    results: dict[str, Any] = {}
    try:
        for client in deployment.masters:
            client.flushall()
        results["A"] = enqueue(deployment, folder, "one", tasks)
        results["B"] = drain(deployment, folder, deployment.groups, tasks, concurrency)
        for client in deployment.masters:
            client.flushall()
        results["A2"] = enqueue(deployment, folder, "many", tasks)
        results["B1"] = drain(deployment, folder, [deployment.queues], tasks, concurrency)
        if len(deployment.masters) > 1:
            for client in deployment.masters:
                client.flushall()
            first = jobs_folder(deployment.queues_of(0))
            try:
                results["A-one-master"] = enqueue(deployment, first, "one", tasks)
            finally:
                shutil.rmtree(first, ignore_errors=True)
        for client in deployment.masters:
            client.flushall()
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return results


# -- the tables ---------------------------------------------------------------------------


def shard_cells(phase: dict[str, Any], what: str) -> str:
    values = [s[what] for s in phase["shards"]]
    text = " / ".join(report.number(v) for v in values)
    return f"{text} (spread {spread(values):.0%})" if len(values) > 1 else text


def median_of(runs: list[Any]) -> Any:
    """report.median_tree, with lists (the masters, the runners) taken item by item."""
    present = [r for r in runs if r is not None]
    if present and all(isinstance(r, dict) for r in present):
        keys = dict.fromkeys(k for r in present for k in r)
        return {k: median_of([r.get(k) for r in present]) for k in keys}
    lists = all(isinstance(r, list) for r in present)
    if present and lists and len({len(r) for r in present}) == 1:
        return [median_of(list(items)) for items in zip(*present, strict=True)]
    return report.median_tree(present)


RATES = (("A", "rate"), ("A2", "rate"), ("B", "rate"), ("B", "rate_after_first"), ("B1", "rate"))


def run_ratios(runs: list[dict[str, Any]]) -> dict[str, dict[str, float]]:
    """Each rate of each deployment as a ratio to standalone's in the same run, the median
    over the runs: the machine drifts between runs more than within one."""
    ratios: dict[str, dict[str, float]] = {}
    for name in runs[0]:
        ratios[name] = {
            f"{phase}.{what}": statistics.median(
                run[name][phase][what] / run["standalone"][phase][what] for run in runs
            )
            for phase, what in RATES
            if "standalone" in runs[0]
        }
    return ratios


def render(
    medians: dict[str, Any], ratios: dict[str, dict[str, float]], tasks: int, per_shard: int
) -> str:
    lines = [
        f"{tasks:,} no-op tasks over {per_shard * SHARDS} queues ({per_shard} per slot range)",
        "",
        "| deployment | A enqueue, 1 call/task (/s) | A2 bulk enqueue (/s) | B drain, a runner per "
        "shard (/s) | B after start-up (/s) | B1 drain, 1 runner (/s) | server CPU in B per "
        "master (µs/task) | server CPU in A per master (µs/task) | producer CPU in A (µs/task) "
        "| runners' CPU in B (µs/task) |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, got in medians.items():
        rates = []
        for phase, what in RATES:
            rate = got[phase][what]
            ratio = ratios[name].get(f"{phase}.{what}")
            shown = f" ({ratio:.2f}x)" if ratio is not None and name != "standalone" else ""
            rates.append(f"{rate:,.0f}{shown}")
        cpu_b = shard_cells(got["B"], "server_cpu_us_per_task")
        cpu_a = shard_cells(got["A"], "server_cpu_us_per_task")
        producer = report.number(got["A"]["producer_cpu_us_per_task"])
        runners = sum(r["cpu_s"] for r in got["B"]["runners"]) * 1e6 / tasks
        lines.append(
            f"| {name} | {' | '.join(rates)} | {cpu_b} | {cpu_a} | {producer} | "
            f"{report.number(runners)} |"
        )
    lines.append("")
    lines.append(
        "Rates: medians of the runs. Ratios: to standalone (culex's own client) in the same "
        "run, the median over the runs."
    )
    for name, got in medians.items():
        if len(got["B"]["shards"]) > 1:
            lines += ["", *per_master(name, got)]
    return "\n".join(lines)


def per_master(name: str, got: dict[str, Any]) -> list[str]:
    """The table of one sharded deployment: what each master did for its own tasks."""
    lines = [
        f"{name}, per master (B: a runner per shard, each given its master's queues):",
        "",
        "| master | queues | tasks | B drained at (s) | server CPU in B (µs/task) | scripts "
        "in B (per 1,000 tasks) | commands in B, scripts' own included (per task) | server "
        "CPU in A (µs/task) | scripts in A (per task) | redirections in A, B | its runner's "
        "CPU in B (µs/task) |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    setup = []
    for index, shard in enumerate(got["B"]["shards"]):
        a = got["A"]["shards"][index]
        runner = next(r for r in got["B"]["runners"] if set(r["queues"]) == set(shard["queues"]))
        lines.append(
            f"| {index} | {', '.join(shard['queues'])} | {shard['tasks']:,} | "
            f"{got['B']['drained_s'][str(index)]:.2f} | "
            f"{report.number(shard['server_cpu_us_per_task'])} | "
            f"{scripts(shard) * 1000:.1f} | {per_task(shard):.2f} | "
            f"{report.number(a['server_cpu_us_per_task'])} | {scripts(a):.3f} | "
            f"{a['redirections']}, {shard['redirections']} | "
            f"{report.number(runner['cpu_us_per_task'])} |"
        )
        once = ", ".join(f"{k} {v:g}" for k, v in shard["calls"].items() if k in SETUP)
        setup.append(f"master {index}: {once or 'none'}")
    lines += ["", "Calls in B that are not per task (connecting): " + "; ".join(setup) + "."]
    if got["B"]["shards"][0].get("replica_cpu_us_per_task") is not None:
        lines += [
            "",
            "The replicas' own CPU per task of their master's queues: in B "
            + shard_cells(got["B"], "replica_cpu_us_per_task")
            + " µs; in A "
            + shard_cells(got["A"], "replica_cpu_us_per_task")
            + " µs.",
        ]
    alone = got.get("A-one-master")
    if alone:
        lines += [
            "",
            f"A with every task in master 0's queues: {alone['rate']:,.0f}/s "
            f"(round-robin over the masters: {got['A']['rate']:,.0f}/s); server CPU "
            f"{report.number(alone['shards'][0]['server_cpu_us_per_task'])} µs/task on master 0 "
            f"(round-robin: {report.number(total_cpu(got['A']))} µs/task over all masters); "
            f"producer CPU {report.number(alone['producer_cpu_us_per_task'])} µs/task "
            f"(round-robin: {report.number(got['A']['producer_cpu_us_per_task'])}).",
        ]
    return lines


def total_cpu(phase: dict[str, Any]) -> float:
    """Server CPU of every master per task of the phase."""
    shards = phase["shards"]
    return float(sum(s["server_cpu_s"] for s in shards) * 1e6 / sum(s["tasks"] for s in shards))


def scripts(shard: dict[str, Any]) -> float:
    """Script calls (EVALSHA, EVAL) per task of the shard's own queues."""
    calls = shard["calls"]
    return float(calls.get("evalsha", 0) + calls.get("eval", 0)) / float(shard["tasks"])


def per_task(shard: dict[str, Any]) -> float:
    """Every command the master ran per task (inside scripts too), connecting left out."""
    return float(sum(v for k, v in shard["calls"].items() if k not in SETUP) / shard["tasks"])


def retable(path: Path) -> None:
    """``cluster.py table RECORD``: the medians and tables of a record again, from its runs."""
    record = json.loads(path.read_text())
    runs = record["runs"]
    record["medians"] = {name: median_of([r[name] for r in runs]) for name in runs[0]}
    record["ratios_to_standalone"] = run_ratios(runs)
    per_shard = len(record["settings"]["queues"][0])
    record["table"] = text = render(
        record["medians"], record["ratios_to_standalone"], record["settings"]["tasks"], per_shard
    )
    path.write_text(json.dumps(record, indent=1, default=list))
    print(text)


def main() -> None:
    if sys.argv[1:2] == ["produce"]:
        produce(sys.argv[2], int(sys.argv[3]))
        return
    if sys.argv[1:2] == ["table"]:
        retable(Path(sys.argv[2]))
        return
    parser = arguments(__doc__)
    parser.add_argument("--tasks", type=int, default=60_000)
    parser.add_argument("--queues-per-shard", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", help=f"comma-separated, among: {','.join(DEPLOYMENTS)}")
    args = parser.parse_args()
    names = args.only.split(",") if args.only else list(DEPLOYMENTS)
    groups = choose_queues(args.queues_per_shard)
    tasks = args.tasks - args.tasks % (SHARDS * args.queues_per_shard)
    binary = find_binary(args.server)
    started = time.strftime("%Y%m%d-%H%M%S")
    info = machine()
    info["server_binary"] = binary
    with private_server(binary) as server:
        info["server"] = server.version()
    runs: list[dict[str, Any]] = []
    for run in range(args.runs):
        results: dict[str, Any] = {}
        # Each run starts one deployment later, so the machine's drift falls on each in turn.
        shift = run % len(names)
        for name in names[shift:] + names[:shift]:
            print(f"run {run + 1}/{args.runs}: {name}", flush=True)
            with deployed(name, binary, groups) as deployment:
                results[name] = {
                    "url": deployment.url,
                    **measure(deployment, tasks, args.concurrency),
                }
        runs.append({name: results[name] for name in names})
    info["load_average_at_end"] = os.getloadavg()
    info["culex_source_at_end"] = source_digest()
    if info["culex_source_at_end"] != info["culex_source_at_start"]:
        info["culex_checkout"] += ", CHANGED during the run"
    medians = {name: median_of([r[name] for r in runs]) for name in names}
    ratios = run_ratios(runs)
    RESULTS.mkdir(parents=True, exist_ok=True)
    out = RESULTS / f"{started}-{(info['culex_commit'] or 'unknown')[:7]}-cluster.json"
    record = {
        "command": sys.argv,
        "machine": info,
        "versions": peers.versions(sys.executable, peers.CULEX_REPORTED),
        "pip": {"culex": peers.freeze(sys.executable)},
        "settings": {
            "tasks": tasks,
            "queues": groups,
            "concurrency": args.concurrency,
            "runs": args.runs,
            "runner_log_level": "WARNING",
            "poll_s": POLL,
        },
        "runs": runs,
        "medians": medians,
        "ratios_to_standalone": ratios,
    }
    out.write_text(json.dumps(record, indent=1, default=list))  # first: a table may fail
    record["table"] = text = render(medians, ratios, tasks, args.queues_per_shard)
    out.write_text(json.dumps(record, indent=1, default=list))
    print()
    print(text)
    print(f"\nthe run's record: {out}")


if __name__ == "__main__":
    main()
