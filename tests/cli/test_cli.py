"""The culex command, run as a user runs it: in its own process."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import redis

import culex
from culex import cli, logs
from culex._redis.keys import queue_keys

from ..conftest import wait_until

JOBS = textwrap.dedent(
    """
    import asyncio
    import culex

    class CliJob(culex.QueuedJob):
        n: int

        async def perform(self) -> int:
            if self.n < 0:
                await asyncio.sleep(60)
            return self.n * 2
    """
)


def culex_command(*args: str, cwd: Path | None = None) -> list[str]:
    return [sys.executable, "-m", "culex", *args]


def test_run_processes_tasks_and_stops_cleanly_on_sigterm(r: redis.Redis, tmp_path: Path) -> None:
    (tmp_path / "cli_jobs.py").write_text(JOBS)
    env = {**os.environ, "CULEX_GRACE_PERIOD": "0.2"}
    proc = subprocess.Popen(
        culex_command("run", "cli_jobs", "--concurrency", "4"),
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        tasks = [culex.Task(_enqueue(r, i), "cli_job") for i in (1, 2, 3, -1)]
        assert [t.result(timeout=20) for t in tasks[:3]] == [2, 4, 6]
        keys = queue_keys("culex", "cli_job")
        wait_until(lambda: r.zcard(keys.pending), what="the sleeping task to start")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert "culex is buzzing..." in err
    assert f"Server: {os.environ['CULEX_REDIS_URL']}" in err  # which server, said at start
    assert "Running task cli_job<" in err and "succeeded, took" in err
    assert "handed back to waiting" in err
    assert r.zcard(keys.pending) == 0
    assert tasks[3].state() is culex.TaskState.WAITING


def test_a_second_signal_stops_at_once_and_leaves_the_task_to_its_lease(
    r: redis.Redis, tmp_path: Path
) -> None:
    (tmp_path / "cli_jobs.py").write_text(JOBS)
    env = {**os.environ, "CULEX_GRACE_PERIOD": "60"}  # the first signal alone would wait
    proc = subprocess.Popen(
        culex_command("run", "cli_jobs"), cwd=tmp_path, env=env, stderr=subprocess.PIPE, text=True
    )
    log = Stderr(proc)
    keys = queue_keys("culex", "cli_job")
    try:
        task = culex.Task(_enqueue(r, -1), "cli_job")
        wait_until(lambda: r.zcard(keys.pending), what="the sleeping task to start")
        proc.send_signal(signal.SIGTERM)
        log.wait_for("stopping; running tasks have")  # the first signal was taken
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=20)
    finally:
        proc.kill()
        err = log.text()
    assert proc.returncode == 1, err
    assert "stopping at once" in err
    assert task.state() is culex.TaskState.PENDING  # it comes back when its lease ends
    assert r.hget(keys.task(task.id), "retry_count") == b"0"


SLOW_JOBS = textwrap.dedent(
    """
    import os
    import time
    import culex

    def record(kind: str) -> None:
        with open(os.environ["CULEX_TEST_RUNS"], "a") as runs:
            runs.write(f"{os.getpid()} {kind} {time.time()}\\n")

    class SlowSyncJob(culex.QueuedJob):
        def perform(self) -> None:
            record("start")
            end = time.time() + float(os.environ["CULEX_TEST_SLEEP"])
            while time.time() < end:
                time.sleep(0.05)
                record("tick")
            record("end")
    """
)
SLOW = 12.0  # seconds the first runner's perform would sleep: far beyond its grace period


def test_a_sync_task_handed_back_at_stop_never_runs_twice_at_once(
    r: redis.Redis, tmp_path: Path
) -> None:
    """Past the grace period the task is handed back and the process ends with the
    thread that runs it: the executions, written down outside Redis, never overlap."""
    (tmp_path / "slow_jobs.py").write_text(SLOW_JOBS)
    runs = tmp_path / "runs.txt"
    env = {**os.environ, "CULEX_TEST_RUNS": str(runs), "CULEX_GRACE_PERIOD": "0.5"}
    first = subprocess.Popen(
        culex_command("run", "slow_jobs"),
        cwd=tmp_path,
        env={**env, "CULEX_TEST_SLEEP": str(SLOW)},
        stderr=subprocess.PIPE,
        text=True,
    )
    second: Stderr | None = None  # the second runner's
    try:
        task = culex.Task(
            _enqueue_as(r, "slow-1", "SlowSyncJob", "slow_sync_job", "{}"), "slow_sync_job"
        )
        wait_until(runs.exists, what="the first runner to start the task")
        second = Stderr(
            subprocess.Popen(
                culex_command("run", "slow_jobs"),
                cwd=tmp_path,
                env={**env, "CULEX_TEST_SLEEP": "0.3"},
                stderr=subprocess.PIPE,
                text=True,
            )
        )
        second.wait_for("culex is buzzing")  # waiting for work
        first.send_signal(signal.SIGTERM)
        assert task.result(timeout=30) is None  # the second runner ran it to the end
        _, err = first.communicate(timeout=60)
        gone = time.time()
    finally:
        if first.poll() is None:
            first.send_signal(signal.SIGTERM)
            first.communicate(timeout=30)
        if second is not None:
            second.proc.send_signal(signal.SIGTERM)  # (nothing, once it has ended)
            second.proc.wait(timeout=30)
            second.text()
    records = [
        (int(pid), kind, float(at))
        for pid, kind, at in map(str.split, runs.read_text().splitlines())
    ]
    starts = [(pid, at) for pid, kind, at in records if kind == "start"]
    assert [pid for pid, _ in starts] == [first.pid, second.proc.pid], records
    first_run = [(kind, at) for pid, kind, at in records if pid == first.pid]
    assert max(at for _, at in first_run) < starts[1][1], "the first run went on beside the second"
    assert "end" not in [kind for kind, _ in first_run]
    assert first.returncode == 0, err
    assert "handing back slow_sync_job<slow-1> (due again in 1 s)" in err
    # handed back due later (release.lua's delay), not at its old place in line
    due_at = r.hget("culex:{slow_sync_job}:task:slow-1", "due_at")
    assert due_at is not None and int(due_at) > starts[0][1] * 1000
    assert gone < starts[0][1] + SLOW  # gone long before its perform would have returned


def test_a_perform_that_timed_out_and_runs_on_does_not_keep_the_process_up(
    r: redis.Redis, tmp_path: Path
) -> None:
    (tmp_path / "overrun_jobs.py").write_text(
        textwrap.dedent(
            f"""
            import time
            import culex

            class OverrunJob(culex.QueuedJob):
                timeout = 0.2  # the attempt fails; its thread runs on
                max_retries = 0

                def perform(self) -> None:
                    time.sleep({SLOW})
            """
        )
    )
    proc = subprocess.Popen(
        culex_command("run", "overrun_jobs"), cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    try:
        started = time.time()
        # (the task's own max_retries decides, as its hash holds it: the class's 0)
        task_id = _enqueue_as(r, "overrun-1", "OverrunJob", "overrun_job", "{}", max_retries=0)
        with pytest.raises(culex.TaskFailed, match="timed out"):
            culex.Task(task_id, "overrun_job").result(timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert "1 sync perform(s) still run in threads" in err
    assert time.time() < started + SLOW  # gone long before the thread would have returned


FLAG_JOBS = textwrap.dedent(
    """
    import culex
    from culex import config

    class FollowUpJob(culex.QueuedJob):
        def perform(self) -> None: ...

    class SettingsJob(culex.QueuedJob):
        def perform(self):  # (no annotation: the result is plain JSON)
            follow_up = FollowUpJob().enqueue()  # an enqueue in a perform sees the flags too
            s = config.settings()
            return [s.prefix, s.grace_period, s.run_cron_scheduler, s.concurrency, follow_up.id]
    """
)


def test_culex_run_takes_a_flag_for_every_setting_after_the_command_too(
    r: redis.Redis, tmp_path: Path
) -> None:
    (tmp_path / "flag_jobs.py").write_text(FLAG_JOBS)
    env = {**os.environ, "CULEX_PREFIX": "from_env", "CULEX_CONCURRENCY": "3"}
    proc = subprocess.Popen(
        culex_command(
            "run", "flag_jobs", "--log-level", "WARNING", "--prefix", "flagged",
            "--grace-period", "0.25", "--no-run-cron-scheduler", "--queues", "settings_job",
        ),
        cwd=tmp_path,
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    try:
        task_id = _enqueue_as(r, "flags-1", "SettingsJob", "settings_job", "{}", prefix="flagged")
        culex.configure(prefix="flagged")
        result = culex.Task(task_id, "settings_job").result(timeout=20)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert result[:4] == ["flagged", 0.25, False, 3]  # flag > environment > default
    assert r.exists(queue_keys("flagged", "follow_up_job").task(result[4]))
    assert "Running task" not in err and "culex is buzzing" not in err  # --log-level WARNING


def test_every_setting_has_a_culex_run_flag() -> None:
    """Made from config's table of settings: a setting added there has its flag."""
    from culex import cli, config

    given = {"seconds": "2.5", "count": "3", "text": "x"}
    for name, kind in config.kinds().items():
        flag = f"--{name.replace('_', '-')}"
        words = [flag] if kind == "flag" else [flag, given[kind]]
        parsed = cli._parser().parse_args(["run", "app.jobs", *words])
        assert getattr(parsed, name) == (True if kind == "flag" else given[kind]), name
    parsed = cli._parser().parse_args(["run", "app.jobs", "--no-durable-enqueue"])
    assert parsed.durable_enqueue is False and parsed.grace_period is None
    done = subprocess.run(
        culex_command("run", "app.jobs", "--lease", "soon"), capture_output=True, text=True
    )
    assert done.returncode == 2 and "lease must be a timedelta or a number" in done.stderr


def test_log_lines_show_while_the_runner_runs(r: redis.Redis, tmp_path: Path) -> None:
    """The command's log is written in batches (culex.logs), but never held back long."""
    (tmp_path / "cli_jobs.py").write_text(JOBS)
    proc = subprocess.Popen(
        culex_command("run", "cli_jobs"), cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    log = Stderr(proc)
    try:
        task = culex.Task(_enqueue(r, 5), "cli_job")
        assert task.result(timeout=20) == 10
        done = log.wait_for("succeeded, took", timeout=10)  # fails if it never shows
        lines = log.lines[: log.lines.index(done) + 1]
        assert any(f"Running task cli_job<{task.id}> (CliJob)" in line for line in lines)
        assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d - ", lines[-1]), lines[-1]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
        log.text()
    assert proc.returncode == 0


def test_culex_run_moves_what_it_loaded_out_of_the_collectors_way(
    r: redis.Redis, tmp_path: Path
) -> None:
    """The modules, classes and functions loaded before the first claim are frozen
    (gc.freeze): a full collection in the middle of claims then skips them."""
    (tmp_path / "gc_jobs.py").write_text(
        textwrap.dedent(
            """
            import gc
            import culex

            class FrozenCount(culex.QueuedJob):
                queue = "gc_job"

                def perform(self) -> int:
                    return gc.get_freeze_count()
            """
        )
    )
    proc = subprocess.Popen(
        culex_command("run", "gc_jobs"), cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    try:
        script = r.register_script(
            (Path(culex.__file__).parent / "_redis" / "lua" / "enqueue.lua").read_text()
        )
        keys = queue_keys("culex", "gc_job")
        script(
            keys=[keys.task("gc-1"), keys.waiting, keys.scheduled, keys.signal],
            args=["gc-1", "FrozenCount", "gc_job", "{}", "", 0, 0],
        )
        frozen = culex.Task("gc-1", "gc_job").result(timeout=20)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert frozen > 10_000  # culex's own modules and the job module's objects, at least


class Stderr:
    """A process's stderr, read by a thread as it comes: a test waits for a line, and still
    has the whole of it once the process has ended."""

    def __init__(self, proc: subprocess.Popen[str]) -> None:
        assert proc.stderr is not None
        self.proc = proc
        self.lines: list[str] = []
        self._stream = proc.stderr
        self._reader = threading.Thread(target=self._read)
        self._reader.start()

    def _read(self) -> None:
        for line in self._stream:
            self.lines.append(line)

    def wait_for(self, text: str, timeout: float = 20.0) -> str:
        """The first line that holds ``text``, once the process has written it."""
        return wait_until(
            lambda: next((line for line in self.lines if text in line), None),
            timeout,
            what=f"a log line with {text!r}",
        )

    def text(self) -> str:
        """All of it; call once the process has ended (or been killed)."""
        self._reader.join(timeout=30)
        self._stream.close()
        return "".join(self.lines)


def _enqueue(r: redis.Redis, n: int) -> str:
    """Enqueue the way a foreign producer would: the job class lives in the runner only."""
    return _enqueue_as(r, f"cli-{n}", "CliJob", "cli_job", f'{{"n": {n}}}')


def _enqueue_as(
    r: redis.Redis,
    task_id: str,
    job_type: str,
    queue: str,
    params: str,
    prefix: str = "culex",
    max_retries: int = 4,
) -> str:
    script = r.register_script(
        (Path(culex.__file__).parent / "_redis" / "lua" / "enqueue.lua").read_text()
    )
    keys = queue_keys(prefix, queue)
    script(
        keys=[keys.task(task_id), keys.waiting, keys.scheduled, keys.signal],
        args=[task_id, job_type, queue, params, "", 0, max_retries],
    )
    return task_id


def test_unknown_module_is_a_clear_error(tmp_path: Path) -> None:
    done = subprocess.run(
        culex_command("run", "no_such_module"), cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "no module named 'no_such_module'" in done.stderr


def test_demo_shows_success_retry_and_delay(r: redis.Redis) -> None:
    done = subprocess.run(
        culex_command("demo"),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,  # one stream, as a terminal shows it
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout
    log = done.stdout
    # CULEX_REDIS_URL names the test server: the demo says it ran there, after the runner's lines
    where = f"The demo ran on the server at {os.environ['CULEX_REDIS_URL']} (CULEX_REDIS_URL"
    assert log.rstrip().splitlines()[-1].startswith(where), log
    assert "embedded" not in log
    assert "[WelcomeJob] welcome, newcomer!" in log
    # (its failure on purpose: one line, the job's reason, no traceback)
    lines = log.splitlines()
    [failed] = [i for i, line in enumerate(lines) if "Failure: task culex_demo<" in line]
    assert lines[failed].endswith(
        "will run again in 00:00:01 (the mail server is down (on purpose, to show a retry))"
    )
    assert "Traceback" not in log and "JobFailure" not in log
    assert re.match(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d - ", lines[failed + 1]), log
    assert "[FlakyJob] worked on attempt 2" in log
    assert "[ReminderJob] reminder: culex keeps your tasks" in log
    assert "result of" in log and "'reminded'" in log
    # each task's state as read once its result is in (a read at enqueue time said pending)
    assert re.findall(r"result of task culex_demo<\S+> \((\w+)\)", log) == ["succeeded"] * 3


def test_the_demo_says_where_it_ran(monkeypatch: pytest.MonkeyPatch) -> None:
    from culex.demo import _where

    monkeypatch.delenv("CULEX_DATA_DIR", raising=False)
    assert _where(None).endswith(".culex; stop it with: culex server stop")
    assert "embedded server" in _where(None)
    shown = _where("redis://user:secret@example.com:6380/1")
    assert "at redis://user:***@example.com:6380/1" in shown and "secret" not in shown


def test_queues_lists_counts(r: redis.Redis) -> None:
    from datetime import timedelta

    class ListedJob(culex.QueuedJob):
        def perform(self) -> None: ...

    ListedJob().enqueue()
    ListedJob().enqueue(delay=timedelta(hours=1))
    done = subprocess.run(culex_command("queues"), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    row = next(line for line in done.stdout.splitlines() if line.startswith("listed_job"))
    assert row.split()[1:5] == ["1", "0", "1", "0"] and row.split()[5].endswith("s")
    culex.registry.remove(ListedJob)


def test_culex_task_shows_the_whole_record_readably(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    class ShownJob(culex.QueuedJob):
        queue = "shown"
        to: str

        def perform(self) -> None: ...

    monkeypatch.setattr(logs, "configure", lambda *args, **kwargs: None)
    task = ShownJob(to="ann").enqueue()
    assert cli.main(["task", "shown", task.id, "--redis-url", url]) == 0
    out = capsys.readouterr().out
    stored = int(r.hget(f"culex:{{shown}}:task:{task.id}", "enqueue_time") or 0)
    moment = datetime.fromtimestamp(stored / 1000, tz=UTC).isoformat(timespec="milliseconds")
    assert f"enqueue_time  {moment} ({stored})" in out
    assert (
        '"to": "ann"' in out
        and "state         waiting" in out
        and f"id            {task.id}" in out
    )
    assert cli.main(["task", "shown", "nope", "--redis-url", url]) == 1
    assert "shown<nope>: no such task" in capsys.readouterr().out

    # A record another producer wrote with a time no datetime holds is shown as stored.
    later = ShownJob(to="bob").enqueue(delay=60)
    r.hset(f"culex:{{shown}}:task:{later.id}", "due_at", "1000000000000000")
    r.zadd("culex:{shown}:scheduled", {later.id: 1e15})
    assert cli.main(["task", "shown", later.id, "--redis-url", url]) == 0
    assert "due_at        1000000000000000\n" in capsys.readouterr().out
    assert cli.main(["tasks", "shown", "--state", "scheduled", "--redis-url", url]) == 0
    assert "1000000000000 s" in capsys.readouterr().out
    culex.registry.remove(ShownJob)


@pytest.mark.parametrize(
    ("queues", "message"),
    [
        ("critical:6,default:0", "the weight of queue 'default' must be a whole number from 1"),
        ("critical:6,critical", "the queue 'critical' is named twice"),
        ("critical:", "'critical:' has a colon but no weight after it"),
    ],
)
def test_culex_run_refuses_bad_queue_weights_clearly(queues: str, message: str) -> None:
    done = subprocess.run(
        culex_command("run", "app.jobs", "--queues", queues, "--strict"),
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2 and f"command line: run_from: {message}" in done.stderr


def test_strict_is_the_short_flag_of_strict_queues() -> None:
    parsed = cli._parser().parse_args(["run", "app.jobs", "--queues", "a:6,b", "--strict"])
    assert (parsed.run_from, parsed.strict_queues) == ("a:6,b", True)
