"""The log of the ``culex`` command: Mosquito's per-task lines, at a price a busy runner pays.

A runner at INFO writes two lines per task (``Running task ...``, ``... succeeded, took``).
With ``logging.basicConfig`` each line costs a formatted timestamp and a flush (a write
system call) of its own: a large share of a no-op task's cost (docs/fast.md). Here the
timestamp is formatted once a second, and lines are written in batches: at once for a
warning or worse, else when 256 are waiting or FLUSH_EVERY has passed. Library users keep
their own logging set-up; this is only what ``culex run`` installs.

A logging configuration in the user's modules (``logging.config.dictConfig``, which
Django's ``LOGGING`` runs) does not silence it, as it would by itself: dictConfig closes
every handler, and ``disable_existing_loggers`` disables culex's loggers, made before the
import. Once ``culex run`` has imported them, ``keep`` undoes both for culex's own lines
(the runner's first line, "culex is buzzing...", comes after that).
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

    @property
    def closed(self) -> bool:
        return self._stopping.is_set()

    def _add(self, line: str, urgent: bool = False) -> None:
        """Queue a line; write the batch now if ``urgent`` or full, else the flusher will
        (once closed, as dictConfig closes every handler: now, as no flusher is left)."""
        self._lines.append(line)
        if urgent or len(self._lines) >= BATCH or self._stopping.is_set():
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
    if node is None or (node.parent is not None and node.propagate) or len(node.handlers) != 1:
        return None  # (only configure's handler, where records stop, is known to be plain)
    handler = node.handlers[0]
    if type(handler) is not BatchingHandler or handler.filters or handler.level > logging.INFO:
        return None
    formatter = handler.formatter
    if type(formatter) is not LineFormatter:
        return None
    return handler, formatter


# The handler configure installed and the level it was given, for keep and flush_all.
_installed: list[tuple[BatchingHandler, int]] = []


def configure(level: str, stream: TextIO, label: str = "") -> None:
    """The ``culex`` command's logging: the root logger writes to ``stream``; ``label``
    (if any) goes after the timestamp of every line."""
    handler = BatchingHandler(stream)
    handler.setFormatter(LineFormatter(label))
    logging.basicConfig(level=getattr(logging, level), handlers=[handler])
    _installed[:] = [(handler, getattr(logging, level))]


def keep() -> None:
    """After the user's modules are imported: culex's lines still reach ``configure``'s
    handler, whatever logging configuration the modules made. culex's loggers that
    ``disable_existing_loggers`` disabled are enabled again; a handler dictConfig closed is
    replaced by a new one in its place; and where the configuration gave the root logger
    handlers of its own (its ``root`` key), culex's lines go to configure's handler alone,
    on the ``culex`` logger at the command's level, unless the configuration set that
    logger up itself (handlers or a level of its own)."""
    if not _installed:
        return
    for name, logger in list(logging.Logger.manager.loggerDict.items()):
        if isinstance(logger, logging.Logger) and (name == "culex" or name.startswith("culex.")):
            logger.disabled = False
    handler, level = _installed[0]
    root, culex = logging.getLogger(), logging.getLogger("culex")
    where = root if handler in root.handlers else culex if handler in culex.handlers else None
    if where is None and (culex.handlers or culex.level != logging.NOTSET):
        return  # (the user's own set-up of culex's lines)
    if handler.closed:
        fresh = BatchingHandler(handler.stream)
        fresh.setFormatter(handler.formatter)
        _installed[:] = [(fresh, level)]
        if where is not None:
            where.removeHandler(handler)
        handler = fresh
    if where is None:
        culex.setLevel(level)
        culex.propagate = False
        where = culex
    if handler not in where.handlers:
        where.addHandler(handler)


def flush_all() -> None:
    """Write out what every handler holds (before the process ends without exit handlers)."""
    for handler in {*logging.getLogger().handlers, *(ours for ours, _ in _installed)}:
        handler.flush()
