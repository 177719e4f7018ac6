"""``culex dashboard`` run as a user runs it, on a Redis server that cannot be reached at
first: each page says so (503, the URL masked; JSON for the JSON endpoints), one log line
per failure, and the dashboard serves again by itself once the server answers; its secrets
come from a file and the environment, not its command line; SIGTERM stops it, exit 0."""

from __future__ import annotations

import base64
import json
import os
import re
import signal
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from email.message import Message
from pathlib import Path

import pytest

from ..conftest import suite_binary, wait_until

pytest.importorskip("uvicorn", reason="the dashboard needs its extra: pip install -e '.[test]'")

PASSWORD = "Zq9-redis-pw"
AUTH = ("ann", "Dash-Secret-7")


def free_port() -> int:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        return int(free.getsockname()[1])


def get(url: str) -> tuple[int, dict[str, str], str]:
    """Status, headers and body of a GET with the dashboard's credentials (a refusal too)."""
    token = base64.b64encode(":".join(AUTH).encode()).decode()
    request = urllib.request.Request(url, headers={"Authorization": f"Basic {token}"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, _lower(response.headers), response.read().decode()
    except urllib.error.HTTPError as refused:
        with refused:
            return refused.code, _lower(refused.headers), refused.read().decode()


def _lower(headers: Message) -> dict[str, str]:
    return {name.lower(): value for name, value in headers.items()}


@contextmanager
def dashboard_process(
    tmp_path: Path, redis_port: int
) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    secret = tmp_path / "redis-url"
    secret.write_text(f"redis://:{PASSWORD}@127.0.0.1:{redis_port}/0\n")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "culex", "dashboard", "--port", str(port),
         "--redis-url-file", str(secret)],
        env={**os.environ, "CULEX_BASIC_AUTH": ":".join(AUTH)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"

    def serves() -> bool:
        if proc.poll() is not None:
            raise AssertionError(f"the dashboard exited: {proc.communicate()[1]}")
        try:
            return get(f"{base}/static/style.css")[0] == 200
        except OSError:
            return False

    try:
        wait_until(serves, timeout=60, what="the dashboard to serve")
        yield base, proc
    finally:
        proc.kill()  # (nothing when it has stopped; no process outlives its test)
        proc.communicate()


@contextmanager
def redis_on(port: int, folder: Path) -> Iterator[None]:
    proc = subprocess.Popen(
        [suite_binary(), "--port", str(port), "--bind", "127.0.0.1", "--save", "",
         "--appendonly", "no", "--dir", str(folder), "--requirepass", PASSWORD],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        yield
    finally:
        proc.terminate()
        proc.wait(10)


def test_an_unreachable_server_is_a_503_page_and_the_dashboard_recovers(tmp_path: Path) -> None:
    redis_port = free_port()  # nobody listens there yet: connections are refused
    with dashboard_process(tmp_path, redis_port) as (base, proc):
        command_line = Path(f"/proc/{proc.pid}/cmdline").read_text()  # (what ps shows)
        assert PASSWORD not in command_line and AUTH[1] not in command_line
        no_login = urllib.request.Request(base + "/")
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(no_login, timeout=60)
        assert refused.value.code == 401  # the basic auth from the environment holds
        refused.value.close()

        status, headers, page = get(base + "/")
        assert status == 503 and headers["refresh"] == "5", page
        assert "The Redis server cannot be reached" in page
        assert f"redis://:***@127.0.0.1:{redis_port}/0" in page and PASSWORD not in page
        status, headers, body = get(base + "/series?range=hour")
        assert status == 503 and headers["content-type"] == "application/json"
        assert json.loads(body)["error"].startswith(
            f"cannot reach the Redis server at redis://:***@127.0.0.1:{redis_port}/0"
        )
        with redis_on(redis_port, tmp_path):

            def served() -> str | None:
                status, _, page = get(base + "/")
                return page if status == 200 else None

            page = wait_until(
                served, timeout=60, what="the dashboard to serve again, without a restart"
            )
            assert "The Redis server cannot be reached" not in page
            proc.send_signal(signal.SIGTERM)
            _, log = proc.communicate(timeout=60)
    assert proc.returncode == 0, log  # a graceful stop, not killed by the signal (-15)
    assert "Traceback" not in log and PASSWORD not in log
    failures = [line for line in log.splitlines() if "cannot reach the Redis server" in line]
    where = re.escape(f"redis://:***@127.0.0.1:{redis_port}/0")
    assert len(failures) >= 2 and all(
        re.fullmatch(
            rf"\S+ \S+ - GET /(series)?: cannot reach the Redis server at {where}: .+", line
        )
        for line in failures
    ), log
