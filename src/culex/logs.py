"""The log of the ``culex`` command: the seed's per-task lines, at a price a busy runner pays.

A runner at INFO writes two lines per task (``Running task ...``, ``... succeeded, took``).
With ``logging.basicConfig`` each line costs a formatted timestamp and a flush (a write
system call) of its own: about a third of a no-op task's cost (bench/README.md). Here the
timestamp is formatted once a second, and lines are written in batches: at once for a
warning or worse, else when 256 are waiting or FLUSH_EVERY has passed. Library users keep
their own logging set-up; this is only what ``culex run`` installs.
"""

from __future__ import annotations

import logging
import threading
import time
from typing import TextIO

FORMAT = "%(asctime)s - %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
FLUSH_EVERY = 0.1  # seconds a line may wait in the buffer
BATCH = 256  # lines written in one go at most


class LineFormatter(logging.Formatter):
    """The seed's format; the timestamp text is made once per second, not per line."""

    def __init__(self) -> None:
        super().__init__(FORMAT, DATE_FORMAT)
        self._second = -1
        self._text = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        second = int(record.created)
        if second != self._second:
            self._text = time.strftime(datefmt or DATE_FORMAT, self.converter(record.created))
            self._second = second
        return self._text


class BatchingHandler(logging.StreamHandler[TextIO]):
    """Writes lines in batches; a warning or worse, and everything before it, at once."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        self._lines: list[str] = []
        self._closed = threading.Event()
        self._flusher = threading.Thread(target=self._flush_often, name="culex-log", daemon=True)
        self._flusher.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        self._lines.append(line)  # atomic: no lock needed to add
        if record.levelno >= logging.WARNING or len(self._lines) >= BATCH:
            self.flush()

    def flush(self) -> None:
        with self.lock:  # type: ignore[union-attr]  # made by Handler.__init__
            if not self._lines:
                return
            lines, self._lines = self._lines, []
            try:
                self.stream.write("".join(lines))
                self.stream.flush()
            except (OSError, ValueError):  # a closed stream at exit: nothing to do
                pass

    def close(self) -> None:
        self._closed.set()
        self.flush()
        super().close()

    def _flush_often(self) -> None:
        while not self._closed.wait(FLUSH_EVERY):
            if self._lines:
                self.flush()


def task_line(logger: logging.Logger, message: str, *args: object) -> None:
    """An INFO line of the per-task kind, made without looking up the caller's source line
    (a third of a line's cost); filters and handlers see it like any other record."""
    if logger.isEnabledFor(logging.INFO):
        logger.handle(logger.makeRecord(logger.name, logging.INFO, "culex", 0, message, args, None))


def configure(level: str, stream: TextIO) -> None:
    """The ``culex`` command's logging: the root logger writes to ``stream``."""
    handler = BatchingHandler(stream)
    handler.setFormatter(LineFormatter())
    logging.basicConfig(level=getattr(logging, level), handlers=[handler])


def flush_all() -> None:
    """Write out what every handler holds (before the process ends without exit handlers)."""
    for handler in logging.getLogger().handlers:
        handler.flush()
