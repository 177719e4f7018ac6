"""Which server a command reads, and which task: each run as a user runs it (``python -m
culex`` in a subprocess)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import redis

import culex


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
    for words in (["queues"], ["dead", "emails"], ["pause", "emails"], ["task", "some-id"]):
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


def test_the_embedded_server_of_the_folder_is_read_when_it_runs(
    server: culex.EmbeddedServer,
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


class NamedJob(culex.QueuedJob):
    queue = "named_emails"

    def perform(self) -> None: ...


class OtherNamedJob(culex.QueuedJob):
    queue = "named_sms"

    def perform(self) -> None: ...


def test_culex_task_takes_the_name_the_log_prints_and_the_id_alone(r: redis.Redis) -> None:
    from culex.execution import task_name
    from culex.task import task_name as named

    task = NamedJob().enqueue()
    printed = named(task.queue, task.id)
    assert printed == f"named_emails<{task.id}>"
    claimed_name = task_name.__doc__ or ""
    assert "culex.task.task_name" in claimed_name
    for words in ([printed], [task.id], ["named_emails", task.id]):
        done = culex_run("task", *words)
        assert done.returncode == 0, (words, done.stdout, done.stderr)
        assert "type" in done.stdout and "NamedJob" in done.stdout
    missing = culex_run("task", "no-such-id")
    assert missing.returncode == 1
    assert missing.stdout == (
        "no-such-id: no task of this id in any queue culex knows (never enqueued, or expired)\n"
    )
    OtherNamedJob().enqueue(id=task.id)
    both = culex_run("task", task.id)
    assert both.returncode == 1
    assert both.stdout.splitlines() == [
        f"{task.id}: tasks of this id are in 2 queues; name one:",
        f"  culex task named_emails<{task.id}>",
        f"  culex task named_sms<{task.id}>",
    ]


class TypoJob(culex.QueuedJob):
    queue = "typo_emails"

    def perform(self) -> None: ...


def test_a_queue_culex_never_saw_is_refused_with_the_names_close_to_it(r: redis.Redis) -> None:
    from culex._redis.keys import queue_keys

    TypoJob().enqueue()
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
