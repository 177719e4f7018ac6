"""A task's log lines: what its job wrote with ``self.log(...)``, kept with the task and read
by ``task.logs()``, ``culex task`` and the dashboard's task page.

Cost first: a line is appended to its attempt's :class:`LogBuffer` in memory (no round
trip). A runner sends what the buffers hold with each heartbeat (every lease/3), in the
same round trip as the lease renewals, and the rest before the attempt's report, in the
report's round trip (log.lua, fenced by attempt). In a process child (``isolation =
"process"``) the child sends its own lines, a round trip every FLUSH_LINES lines or
FLUSH_SECONDS, and the rest before it hands its outcome back.

Kept: the newest MAX_LINES lines of the task, every attempt's together, each cut to
MAX_LINE characters, in the task's hash (field ``logs``): they expire with it. Lost on a
SIGKILL of the runner: the lines logged since its last heartbeat.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections import deque
from datetime import UTC, datetime
from typing import NamedTuple

from .._redis import commands, reports
from .._redis.keys import QueueKeys
from ..errors import ServerError
from ..server.procedures import Procedure, one_call, run_sync
from .progress import Reporting

logger = logging.getLogger("culex")

MAX_LINES = 100  # lines a task keeps (log.lua's KEPT), the newest of all its attempts
MAX_LINE = 1000  # characters of a line (log.lua takes 4,000 bytes)
FLUSH_LINES = 20  # a process child sends its lines when it holds this many,
FLUSH_SECONDS = 1.0  # or when its oldest unsent line is this old


class LogLine(NamedTuple):
    """One line a task's job logged: its attempt, when (the runner's clock), and the text."""

    attempt: int
    at: datetime
    line: str


class LogBuffer:
    """The lines of one attempt not sent yet (the newest MAX_LINES), made JSON as log.lua
    takes them only when taken: a hot loop pays a tuple a line. Thread-safe: the job's
    thread adds, the heartbeat thread and the reporter take."""

    __slots__ = ("_lines", "_lock", "attempt", "count", "oldest")

    def __init__(self, attempt: int) -> None:
        self.attempt = attempt
        self.count = 0  # lines logged by the attempt so far (each line's n)
        self.oldest = 0.0  # monotonic time of the oldest line not sent
        self._lines: deque[tuple[int, int, str]] = deque(maxlen=MAX_LINES)  # (n, at, line)
        self._lock = threading.Lock()

    def add(self, message: str) -> int:
        """Buffer ``message`` (cut to MAX_LINE characters); how many lines wait now."""
        at = int(time.time() * 1000)
        with self._lock:
            self.count += 1
            if not self._lines:
                self.oldest = time.monotonic()
            self._lines.append((self.count, at, message[:MAX_LINE]))  # (the oldest drop out)
            return len(self._lines)

    def take(self) -> list[str]:
        """The lines not sent yet; they are the caller's to send from now on."""
        with self._lock:
            lines = list(self._lines)
            self._lines.clear()
        attempt = self.attempt
        return [json.dumps({"attempt": attempt, "n": n, "at": at, "line": line})
                for n, at, line in lines]  # fmt: skip

    def put_back(self, lines: list[str]) -> None:
        """Lines (as :meth:`take` made them) a send failed for, to go with the next (log.lua
        keeps a line sent twice once); the newest MAX_LINES are kept."""
        with self._lock:
            for told in reversed(lines[-MAX_LINES:]):
                if len(self._lines) == MAX_LINES:
                    break
                entry = json.loads(told)
                self._lines.appendleft((entry["n"], entry["at"], entry["line"]))

    def fresh(self) -> LogBuffer:
        """A buffer of the same attempt that goes on counting, with no lock held (for a
        forked child: a lock another thread held at the fork would stay held)."""
        child = LogBuffer(self.attempt)
        child.count = self.count
        return child


def unbeaten(buffer: LogBuffer) -> None:
    """Where a buffer goes when no heartbeat sends its lines (a drain without a lease
    keeper, a process child): whoever ends the attempt sends them (the report, the child)."""


def send_now(buffer: LogBuffer, reporting: Reporting, task_id: str, due: bool = False) -> None:
    """From a process child: send the buffered lines (blocking); with ``due``, only when
    FLUSH_LINES wait or the oldest has waited FLUSH_SECONDS. Lines that cannot be sent
    are only logged: the attempt goes on."""
    if due and not (
        len(buffer._lines) >= FLUSH_LINES or time.monotonic() - buffer.oldest >= FLUSH_SECONDS
    ):
        return
    lines = buffer.take()
    if lines:
        call = reports.log(reporting.keys, task_id, buffer.attempt, lines)
        try:
            run_sync(one_call(call), reporting.url)
        except ServerError as exc:
            logger.warning("could not keep %d log lines of task %s: %s", len(lines), task_id, exc)


def read_procedure(keys: QueueKeys, task_id: str) -> Procedure[list[LogLine]]:
    """A task's kept lines, oldest first; [] when none (or the task has no record)."""
    return one_call(commands.read_fields(keys, task_id, ("logs",)), lambda v: parse(v[0]))


def parse(stored_text: str | None) -> list[LogLine]:
    """The hash's ``logs`` field as lines; what is not log.lua's (another writer's) is left
    out."""
    try:
        stored = json.loads(stored_text or "[]")
    except ValueError:  # (not culex's: log.lua writes JSON)
        return []
    lines = []
    for entry in stored if isinstance(stored, list) else ():
        if not isinstance(entry, dict):
            continue
        try:
            at = datetime.fromtimestamp(float(entry.get("at", 0)) / 1000, tz=UTC)
            lines.append(LogLine(int(entry.get("attempt", 0)), at, str(entry.get("line", ""))))
        except (TypeError, ValueError, OverflowError, OSError):
            continue
    return lines
