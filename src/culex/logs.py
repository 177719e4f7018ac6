"""The log of the ``culex`` command: Mosquito's per-task lines, at a price a busy runner pays.

A runner at INFO writes two lines per task (``Running task ...``, ``... succeeded, took``).
With ``logging.basicConfig`` each line costs a formatted timestamp and a flush (a write
system call) of its own: a large share of a no-op task's cost (docs/fast.md). Here the
timestamp is formatted once a second, and lines are written in batches: at once for a
warning or worse, else when 256 are waiting or FLUSH_EVERY has passed. Library users keep
their own logging set-up; this is only what ``culex run`` installs.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from typing import TextIO

FORMAT = "%(asctime)s - %(message)s"
DATE_FORMAT = "%Y-%m-%d %H:%M:%S"
FLUSH_EVERY = 0.1  # seconds a line may wait in the buffer
BATCH = 256  # lines written in one go at most


class LineFormatter(logging.Formatter):
    """Mosquito's format; the timestamp text is made once per second, not per line.
    ``label`` follows the timestamp on every line (one process among several: its pid)."""

    def __init__(self, label: str = "") -> None:
        super().__init__(FORMAT, DATE_FORMAT)
        self._label = f" [{label}]" if label else ""
        self._second = -1
        self._text = ""

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        return self.stamp(record.created, datefmt)

    def stamp(self, created: float, datefmt: str | None = None) -> str:
        second = int(created)
        if second != self._second:
            self._text = time.strftime(datefmt or DATE_FORMAT, self.converter(created))
            self._text += self._label
            self._second = second
        return self._text


class BatchingHandler(logging.StreamHandler[TextIO]):
    """Writes lines in batches; a warning or worse, and everything before it, at once."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__(stream)
        # deque: appends and pops from both ends are thread-safe by contract, so adding a
        # line takes no lock, and a flush takes only the lines it counted
        self._lines: deque[str] = deque()
        # (not _closed: logging.Handler.close() sets its own _closed to True, and a flusher
        # that woke from its wait then found a bool where its Event was)
        self._stopping = threading.Event()
        self._flusher = threading.Thread(target=self._flush_often, name="culex-log", daemon=True)
        self._flusher.start()

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = self.format(record) + self.terminator
        except Exception:
            self.handleError(record)
            return
        self._add(line, urgent=record.levelno >= logging.WARNING)

    def add_line(self, formatter: LineFormatter, message: str) -> None:
        """An INFO line, as emit() would write it for a record of ``message`` made now."""
        self._add(f"{formatter.stamp(time.time())} - {message}{self.terminator}")

    def _add(self, line: str, urgent: bool = False) -> None:
        """Queue a line; write the batch now if ``urgent`` or full, else the flusher will."""
        self._lines.append(line)
        if urgent or len(self._lines) >= BATCH:
            self.flush()

    def flush(self) -> None:
        lock = self.lock
        assert lock is not None  # (made by Handler.__init__)
        with lock:
            queued = self._lines
            if not queued:
                return
            lines = [queued.popleft() for _ in range(len(queued))]
            try:
                self.stream.write("".join(lines))
                self.stream.flush()
            except (OSError, ValueError):  # a closed stream at exit: nothing to do
                pass

    def close(self) -> None:
        self._stopping.set()
        self.flush()
        super().close()

    def _flush_often(self) -> None:
        while not self._stopping.wait(FLUSH_EVERY):
            if self._lines:
                self.flush()


def task_line(logger: logging.Logger, message: str, *args: object) -> None:
    """An INFO line of the per-task kind. Under ``culex run``'s own set-up, where nothing
    but its handler would see the record, the text goes straight into that handler's batch
    (several times cheaper: docs/fast.md). Otherwise a record is made, without looking up the
    caller's source line, and filters and handlers see it like any other."""
    if not logger.isEnabledFor(logging.INFO):
        return
    sole = _sole_handler(logger)
    if sole is not None:
        sole[0].add_line(sole[1], message % args)
    else:
        logger.handle(logger.makeRecord(logger.name, logging.INFO, "culex", 0, message, args, None))


def _sole_handler(logger: logging.Logger) -> tuple[BatchingHandler, LineFormatter] | None:
    """The handler and formatter ``configure`` installed, if its is the only handler an
    INFO record of ``logger`` would reach and no filter would see the record (logging
    applies the filters of the logger a record is made on, and of the handlers)."""
    if logger.filters:
        return None
    node: logging.Logger | None = logger
    while node is not None:
        if node.handlers:
            break
        if not node.propagate:
            return None
        node = node.parent
    if node is None or node.parent is not None or len(node.handlers) != 1:
        return None  # (only configure's root handler is known to be plain)
    handler = node.handlers[0]
    if type(handler) is not BatchingHandler or handler.filters or handler.level > logging.INFO:
        return None
    formatter = handler.formatter
    if type(formatter) is not LineFormatter:
        return None
    return handler, formatter


def configure(level: str, stream: TextIO, label: str = "") -> None:
    """The ``culex`` command's logging: the root logger writes to ``stream``; ``label``
    (if any) goes after the timestamp of every line."""
    handler = BatchingHandler(stream)
    handler.setFormatter(LineFormatter(label))
    logging.basicConfig(level=getattr(logging, level), handlers=[handler])


def flush_all() -> None:
    """Write out what every handler holds (before the process ends without exit handlers)."""
    for handler in logging.getLogger().handlers:
        handler.flush()
