"""What the culex command says when it refuses: one line, ``culex: <message>``, never a
traceback; and a reader that goes away early ends it quietly. Each test runs the command as
a user does (``python -m culex`` in a subprocess)."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest
import redis

import culex
from culex import cli

# For every command, a call it refuses: a queue name with a space, or another bad value.
REFUSED = {
    "run": ["run", "no_such_module"],
    "server": ["server", "start", "--data-dir", "/proc/no/such/folder"],
    "queues": ["queues", "--redis-url", "redis://:Zq9+SEC/ret@127.0.0.1:6379"],
    "stats": ["stats", "--queue", "my emails"],
    "task": ["task", "my emails", "some-id"],
    "runners": ["runners", "--redis-url", "redis://localhost:no-port"],
    "periodic": ["periodic", "trigger", "nightly", "--queue", "my emails"],
    "tasks": ["tasks", "my emails"],
    "dead": ["dead", "my emails"],
    "cancel": ["cancel", "my emails", "some-id"],
    "signal": ["signal", "my emails", "some-id", "approved"],
    "pause": ["pause", "my emails"],
    "resume": ["resume", "my emails"],
    "limit": ["limit", "my emails", "--rate", "5/s"],
    "workflow": ["workflow", "retry", "a run id"],
    "events": ["events", "my emails"],
    "dashboard": ["dashboard", "--basic-auth", "no-colon"],
    "metrics": ["metrics", "--port", "70000"],
    "demo": ["demo"],  # with a CULEX_REDIS_URL that is no URL
}


def culex_run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """The command's run, its stderr without the line that says which server it reads
    (tests/cli/test_cli_which.py), which never shows a password either."""
    done = subprocess.run(
        [sys.executable, "-m", "culex", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, **(env or {})},
    )
    said, _, rest = done.stderr.partition("\n")
    if said.startswith("Server: "):
        assert not any(secret in said for secret in ("Zq9", "SEC", "Secret", "admin"))
        done.stderr = rest
    return done


def test_every_command_has_a_refused_call_here() -> None:
    commands = next(
        action
        for action in cli._parser()._actions
        if isinstance(action, argparse._SubParsersAction)
    ).choices
    assert set(commands) == set(REFUSED)


@pytest.mark.parametrize("command", sorted(REFUSED))
def test_every_command_refuses_in_one_line(command: str, server: object, tmp_path: Path) -> None:
    env = {"CULEX_REDIS_URL": "redis://localhost:no-port"} if command == "demo" else {}
    done = culex_run(*REFUSED[command], env=env)
    assert done.returncode == 2, done.stderr
    assert "Traceback" not in done.stderr
    assert done.stderr.startswith("culex: ") and done.stderr.count("\n") == 1, done.stderr


def test_a_queue_name_with_a_space_is_one_line(server: object) -> None:
    done = culex_run("pause", "my emails")
    assert done.stderr == (
        "culex: a queue name cannot hold braces, spaces or control characters: 'my emails'\n"
    )


def test_debug_logs_the_traceback_of_a_refusal(server: object) -> None:
    done = culex_run("--log-level", "DEBUG", "pause", "my emails")
    assert done.returncode == 2 and "Traceback" in done.stderr
    line = "culex: a queue name cannot hold braces, spaces or control characters: 'my emails'"
    assert line in done.stderr.splitlines()


@pytest.mark.parametrize("command", ["dead", "tasks", "task"])
def test_a_reader_that_went_away_ends_the_command_quietly(command: str, r: redis.Redis) -> None:
    class PipedJob(culex.QueuedJob):
        queue = "piped"

        def perform(self) -> None: ...

    task = PipedJob().enqueue()
    culex.registry.remove(PipedJob)
    words = {"dead": ["dead", "piped"], "tasks": ["tasks", "piped"]}
    reading, writing = os.pipe()
    os.close(reading)  # the reader is gone before a line is written (`| head -0`)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "culex", *words.get(command, ["task", "piped", task.id])],
            stdout=writing,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
        )
    finally:
        os.close(writing)
    assert done.stderr == f"Server: {os.environ['CULEX_REDIS_URL']}\n" and done.returncode == 1


@pytest.mark.parametrize(
    "url",
    [
        "redis://:Zq9+SEC/ret@127.0.0.1:6379",
        "redis://:Zq9#SEC@127.0.0.1:6379",
        "redis://:Zq9?SEC@127.0.0.1:6379",
        "redis://admin:Zq9/SEC@127.0.0.1:6379/0",
        "redis+cluster://:Zq9/SEC@127.0.0.1:6379",
    ],
)
def test_a_password_that_breaks_the_url_is_never_shown(url: str) -> None:
    done = culex_run("pause", "emails", "--redis-url", url)
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "Zq9" not in done.stderr and "SEC" not in done.stderr and "admin" not in done.stderr
    assert "://***@127.0.0.1:6379" in done.stderr
    assert "must be percent-encoded: %2F, %3F, %23, %40" in done.stderr


def test_an_unreachable_cluster_is_one_line(tmp_path: Path) -> None:
    import socket

    with socket.socket() as unused:  # a port nobody listens on
        unused.bind(("127.0.0.1", 0))
        port = unused.getsockname()[1]
    done = culex_run("queues", "--redis-url", f"redis+cluster://user:Secret@127.0.0.1:{port}")
    assert done.returncode == 2 and "Traceback" not in done.stderr
    assert done.stderr.startswith(
        f"culex: cannot reach the Redis server at redis+cluster://user:***@127.0.0.1:{port}"
    )
    assert "Secret" not in done.stderr and done.stderr.count("\n") == 1


BAD_MODULES = {
    "bad_syntax": "import culex\n\nclass A(culex.QueuedJob):\n    def perform(self) -> None\n",
    "bad_param": (
        "import threading\nimport culex\n\n\nclass B(culex.QueuedJob):\n"
        "    lock: threading.Lock\n\n    def perform(self) -> None: ...\n"
    ),
    "bad_dependency": "import culex\nimport no_such_dependency\n",
}


@pytest.mark.parametrize("how", ["module", "file"])
def test_culex_run_shows_the_job_modules_own_error_without_culex_frames(
    how: str, tmp_path: Path
) -> None:
    shown = {}
    for name, source in BAD_MODULES.items():
        (tmp_path / f"{name}.py").write_text(source)
        target = name if how == "module" else str(tmp_path / f"{name}.py")
        done = subprocess.run(
            [sys.executable, "-m", "culex", "run", target],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=tmp_path,
        )
        assert done.returncode == 2
        assert done.stderr.startswith(f"culex: cannot import {target}:\n")
        assert "importlib" not in done.stderr and "frozen" not in done.stderr
        assert str(Path(culex.__file__).parent) not in done.stderr
        shown[name] = done.stderr
    assert shown["bad_syntax"].endswith(
        f'  File "{tmp_path / "bad_syntax.py"}", line 4\n'
        "    def perform(self) -> None\n"
        "                             ^\n"
        "SyntaxError: expected ':'\n"
    )
    assert f'  File "{tmp_path / "bad_param.py"}", line 5, in <module>\n' in shown["bad_param"]
    assert "TypeError: B.lock: unsupported param type" in shown["bad_param"]
    assert "use str, int, float" in shown["bad_param"]  # (culex's advice)
    assert f'  File "{tmp_path / "bad_dependency.py"}", line 2' in shown["bad_dependency"]
    assert "'no_such_dependency' is not installed for the Python" in shown["bad_dependency"]


def test_a_url_of_another_scheme_never_shows_its_password() -> None:
    done = culex_run("pause", "emails", "--redis-url", "http://Zq9/SEC@127.0.0.1:6379")
    assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stderr
    assert "Zq9" not in done.stderr and "SEC" not in done.stderr
    assert "'http://***@127.0.0.1:6379'" in done.stderr
