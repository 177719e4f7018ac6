"""The data folder of culex's private server (culex.server.embedded): where it is, and the
files the server and the processes that start it keep there.

The folder holds the server's append-only file, its pid file and log, and the lock file
whose ``fcntl.flock`` makes "check, else start" atomic across processes; a folder of its
own in /tmp holds the socket when the folder's path is too long for one.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
from collections.abc import Iterator
from pathlib import Path

from ..errors import CulexError, ServerError

_PID_NAME = "valkey.pid"
_LOG_NAME = "valkey.log"
_LOCK_NAME = "server.lock"

_LOG_TAIL_LINES = 20


def default_data_dir() -> Path:
    """``$CULEX_DATA_DIR`` if set, else ``.culex`` in the current directory."""
    configured = os.environ.get("CULEX_DATA_DIR")
    if configured:
        return Path(configured).expanduser()
    return Path.cwd() / ".culex"


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and has not exited."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    # A daemon's parent is init; where init does not reap (some containers), a killed
    # server lingers as a zombie, which is as gone as a server can be.
    try:
        proc_stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    fields = proc_stat.rpartition(")")[2].split()
    return not fields or fields[0] not in ("Z", "X")


def ensure_private_dir(path: Path, *, create: bool) -> bool:
    """Check that ``path`` is a directory only this user can use; False if it does not exist.

    The short socket lives in a shared /tmp, where anyone could otherwise plant a socket of
    their own and receive our jobs.
    """
    if create:
        with contextlib.suppress(FileExistsError):
            path.mkdir(mode=0o700)
    try:
        info = path.lstat()
    except FileNotFoundError:
        return False
    if (
        not stat.S_ISDIR(info.st_mode)
        or info.st_uid != os.getuid()
        or stat.S_IMODE(info.st_mode) & 0o077
    ):
        raise CulexError(
            f"{path} holds culex's server socket but is not a private directory of this user "
            "(it must be owned by you with mode 700); remove it or set CULEX_DATA_DIR to a "
            "shorter path"
        )
    return True


class DataFolder:
    """The files of one data folder (``path``, resolved): the lock, the pid file, the log."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.pid_path = path / _PID_NAME
        self.log_path = path / _LOG_NAME
        self.lock_path = path / _LOCK_NAME

    @contextlib.contextmanager
    def locked(self) -> Iterator[None]:
        """Hold the folder's lock: one process at a time starts or stops its server."""
        # flock is released by the kernel when its holder dies, so a crash never leaves a stale
        # lock; the file is opened close-on-exec, so the daemon does not inherit it.
        try:
            lock_file = open(self.lock_path, "a")  # noqa: SIM115 - the with below closes it
        except OSError as exc:
            raise ServerError(f"cannot use {self.path} as culex's data folder: {exc}") from exc
        with lock_file:
            fcntl.flock(lock_file.fileno(), fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock_file.fileno(), fcntl.LOCK_UN)

    def pid(self) -> int | None:
        """The pid the server's pid file names, if it names one."""
        try:
            return int(self.pid_path.read_text().strip())
        except (OSError, ValueError):
            return None

    def orphan_pid(self) -> int | None:
        """A live server on this data folder that its socket does not reach, if there is one.

        Such a server (its socket file deleted, say by a /tmp cleaner) must not get a twin
        writing the same AOF. Only Linux can tell a live server from a reused pid (its cwd is
        the data folder); elsewhere a stale pid file is simply ignored.
        """
        pid = self.pid()
        if pid is None or not alive(pid):
            return None
        try:
            cwd = Path(os.readlink(f"/proc/{pid}/cwd"))
        except OSError:
            return None
        return pid if cwd == self.path else None

    def log_size(self) -> int:
        try:
            return self.log_path.stat().st_size
        except OSError:
            return 0

    def log_tail(self, offset: int) -> str:
        """The last lines the server logged since ``offset``, formatted for an error message."""
        try:
            with open(self.log_path, "rb") as log:
                log.seek(offset)
                text = log.read().decode(errors="replace")
        except OSError:
            return f"\n(no server log at {self.log_path})"
        lines = text.strip().splitlines()[-_LOG_TAIL_LINES:]
        if not lines:
            return f"\n(nothing new in {self.log_path})"
        return f"\nlast lines of {self.log_path}:\n" + "\n".join(lines)
