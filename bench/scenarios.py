"""Scenarios A-D for one system, measured from outside: the harness starts the producer and
the worker as subprocesses of the system's interpreter and watches the server.

Every system gets the same server, the same task (``adapters/record.py``) and the same
measurements; each adapter only says how its system enqueues and starts a worker.
"""

from __future__ import annotations

import contextlib
import os
import signal
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

import child
import redis
from child import HERE
from server import server_cpu

DONE = "bench:done"
LATE = "bench:late"
POLL = 0.001  # seconds between two looks at the counter
STOP_TIMEOUT = 15.0


@dataclass
class Sizes:
    """How many tasks each scenario uses (``--quick`` shrinks them)."""

    enqueue: int = 20_000  # A, A2 and B
    trickle: int = 500  # C
    delayed: int = 1_000  # D
    backlog: tuple[int, ...] = (1_000, 1_000_000)  # E


@dataclass
class System:
    """A system under test: its adapter module and the interpreter of its environment."""

    name: str
    python: str
    url: str
    logs: Path
    worker: list[str] = field(init=False)  # the adapter's WORKER command
    settings: str = field(init=False)  # the adapter's SETTINGS
    extra: dict[str, Any] = field(init=False)  # the adapter's other upper-case constants

    def __post_init__(self) -> None:
        # Read in the system's own interpreter: the peers are not installed in culex's.
        script = (
            "import importlib, json, sys\n"
            "m = importlib.import_module('adapters.' + sys.argv[1])\n"
            "print(json.dumps({k: v for k, v in vars(m).items() if k.isupper() "
            "and isinstance(v, (str, int, list))}))\n"
        )
        what = f"loading adapters/{self.name}.py"
        self.extra = child.run(self.python, ["-c", script, self.name], what=what, env=self.env)
        self.worker = self.extra.pop("WORKER")
        self.settings = self.extra.pop("SETTINGS")

    @property
    def env(self) -> dict[str, str]:
        # bench/ first, then the caller's own path: PYTHONPATH=<worktree>/src measures
        # another checkout of culex with the same harness
        path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH", "")) if p)
        return {**os.environ, "PYTHONPATH": path, "BENCH_REDIS_URL": self.url}

    def command(self, template: list[str]) -> list[str]:
        folder = str(Path(self.python).parent)
        return [
            part.replace("{python}", self.python)
            .replace("{bin}", folder)
            .replace("{url}", self.url)
            for part in template
        ]

    def script(self, name: str, *args: str, timeout: float = 600) -> dict[str, Any]:
        """Run the bench script ``name`` with this system's interpreter; its JSON answer."""
        what = f"{self.name}: {name} {' '.join(args)}"
        return child.run(
            self.python, [str(HERE / name), *args], what=what, env=self.env, timeout=timeout
        )

    def produce(self, scenario: str, count: int, producer: str = "Producer") -> dict[str, Any]:
        """Run ``produce.py`` with this system's interpreter; its JSON result."""
        return self.script("produce.py", self.name, scenario, str(count), "--producer", producer)


class Workers:
    """Worker processes of one system, each in its own session (so its children too)."""

    def __init__(
        self,
        system: System,
        log_name: str,
        template: list[str] | None = None,
        body: str = "redis-py",
    ) -> None:
        self.system = system
        self.template = template or system.worker
        self.env = {**system.env, "BENCH_BODY": body}  # adapters/record.py's task body
        self.log = system.logs / f"{system.name}-{log_name}.log"
        self.processes: list[subprocess.Popen[bytes]] = []

    def start(self, count: int = 1) -> None:
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log, "ab") as log:
            for _ in range(count):
                self.processes.append(
                    subprocess.Popen(
                        self.system.command(self.template),
                        env=self.env,
                        cwd=HERE,
                        stdin=subprocess.DEVNULL,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                )

    def alive(self) -> bool:
        return all(p.poll() is None for p in self.processes)

    def peak_rss(self) -> dict[str, float]:
        """Peak RSS (VmHWM) of every process in the workers' sessions, in MB."""
        sessions = {p.pid for p in self.processes}
        peaks: list[float] = []
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                fields = (entry / "stat").read_text().rpartition(")")[2].split()
                if int(fields[3]) not in sessions:  # field 6 of stat: the session id
                    continue
                for line in (entry / "status").read_text().splitlines():
                    if line.startswith("VmHWM:"):
                        peaks.append(int(line.split()[1]) / 1024)
            except (OSError, IndexError, ValueError):
                continue
        return {
            "largest_mb": max(peaks, default=0.0),
            "sum_mb": sum(peaks),
            "processes": len(peaks),
        }

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                os.killpg(process.pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_TIMEOUT
        for process in self.processes:
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(max(0.1, deadline - time.monotonic()))
            # whatever is left of the session (children that ignored SIGTERM)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        self.processes = []


def wait_count(
    client: redis.Redis, key: str, target: int, timeout: float, workers: Workers
) -> None:
    """Poll ``key`` (a counter or a list) until it reaches ``target``."""
    read = client.llen if key == LATE else (lambda k: int(client.get(k) or 0))
    deadline = time.perf_counter() + timeout
    while read(key) < target:
        if time.perf_counter() > deadline:
            raise TimeoutError(f"{key} reached {read(key)} of {target} in {timeout:.0f} s")
        if not workers.alive():
            raise RuntimeError(f"the worker exited; see {workers.log}")
        time.sleep(POLL)


def drain(
    system: System,
    client: redis.Redis,
    count: int,
    *,
    processes: int = 1,
    template: list[str] | None = None,
    log_name: str = "drain",
    body: str = "redis-py",
) -> dict[str, Any]:
    """B: ``count`` tasks are waiting; start the worker(s) and time until all have run.

    The clock starts before the worker processes are spawned, so interpreter start-up,
    imports and connecting are included. ``body``: the task body (adapters/record.py).
    """
    client.delete(DONE)
    workers = Workers(system, log_name, template, body)
    cpu = server_cpu(client)
    start = time.perf_counter()
    workers.start(processes)
    try:
        timeout = 120 + count / 100
        wait_count(client, DONE, 1, timeout, workers)
        first = time.perf_counter()
        wait_count(client, DONE, count, timeout, workers)
        end = time.perf_counter()
        rss = workers.peak_rss()
    finally:
        workers.stop()
    return {
        "rate": count / (end - start),
        "first_task_s": first - start,
        "rate_after_first": (count - 1) / (end - first) if end > first else None,
        "server_cpu_us_per_task": (server_cpu(client) - cpu) * 1e6 / count,
        "rss_mb": rss["largest_mb"],
        "rss_sum_mb": rss["sum_mb"],
        "worker_processes": rss["processes"],
    }


def percentiles(client: redis.Redis, count: int) -> dict[str, float]:
    values = sorted(float(v) * 1000 for v in client.lrange(LATE, 0, -1))
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {
        "p50_ms": cuts[49],
        "p99_ms": cuts[98],
        "max_ms": values[-1],
        "min_ms": values[0],
        "count": len(values),
        # Started more than 1 ms before it was due: early, not just rounded to whole ms
        # (culex and others keep due times in ms; the stamp is a float).
        "early": sum(v < -1.0 for v in values),
    }


def latencies(system: System, client: redis.Redis, sizes: Sizes) -> dict[str, Any]:
    """C and D with one running worker: pick-up latency, then lateness of delayed tasks."""
    results: dict[str, Any] = {}
    workers = Workers(system, "latency")
    workers.start()
    try:
        for name, scenario, count in (
            ("C", "trickle", sizes.trickle),
            ("D", "delayed", sizes.delayed),
        ):
            client.delete(DONE, LATE)
            try:
                produced = system.produce(scenario, count)
                if "na" in produced:
                    results[name] = produced
                    continue
                wait_count(client, LATE, count, 60, workers)
                results[name] = {**percentiles(client, count), **produced}
            except (RuntimeError, TimeoutError) as exc:
                results[name] = {"error": str(exc)}
    finally:
        workers.stop()
    return results


def attempt_into(results: dict[str, Any], who: str, name: str, work: Callable[[], Any]) -> None:
    """``results[name] = work()``, or the error that stopped it: one failure ends no run."""
    try:
        results[name] = work()
    except (RuntimeError, TimeoutError, subprocess.TimeoutExpired) as exc:
        results[name] = {"error": str(exc)}
        print(f"  {who} {name}: {exc}", flush=True)


def measure(system: System, client: redis.Redis, sizes: Sizes) -> dict[str, Any]:
    """A, B, A2, C, D and RSS for one system, in that order, on a flushed server.

    Then B again with the stdlib task body (B-stdlib), for the runner's own RSS.
    """
    results: dict[str, Any] = {}
    n = sizes.enqueue
    attempt = partial(attempt_into, results, system.name)

    client.flushall()
    attempt("A", lambda: system.produce("one", n))
    if "rate" in results["A"]:  # B drains the tasks A left
        attempt("B", lambda: drain(system, client, n))
    client.flushall()
    attempt("A2", lambda: system.produce("many", n))
    client.flushall()
    try:
        results.update(latencies(system, client, sizes))
    except (RuntimeError, TimeoutError) as exc:
        results["C"] = results["D"] = {"error": str(exc)}
    client.flushall()
    attempt("A-again", lambda: system.produce("one", n))  # fills the queue, not reported
    if "rate" in results["A-again"]:
        attempt(
            "B-stdlib", lambda: drain(system, client, n, log_name="drain-stdlib", body="stdlib")
        )
    del results["A-again"]
    client.flushall()
    return results
