"""Which server a command reads, and which task: each run as a user runs it (``python -m
culex`` in a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import redis

import culex
from culex.server.embedded import EmbeddedServer


def culex_run(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "culex", *args],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=cwd,
        env={**os.environ, **(env or {})},
    )


def no_server_env(folder: Path) -> dict[str, str]:
    """The environment of a folder where no server was named and none runs."""
    env = {k: v for k, v in os.environ.items() if k not in ("CULEX_REDIS_URL", "CULEX_DATA_DIR")}
    return {**env, "CULEX_DATA_DIR": str(folder / ".culex")}


def test_a_read_in_a_folder_with_no_server_starts_none_and_says_so(tmp_path: Path) -> None:
    try:
        refused_in(tmp_path)
    finally:  # (a culex that starts one after all must not leave it running)
        if (tmp_path / ".culex").exists():
            EmbeddedServer(tmp_path / ".culex").stop()


def refused_in(tmp_path: Path) -> None:
    reads = (["queues"], ["dead", "emails"], ["task", "some-id"], ["dashboard"], ["workflow", "x"])
    steers = (
        ["pause", "emails"],
        ["limit", "emails", "--rate", "5/s"],
        ["cancel", "emails", "x"],
        ["workflow", "cancel", "x"],
    )
    for words in (*reads, *steers, ["metrics", "--port", "0"]):
        done = subprocess.run(
            [sys.executable, "-m", "culex", *words],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
            env=no_server_env(tmp_path),
        )
        assert done.returncode == 2, done
        assert done.stderr.count("\n") == 1 and "Traceback" not in done.stderr
        assert done.stderr.startswith("culex: no culex server runs here"), done.stderr
        assert "--redis-url" in done.stderr and "CULEX_REDIS_URL" in done.stderr
        assert not (tmp_path / ".culex").exists()  # no server started, no folder made


def test_a_read_says_which_server_with_its_password_masked(server: object) -> None:
    done = culex_run("queues")
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"Server: {os.environ['CULEX_REDIS_URL']}\n"
    quiet = culex_run("--log-level", "WARNING", "queues")
    assert quiet.returncode == 0 and quiet.stderr == ""
    import socket

    with socket.socket() as unused:  # a port nobody listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    out_of_reach = culex_run("queues", "--redis-url", f"redis://admin:Secret9@127.0.0.1:{port}")
    assert out_of_reach.returncode == 2
    assert out_of_reach.stderr.splitlines()[0] == f"Server: redis://admin:***@127.0.0.1:{port}"
    assert "Secret9" not in out_of_reach.stderr


def test_the_embedded_server_of_the_folder_is_read_when_it_runs(
    server: EmbeddedServer,
) -> None:
    env = {k: v for k, v in os.environ.items() if k != "CULEX_REDIS_URL"}
    env["CULEX_DATA_DIR"] = str(server.data_dir)
    done = subprocess.run(
        [sys.executable, "-m", "culex", "queues"],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == f"Server: the embedded server in {server.data_dir} ({server.url})\n"


NAMED_JOBS = """
import culex

class WhichNamedJob(culex.QueuedJob):
    queue = "named_emails"

    def perform(self) -> str:
        return "done"
"""


class WhichNamedJob(culex.QueuedJob):  # (the same job as the runner's, to enqueue it here)
    queue = "named_emails"  # (not the job's own name, named_job: the log names the queue)

    def perform(self) -> str:
        return "done"


class WhichOtherJob(culex.QueuedJob):
    queue = "named_sms"

    def perform(self) -> None: ...


def test_culex_task_takes_the_name_the_log_prints_and_the_id_alone(
    r: redis.Redis, tmp_path: Path
) -> None:
    import re

    (tmp_path / "named_jobs.py").write_text(NAMED_JOBS)
    runner = subprocess.Popen(
        [sys.executable, "-m", "culex", "run", "named_jobs"],
        cwd=tmp_path,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "CULEX_SUCCESSFUL_JOB_TTL": "600"},
    )
    try:
        task = WhichNamedJob().enqueue()
        assert task.result(timeout=30) == "done"
    finally:
        runner.terminate()
        _, log = runner.communicate(timeout=30)
    printed = re.findall(r"Running task (\S+) \(WhichNamedJob\)", log)
    assert printed == [f"named_emails<{task.id}>"], log
    for words in ([printed[0]], [task.id], ["named_emails", task.id]):
        done = culex_run("task", *words)
        assert done.returncode == 0, (words, done.stdout, done.stderr)
        assert "WhichNamedJob" in done.stdout and "succeeded" in done.stdout
    missing = culex_run("task", "no-such-id")
    assert missing.returncode == 1
    assert missing.stdout == (
        "no-such-id: no task of this id in any queue culex knows (never enqueued, or expired)\n"
    )
    WhichOtherJob().enqueue(id=task.id)
    both = culex_run("task", task.id)
    assert both.returncode == 1
    assert both.stdout.splitlines() == [
        f"{task.id}: tasks of this id are in 2 queues; name one:",
        f"  culex task named_emails<{task.id}>",
        f"  culex task named_sms<{task.id}>",
    ]


class WhichTypoJob(culex.QueuedJob):
    queue = "typo_emails"

    def perform(self) -> None: ...


def test_a_queue_culex_never_saw_is_refused_with_the_names_close_to_it(r: redis.Redis) -> None:
    from culex._redis.keys import queue_keys

    WhichTypoJob().enqueue()
    for words in (["pause"], ["resume"], ["limit", "--rate", "5/s"], ["limit"]):
        done = culex_run(words[0], "typo_emials", *words[1:])
        assert done.returncode == 2, done
        assert done.stderr.splitlines()[-1] == (
            "culex: culex has never seen a queue named 'typo_emials' (did you mean "
            "typo_emails?); add --force to change it all the same"
        )
        assert done.stdout == ""
    assert not r.exists(queue_keys("culex", "typo_emials").control)  # nothing written
    forced = culex_run("pause", "typo_emials", "--force")
    assert forced.returncode == 0 and forced.stdout.startswith("typo_emials: paused")
    assert "warning: culex has never seen a queue named 'typo_emials'" in forced.stderr
    assert culex_run("pause", "typo_emails").returncode == 0  # the queue it knows


class WhichOrdersJob(culex.QueuedJob):
    queue = "typo_orders"

    def perform(self) -> None: ...


def test_every_read_of_a_queue_by_name_refuses_one_culex_never_saw(r: redis.Redis) -> None:
    # (a typo read as an empty queue: "0 task(s)", exit 0, and the user looks elsewhere)
    task = WhichOrdersJob().enqueue()
    reads = [
        ["tasks", "typo_oders"], ["tasks", "typo_oders", "--state", "dead"],
        ["dead", "typo_oders"], ["dead", "retry", "typo_oders", task.id],
        ["dead", "purge", "typo_oders", "--yes"], ["task", "typo_oders", task.id],
        ["task", f"typo_oders<{task.id}>"], ["cancel", "typo_oders", task.id],
        ["signal", "typo_oders", task.id, "go"], ["events", "typo_orders", "typo_oders"],
        ["stats", "--queue", "typo_oders"],
    ]  # fmt: skip
    for words in reads:
        done = culex_run(*words)
        assert done.returncode == 2, (words, done)
        assert done.stderr.splitlines()[-1] == (
            "culex: culex has never seen a queue named 'typo_oders' (did you mean typo_orders?)"
        ), words
        assert done.stdout == "", words
    far = culex_run("tasks", "zzzzzz")
    assert far.stderr.splitlines()[-1].startswith(
        "culex: culex has never seen a queue named 'zzzzzz' (known: "
    )
    assert culex_run("tasks", "typo_orders").returncode == 0  # the queue it knows
    from culex._redis.keys import queue_keys

    assert r.hget(queue_keys("culex", "typo_orders").task_prefix + task.id, "state") == b"waiting"


LIMITED_JOBS = """
import culex
from culex.server.embedded import EmbeddedServer

class WhichPartnerJob(culex.QueuedJob):
    queue = "partner_api"
    concurrency_limit = 3
    group_concurrency = 2

    def perform(self) -> None: ...
"""


def test_every_limit_in_force_shows_with_its_value_and_source(
    r: redis.Redis, tmp_path: Path
) -> None:
    import urllib.request

    from culex import config
    from culex.dashboard import app

    from ..conftest import wait_until
    from ..dashboard.conftest import serve

    (tmp_path / "limited_jobs.py").write_text(LIMITED_JOBS)
    before = culex_run("limit", "partner_api", "--force")  # no runner yet: declared unknown
    assert before.stdout.splitlines()[1:] == [
        "  rate               none  not known: no runner runs this queue",
        "  concurrency        none  not known: no runner runs this queue",
        "  group rate         none  not known: no runner runs this queue",
        "  group concurrency  none  not known: no runner runs this queue",
    ]
    runner = subprocess.Popen(
        [sys.executable, "-m", "culex", "run", "limited_jobs"],
        cwd=tmp_path,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: r.zcard("culex:{runners}"), what="the runner's record")
        done = culex_run("limit", "partner_api", "--group-rate", "5/s")
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines() == [
            "partner_api: running",
            "  rate               none  none",
            "  concurrency        3     declared by WhichPartnerJob",
            "  group rate         5/s   set at run time",
            "  group concurrency  2     declared by WhichPartnerJob",
        ]
        listed = culex_run("queues").stdout.splitlines()
        line = next(line for line in listed if line.startswith("partner_api"))
        assert line.endswith(
            "s  concurrency 3 declared by WhichPartnerJob; group rate 5/s; group concurrency 2 "
            "declared by WhichPartnerJob"
        )
        with (
            serve(app(config.Settings(redis_url=os.environ["CULEX_REDIS_URL"]))) as base,
            urllib.request.urlopen(f"{base}/queue?queue=partner_api", timeout=10) as answer,
        ):
            page = answer.read().decode()
        assert "concurrency 3 (declared by WhichPartnerJob)" in page
        assert "group rate 5/s (set at run time)" in page
        assert "group concurrency 2 (declared by WhichPartnerJob)" in page
    finally:
        runner.terminate()
        runner.wait(timeout=30)


class WhichProgressJob(culex.QueuedJob):
    queue = "progress_shown"

    def perform(self) -> None: ...


def test_culex_task_shows_progress_as_a_percent_and_its_message(r: redis.Redis) -> None:
    from culex._redis.keys import queue_keys

    task = WhichProgressJob().enqueue()
    key = queue_keys("culex", "progress_shown").task(task.id)
    r.hset(key, mapping={"progress": "0.10611111111111", "progress_message": "4 of 37 pages"})
    lines = culex_run("task", task.id).stdout.splitlines()
    assert [line.split() for line in lines if line.startswith("progress")] == [
        ["progress", "11%:", "4", "of", "37", "pages"]
    ]
    r.hset(key, mapping={"progress": "0.999", "progress_message": ""})
    lines = culex_run("task", task.id).stdout.splitlines()
    shown = [line.split() for line in lines if line.startswith("progress")]
    assert shown == [["progress", "100%", "(0.999)"]]  # (not done: the stored value says so)
