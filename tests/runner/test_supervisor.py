"""``culex run MODULE --processes N``: a supervisor and its N runner processes, run as a
user runs them, on the test server."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import textwrap
from collections.abc import Collection, Iterator
from pathlib import Path

import pytest
import redis

import culex
from culex._redis.keys import queue_keys
from culex.cli import _parser, main
from culex.runner.supervisor import runner_command

from ..cli.test_cli import Stderr, _enqueue_as, culex_command
from ..conftest import wait_until

JOBS = textwrap.dedent(
    """
    import asyncio
    import os
    import redis.asyncio
    import culex

    class SupervisedJob(culex.QueuedJob):
        meet: int = 1  # hold the runner's slot until this many runners have taken a task
        hold: float = 0.0  # then sleep this long (on every attempt, or on the first only)
        first_only: bool = False

        async def perform(self) -> int:
            pid = os.getpid()
            async with redis.asyncio.Redis.from_url(os.environ["CULEX_REDIS_URL"]) as r:
                await r.sadd("test:pids", pid)
                while await r.scard("test:pids") < self.meet:
                    await asyncio.sleep(0.01)
            if self.attempt == 1 or not self.first_only:
                await asyncio.sleep(self.hold)
            return pid
    """
)
QUEUE = "supervised_job"
KEYS = queue_keys("culex", QUEUE)


class Supervised:
    """A ``culex run --processes N`` process, its log, and the runners it has started."""

    def __init__(self, folder: Path, *args: str, module: str = "supervised_jobs") -> None:
        self.proc = subprocess.Popen(
            culex_command("run", module, *args),
            cwd=folder,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.log = Stderr(self.proc)
        self.seen: set[int] = set()  # every runner pid seen

    def runners(self) -> set[int]:
        """The supervisor's child processes now (from /proc)."""
        pids: set[int] = set()
        try:
            threads = os.listdir(f"/proc/{self.proc.pid}/task")
        except FileNotFoundError:
            return pids
        for thread in threads:
            try:
                with open(f"/proc/{self.proc.pid}/task/{thread}/children") as children:
                    pids.update(int(pid) for pid in children.read().split())
            except FileNotFoundError:
                pass
        self.seen |= pids
        return pids

    def wait_for_runners(self, count: int, besides: Collection[int] = ()) -> set[int]:
        """Once ``count`` runners run, none of ``besides``, each of them ready: their pids."""

        def found() -> set[int] | None:
            pids = self.runners()
            return pids if len(pids) == count and not pids & set(besides) else None

        pids = wait_until(found, what=f"{count} runner processes")
        for pid in pids:
            self.log.wait_for(f"[runner {pid}] - culex is buzzing...")
        return pids

    def stop(self) -> str:
        """Kill what is left (the supervisor, then its runners); the whole log."""
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()
        for pid in self.seen:
            if alive(pid):
                os.kill(pid, signal.SIGKILL)
        return self.log.text()


def alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, dead but not yet reaped, does not)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rpartition(")")[2].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    (tmp_path / "supervised_jobs.py").write_text(JOBS)
    return tmp_path


@pytest.fixture
def supervised(folder: Path) -> Iterator[list[Supervised]]:
    started: list[Supervised] = []
    yield started
    for one in started:
        one.stop()


def enqueue(r: redis.Redis, task_id: str, **params: object) -> culex.Task:
    _enqueue_as(r, task_id, "SupervisedJob", QUEUE, json.dumps(params))
    return culex.Task(task_id, QUEUE)


def start(supervised: list[Supervised], folder: Path, *args: str) -> Supervised:
    one = Supervised(folder, *args)
    supervised.append(one)
    return one


def test_each_runner_is_a_child_process_that_takes_tasks(
    r: redis.Redis, folder: Path, supervised: list[Supervised]
) -> None:
    one = start(supervised, folder, "--processes", "3", "--concurrency", "1")
    pids = one.wait_for_runners(3)
    for pid in pids:
        with open(f"/proc/{pid}/cmdline") as cmdline:
            words = cmdline.read().split("\0")
        assert words[1:3] == ["-m", "culex"] and "run" in words, words
        assert "--concurrency=1" in words and any(w.startswith("--supervisor-pipe=") for w in words)
        assert not any(word.startswith("--processes") for word in words)
    # Each task holds its runner's only slot until 3 runners have one: all 3 must take one.
    tasks = [enqueue(r, f"meet-{n}", meet=3) for n in range(3)]
    assert {task.result(timeout=30) for task in tasks} == pids
    one.log.wait_for(f"[supervisor {one.proc.pid}] - starting 3 runner processes")
    for pid in pids:  # each runner's lines carry its pid
        one.log.wait_for(f"[runner {pid}] - Running task supervised_job<meet-")


def test_a_killed_runner_is_replaced_and_its_task_runs_again(
    r: redis.Redis, folder: Path, supervised: list[Supervised]
) -> None:
    one = start(supervised, folder, "--processes", "2", "--concurrency", "1", "--lease", "1")
    first = one.wait_for_runners(2)
    task = enqueue(r, "held", hold=60, first_only=True)
    taken = wait_until(lambda: r.smembers("test:pids"), what="a runner to take it")
    holder = int(next(iter(taken)))
    os.kill(holder, signal.SIGKILL)
    assert "was killed by SIGKILL after" in one.log.wait_for(f"runner {holder} (")
    now = one.wait_for_runners(2, besides={holder})
    assert len(now - first) == 1  # one new runner; the other one ran on
    # The killed runner's task comes back when its lease ends, and runs again elsewhere.
    assert task.result(timeout=60) != holder
    more = [enqueue(r, f"more-{n}") for n in range(10)]
    assert all(t.result(timeout=30) in now for t in more)
    assert r.zcard(KEYS.pending) == 0 and r.zcard(KEYS.waiting) == 0


def test_sigterm_stops_every_runner_gracefully_and_exits_0(
    r: redis.Redis, folder: Path, supervised: list[Supervised]
) -> None:
    args = ("--processes", "2", "--concurrency", "1", "--grace-period", "0.2")
    one = start(supervised, folder, *args)
    pids = one.wait_for_runners(2)
    tasks = [enqueue(r, f"long-{n}", meet=2, hold=60) for n in range(2)]
    wait_until(lambda: r.scard("test:pids") == 2, what="both runners to take a task")
    one.proc.send_signal(signal.SIGTERM)
    assert one.proc.wait(timeout=60) == 0, one.stop()
    log = one.stop()
    assert not any(alive(pid) for pid in pids)
    for pid in pids:
        assert f"runner {pid} stopped" in log
        assert re.search(rf"\[runner {pid}\] - task supervised_job<long-\d> handed back", log)
    assert "every runner stopped" in log
    assert r.zcard(KEYS.pending) == 0
    assert [task.state() for task in tasks] == [culex.TaskState.WAITING] * 2


def test_a_second_signal_stops_the_runners_at_once(
    r: redis.Redis, folder: Path, supervised: list[Supervised]
) -> None:
    args = ("--processes", "2", "--concurrency", "1", "--grace-period", "600")
    one = start(supervised, folder, *args)
    pids = one.wait_for_runners(2)
    tasks = [enqueue(r, f"long-{n}", meet=2, hold=600) for n in range(2)]
    wait_until(lambda: r.scard("test:pids") == 2, what="both runners to take a task")
    one.proc.send_signal(signal.SIGINT)
    for pid in pids:  # (a runner acts on the first SIGTERM before it can take a second)
        one.log.wait_for(f"[runner {pid}] - SIGTERM: stopping")
    one.proc.send_signal(signal.SIGINT)
    assert one.proc.wait(timeout=60) == 1
    log = one.stop()
    assert "SIGINT again: stopping the runners at once" in log
    assert not any(alive(pid) for pid in pids)
    # Not handed back: they come back when their leases end.
    assert [task.state() for task in tasks] == [culex.TaskState.PENDING] * 2


def test_runners_stop_when_the_supervisor_is_killed(
    r: redis.Redis, folder: Path, supervised: list[Supervised]
) -> None:
    one = start(supervised, folder, "--processes", "2")
    pids = one.wait_for_runners(2)
    one.proc.kill()
    wait_until(lambda: not any(alive(pid) for pid in pids), what="the runners to stop")
    log = one.stop()
    for pid in pids:
        assert f"[runner {pid}] - the supervisor has ended: stopping" in log
        assert f"[runner {pid}] - culex stopped" in log, log  # a graceful stop


def test_a_runner_that_exits_at_start_is_restarted_after_longer_pauses(
    r: redis.Redis, folder: Path, supervised: list[Supervised]
) -> None:
    # The module imports in the supervisor, but a runner it starts exits at once.
    (folder / "exits_jobs.py").write_text(
        JOBS + "\nimport sys\nif any(a.startswith('--supervisor-pipe') for a in sys.argv):\n"
        "    sys.exit(3)\n"
    )
    one = Supervised(folder, "--processes", "2", module="exits_jobs")
    supervised.append(one)
    for slot in (1, 2):  # each early exit in a row waits longer before the next start
        line = re.compile(rf"\({slot} of 2\) exited with code 3 after .*another in ([\d.]+) s")

        def pauses(line: re.Pattern[str] = line) -> list[float] | None:
            found = [float(m[1]) for text in one.log.lines if (m := line.search(text))]
            return found if len(found) >= 3 else None

        assert wait_until(pauses, timeout=60, what=f"3 exits of runner {slot}")[:3] == [
            0.5,
            1.0,
            2.0,
        ]
    one.proc.send_signal(signal.SIGTERM)
    one.proc.wait(timeout=60)
    log = one.stop()
    assert not any(alive(pid) for pid in one.seen), log


@pytest.mark.parametrize("count", ["0", "-2", "two", "1.5", ""])
def test_processes_must_be_a_whole_number_from_1(
    count: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit:
        main(["run", "some.module", "--processes", count])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert f"argument --processes: must be a whole number, 1 or more (not {count!r})" in err


def test_a_module_that_cannot_be_imported_ends_the_command_before_any_runner(
    tmp_path: Path,
) -> None:
    done = subprocess.run(
        culex_command("run", "no_such_module", "--processes", "4"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert "no module named 'no_such_module'" in done.stderr
    assert "started" not in done.stderr
    (tmp_path / "broken_jobs.py").write_text("import culex\nraise ImportError('no libfoo')\n")
    done = subprocess.run(
        culex_command("run", "broken_jobs", "--processes", "4"),
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2
    assert done.stderr.startswith("culex: cannot import broken_jobs:\n")
    assert "ImportError: no libfoo" in done.stderr
    assert "started" not in done.stderr


def test_a_runner_is_given_the_settings_flags_the_supervisor_was_given() -> None:
    flags = {"concurrency": "5", "run_from": "a,b", "durable_enqueue": False, "lease": "-1"}
    command = runner_command("app.jobs", flags, "WARNING")
    assert command[1:] == [
        "-m", "culex", "--log-level", "WARNING", "run", "app.jobs",
        "--concurrency=5", "--run-from=a,b", "--no-durable-enqueue", "--lease=-1",
    ]  # fmt: skip
    args = _parser().parse_args(command[3:])  # read back as the runner reads it
    assert {name: getattr(args, name) for name in flags} == flags
    assert args.processes == 1 and args.log_level == "WARNING"


def test_a_runner_that_refuses_its_configuration_stops_the_supervisor(
    r: redis.Redis, folder: Path
) -> None:
    """A server that may evict keys: each runner refuses to start (as culex run does, exit
    2), and the supervisor stops with that error instead of restarting them forever."""
    r.config_set("maxmemory-policy", "allkeys-lru")
    try:
        done = subprocess.run(
            culex_command("run", "supervised_jobs", "--processes", "2"),
            cwd=folder,
            capture_output=True,
            text=True,
            timeout=60,  # (restarted forever without the stop)
        )
    finally:
        r.config_set("maxmemory-policy", "noeviction")
    assert done.returncode == 2, done.stderr
    assert "maxmemory-policy is 'allkeys-lru'" in done.stderr
    assert "refused its configuration (see its error above): stopping every runner" in (done.stderr)
    assert "starting another" not in done.stderr
