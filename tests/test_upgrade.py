"""This culex and an older one (commit 2459f14, from this repository's history) on one queue
of one server, as in a rolling upgrade: tasks enqueued by one run on the other, both ways,
through retries, dead and a retry of it, a reclaim (a runner killed with SIGKILL, its task
taken by the other version's runner), and periodic slots scheduled by both.

Each version runs in processes of its own (tests/upgrade_side.py, the same job module for
both, with PYTHONPATH on that version's src). A read that differs from what is expected is
reported per job, with what each runner logged.
"""

from __future__ import annotations

import ast
import contextlib
import io
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import redis

import culex
from culex._redis.keys import queue_keys

from .conftest import wait_until

OLDER = "2459f14"  # the culex of three days before results were typed
ROOT = Path(__file__).resolve().parents[1]
SIDE_SCRIPT = Path(__file__).with_name("upgrade_side.py")
THIS_SRC = Path(culex.__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def older_src(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The src of culex at OLDER, extracted from git history."""
    git = shutil.which("git")
    known = (
        git is not None
        and subprocess.run(
            [git, "cat-file", "-e", f"{OLDER}^{{commit}}"], cwd=ROOT, capture_output=True
        ).returncode
        == 0
    )
    if git is None or not known:
        missing = (
            "git is not installed"
            if git is None
            else f"commit {OLDER} is not in this clone's history (a shallow clone?)"
        )
        if os.environ.get("CI"):  # CI runs in a full clone: there this test must run
            pytest.fail(f"the cross-version test cannot run in CI: {missing}")
        pytest.skip(f"cross-version test skipped: {missing}")
    assert git is not None
    archive = subprocess.run(
        [git, "archive", "--format=tar", OLDER, "src"], cwd=ROOT, capture_output=True, check=True
    )
    target = tmp_path_factory.mktemp(f"culex-{OLDER}")
    with tarfile.open(fileobj=io.BytesIO(archive.stdout)) as tar:
        tar.extractall(target, filter="data")
    return target / "src"


@dataclass
class Side:
    """One version of culex, run in processes of its own."""

    name: str  # "old" or "new"
    src: Path
    url: str
    logs: Path

    def env(self, queue: str, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CULEX_", "UPGRADE_"))}
        env.update(
            PYTHONPATH=str(self.src),
            CULEX_REDIS_URL=self.url,
            CULEX_SUCCESSFUL_JOB_TTL="600",  # the older culex keeps results for this long
            # a killed runner's task is reclaimed within seconds (the older culex claims
            # with this lease, and shortens it to a job's own only at its first heartbeat)
            CULEX_LEASE="3",
            UPGRADE_QUEUE=queue,
            UPGRADE_SIDE=self.name,
            **extra,
        )
        return env

    def call(self, queue: str, *args: str) -> Any:
        done = subprocess.run(
            [sys.executable, str(SIDE_SCRIPT), *args],
            env=self.env(queue),
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0 or not done.stdout.strip():
            raise AssertionError(
                f"the {self.name} culex failed at {' '.join(args)}:\n{done.stderr[-4000:]}"
            )
        return json.loads(done.stdout.splitlines()[-1])

    def start(self, queue: str, **extra: str) -> subprocess.Popen[bytes]:
        """A runner of this version on ``queue``; its output goes to its log file."""
        log = self.logs / f"{self.name}-runner-{queue}.log"
        with log.open("ab") as out:
            return subprocess.Popen(
                [sys.executable, str(SIDE_SCRIPT), "run", queue],
                env=self.env(queue, **extra),
                stdout=out,
                stderr=subprocess.STDOUT,
            )

    @contextlib.contextmanager
    def runner(self, queue: str, **extra: str) -> Iterator[subprocess.Popen[bytes]]:
        """A runner of this version on ``queue``, stopped at the end of the block."""
        process = self.start(queue, **extra)
        try:
            yield process
        finally:
            stop(process)

    def logged(self) -> str:
        return "".join(
            f"\n--- {path.name} (last lines) ---\n" + "\n".join(path.read_text().splitlines()[-40:])
            for path in sorted(self.logs.glob(f"{self.name}-runner-*.log"))
        )


@pytest.fixture(scope="module")
def sides(
    older_src: Path, server: Any, tmp_path_factory: pytest.TempPathFactory
) -> dict[str, Side]:
    logs = tmp_path_factory.mktemp("upgrade-logs")
    found = {
        "old": Side("old", older_src, server.url, logs),
        "new": Side("new", THIS_SRC, server.url, logs),
    }
    for side in found.values():  # each side runs the culex it names, not the installed one
        where = Path(side.call("upgrade", "where")).resolve()
        assert where.is_relative_to(side.src), f"the {side.name} side runs {where}"
    return found


def stop(process: subprocess.Popen[bytes]) -> None:
    """Stop a runner as a deployment does (SIGTERM), unless it is gone already."""
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


# -- what each reader reads ----------------------------------------------------------------

ECHOED = {  # EchoJob's params as the runner's culex decoded them (the same in both)
    "amount": "Decimal('1.10')",
    "blob": "b'\\xff\\x00'",
    "color": "<Color.BLUE: 'blue'>",
    "count": "9007199254740993",
    "ids": "[UUID('00000000-0000-0000-0000-000000000001')]",
    "maybe": "None",
    "names": "{1: 'a', 2: 'b'}",
    "pair": "(1, 'x')",
    "ratio": "0.1",
    "text": "'héllo'",
    "wait": "datetime.timedelta(days=1, microseconds=7)",
    "when": "datetime.datetime(2030, 1, 2, 3, 4, 5, 6, tzinfo=datetime.timezone.utc)",
}
# This culex reads every result as its annotation says, whichever version stored it.
NEW_READS = {
    "SpanJob": "datetime.timedelta(seconds=1, microseconds=500)",
    "NamesJob": "{1: 'a', 2: 'b'}",
    "SpansJob": "{'a': [datetime.timedelta(seconds=3600)]}",
    "LimitJob": "inf",
    "PriceJob": "Decimal('1.10')",
    "LooseJob": "{'k': [1, 'x']}",
    "NoneJob": "None",
    "AnyJob": "{'at': '2030-01-01T00:00:00+00:00'}",
    "FlakyJob": "2",
}
# The older culex reads plain JSON: what it stored itself...
OLD_READS_OF_OLD = NEW_READS | {
    "SpanJob": "1.0005",
    "NamesJob": "{'1': 'a', '2': 'b'}",
    "SpansJob": "{'a': [3600.0]}",
    "LimitJob": "'inf'",
    "PriceJob": "'1.10'",
}
# ...and what this culex stored. KNOWN INCOMPATIBILITY (docs/production.md, "Upgrading"):
# a result typed as timedelta, or as a dict with keys other than str, is stored in the
# params' encodings since results were typed, and a reader of 2459f14 sees that encoding.
OLD_READS_OF_NEW = OLD_READS_OF_OLD | {
    "SpanJob": "1000500",
    "NamesJob": "[[1, 'a'], [2, 'b']]",
    "SpansJob": "{'a': [3600000000]}",
}
READS = {
    ("new", "old"): NEW_READS,
    ("new", "new"): NEW_READS,
    ("old", "old"): OLD_READS_OF_OLD,
    ("old", "new"): OLD_READS_OF_NEW,
}
JOBS = ["EchoJob", *NEW_READS, "DoomedJob"]


def other(name: str) -> str:
    return "new" if name == "old" else "old"


@pytest.mark.parametrize(
    ("producer", "runs"), [("old", "new"), ("new", "old")], ids=["old-to-new", "new-to-old"]
)
def test_tasks_enqueued_by_one_version_run_on_the_other(
    r: redis.Redis, sides: dict[str, Side], producer: str, runs: str
) -> None:
    queue = f"upgrade_{producer}_{runs}"
    keys = queue_keys("culex", queue)
    enqueuer, runner = sides[producer], sides[runs]
    killed = sides[other(runs)]

    # A runner of the other version takes SlowJob and is killed while it runs it.
    slow = enqueuer.call(queue, "enqueue", "SlowJob")["SlowJob"]
    with killed.runner(queue) as process:
        wait_until(
            lambda: r.zscore(keys.pending, slow) is not None or process.poll() is not None,
            timeout=20,
            what=f"the {killed.name} runner to take SlowJob",
        )
        assert process.poll() is None, f"the {killed.name} runner exited{killed.logged()}"
        process.kill()
        process.wait()

    ids = enqueuer.call(queue, "enqueue", *JOBS)
    names = {task_id: name for name, task_id in ids.items()} | {slow: "SlowJob"}
    with runner.runner(queue):  # it also reclaims SlowJob once its lease has run out
        reads = {reader: sides[reader].call(queue, "read", *names) for reader in sides}
        doomed = ids["DoomedJob"]
        assert enqueuer.call(queue, "retry", doomed) is True, "a dead task's retry was refused"
        again = enqueuer.call(queue, "read", doomed)[doomed]
    logs = runner.logged() + killed.logged()

    problems: list[str] = []
    for reader, read in reads.items():
        expected = READS[reader, runs] | {"SlowJob": repr(f"{runs} on attempt 2")}
        for task_id, got in read.items():
            name = names[task_id]
            who = f"{name} (enqueued by {producer}, run by {runs}, read by {reader})"
            if name == "DoomedJob":
                if f"doomed on {runs}" not in got.get("dead", ""):
                    problems.append(f"{who}: expected dead by 'doomed on {runs}', got {got}")
            elif name == "EchoJob":
                value = got.get("value")
                if value is None or ast.literal_eval(value) != ECHOED:
                    problems.append(f"{who}: params decoded as {got}, expected {ECHOED}")
            elif got != {"value": expected[name]}:
                problems.append(f"{who}: expected {expected[name]}, got {got}")
    if f"doomed on {runs}" not in again.get("dead", ""):
        problems.append(f"DoomedJob retried by {producer}: expected dead again, got {again}")
    assert r.hget(keys.task(doomed), "attempt") == b"4", "the retried dead task ran twice more"
    assert not problems, "\n".join(problems) + logs


def test_periodic_slots_run_once_while_both_versions_schedule(
    r: redis.Redis, sides: dict[str, Side], tmp_path: Path
) -> None:
    queue = "upgrade_ticks"
    ticks = tmp_path / "ticks"
    ticks.touch()

    def ticked(count: int) -> bool:
        return len(ticks.read_text().splitlines()) >= count

    old, new = sides["old"], sides["new"]
    # the old one alone, then both, then the new one alone: the job's record of its latest
    # slot passes from one version's scheduler to the other's
    runners = [old.start(queue, UPGRADE_TICKS=str(ticks))]
    try:
        wait_until(lambda: ticked(2), timeout=20, what="two slots with the old runner alone")
        runners.append(new.start(queue, UPGRADE_TICKS=str(ticks)))
        wait_until(lambda: ticked(4), timeout=20, what="two more slots with both runners")
        stop(runners[0])
        wait_until(lambda: ticked(6), timeout=20, what="two more slots with the new runner alone")
    finally:
        for process in runners:
            stop(process)
    lines = [line.split() for line in ticks.read_text().splitlines()]
    slots = [int(task_id.rsplit(":", 1)[1]) for task_id, _ in lines]
    report = "\n".join(" ".join(line) for line in lines) + old.logged() + new.logged()
    assert len(set(slots)) == len(slots), f"a slot ran twice:\n{report}"
    assert sorted(slots) == list(range(min(slots), max(slots) + 1000, 1000)), (
        f"a slot was skipped:\n{report}"
    )
