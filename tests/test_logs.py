"""``culex run``'s log: Mosquito's per-task lines, batched, and cheap when nothing else looks."""

from __future__ import annotations

import io
import logging
import re
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import culex
from culex import logs

from .cli.test_cli import _enqueue_as, culex_command

LINE = re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d - (.*)")


@pytest.fixture
def stream() -> Iterator[io.StringIO]:
    """``culex run``'s set-up on the root logger, taken down afterwards."""
    root = logging.getLogger()
    others, level = root.handlers[:], root.level
    root.handlers = []  # (basicConfig does nothing on a root logger that has handlers)
    out = io.StringIO()
    logs.configure("INFO", out)
    root.handlers += others
    yield out
    for handler in root.handlers[:]:
        if isinstance(handler, logs.BatchingHandler):
            root.removeHandler(handler)
            handler.close()
    root.setLevel(level)


def ours_only() -> None:
    """Take pytest's capturing handler off the root logger for the rest of the test (it
    adds one for each phase of a test, after the fixtures are set up)."""
    root = logging.getLogger()
    root.handlers = [h for h in root.handlers if isinstance(h, logs.BatchingHandler)]


def lines(out: io.StringIO) -> list[str]:
    logs.flush_all()
    found = []
    for line in out.getvalue().splitlines():
        match = LINE.fullmatch(line)
        assert match, line
        found.append(match.group(1))
    return found


@pytest.fixture
def records(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The messages of the LogRecords made from here on."""
    made: list[str] = []
    make = logging.Logger.makeRecord

    def counted(self: logging.Logger, *args: object, **kwargs: object) -> logging.LogRecord:
        record = make(self, *args, **kwargs)  # type: ignore[arg-type]
        made.append(record.getMessage())
        return record

    monkeypatch.setattr(logging.Logger, "makeRecord", counted)
    return made


def test_a_task_line_reads_as_a_logged_line_but_makes_no_record(
    stream: io.StringIO, records: list[str]
) -> None:
    ours_only()
    runner_log = logging.getLogger("culex.runner")
    logs.task_line(runner_log, "Running task %s from %s", "noop<1>", "bench")
    runner_log.info("Running task %s from %s", "noop<2>", "bench")
    logs.task_line(runner_log, "task %s succeeded, took %s", "noop<1>", "0.2 ms")
    assert lines(stream) == [
        "Running task noop<1> from bench",
        "Running task noop<2> from bench",
        "task noop<1> succeeded, took 0.2 ms",
    ]
    assert records == ["Running task noop<2> from bench"]  # only the ordinary call made one


def test_a_filter_or_another_handler_sees_every_task_line(
    stream: io.StringIO, records: list[str]
) -> None:
    ours_only()
    runner_log = logging.getLogger("culex.runner")
    seen: list[str] = []

    class Seen(logging.Filter):
        def filter(self, record: logging.LogRecord) -> bool:
            seen.append(record.getMessage())
            return "secret" not in record.getMessage()

    culex_log = logging.getLogger("culex")
    culex_log.addFilter(Seen())
    try:
        logs.task_line(runner_log, "Running task %s", "noop<1>")
        logs.task_line(culex_log, "Running task %s", "secret<2>")
    finally:
        culex_log.filters.clear()
    extra = logging.StreamHandler(io.StringIO())
    logging.getLogger().addHandler(extra)
    try:
        logs.task_line(runner_log, "Running task %s", "noop<3>")
    finally:
        logging.getLogger().removeHandler(extra)
    assert seen == ["Running task secret<2>"]  # the filter is on culex: culex.runner's
    # records pass only its handlers' filters (logging's rule), so noop<1> took the fast path
    assert records == ["Running task secret<2>", "Running task noop<3>"]
    assert lines(stream) == ["Running task noop<1>", "Running task noop<3>"]


def test_below_info_no_task_line_is_written(stream: io.StringIO, records: list[str]) -> None:
    ours_only()
    logging.getLogger().setLevel(logging.WARNING)
    logs.task_line(logging.getLogger("culex.runner"), "Running task %s", "noop<1>")
    assert lines(stream) == [] and records == []


def test_lines_added_from_many_threads_while_batches_flush_are_each_written_once(
    stream: io.StringIO,
) -> None:
    ours_only()
    logger = logging.getLogger("culex.test.threads")
    threads, each = 4, 3000  # 12,000 lines: the batch of 256 and the flusher both write
    start = threading.Barrier(threads)

    def add(n: int) -> None:
        start.wait()
        for i in range(each):
            logs.task_line(logger, "line %d.%d", n, i)

    workers = [threading.Thread(target=add, args=(n,)) for n in range(threads)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    written = lines(stream)
    assert len(written) == threads * each
    assert set(written) == {f"line {n}.{i}" for n in range(threads) for i in range(each)}


def test_the_flusher_of_a_closed_handler_ends() -> None:
    """A flusher that wakes after close() ends its loop: close() once left it a bool where
    it waits (logging.Handler.close sets a _closed of its own), and the thread died with an
    AttributeError that pytest reported in whichever test ran then."""
    handler = logs.BatchingHandler(io.StringIO())
    handler.close()
    handler._flusher.join(5)
    handler._flush_often()  # (the loop, as a flusher that woke after close runs it)


# A module's logging set-up, as Django's LOGGING (its default shape), a dictConfig that
# disables the loggers it does not name, and one that takes the root logger for itself.
DJANGO_DEFAULT = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django": {"handlers": ["console"], "level": "INFO"}},
}
DISABLING = {"version": 1, "disable_existing_loggers": True}
ROOT_TAKEN = {
    "version": 1,
    "disable_existing_loggers": True,
    "formatters": {"app": {"format": "APP %(name)s %(message)s"}},
    "handlers": {
        "out": {"class": "logging.StreamHandler", "stream": "ext://sys.stdout", "formatter": "app"}
    },
    "root": {"handlers": ["out"], "level": "WARNING"},
}
CONFIGURED_JOBS = """
import logging.config

import culex

logging.config.dictConfig({config!r})
logging.getLogger("app").warning("the app's own line")


class LoggedJob(culex.QueuedJob):
    def perform(self) -> str:
        return "done"
"""


@pytest.mark.parametrize(
    "config", [DJANGO_DEFAULT, DISABLING, ROOT_TAKEN], ids=["django", "disabling", "root"]
)
def test_culex_run_logs_whatever_logging_set_up_the_module_made(
    r: redis.Redis, tmp_path: Path, config: dict[str, object]
) -> None:
    """A dictConfig in the user's module closes every handler and may disable culex's
    loggers: ``culex run`` still says it is buzzing and logs each task, on stderr, in its
    own format, and once (a root logger the module took keeps the module's own lines)."""
    (tmp_path / "configured_jobs.py").write_text(CONFIGURED_JOBS.format(config=config))
    proc = subprocess.Popen(
        culex_command("--log-level", "DEBUG", "run", "configured_jobs"),
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        _enqueue_as(r, "t1", "LoggedJob", "logged_job", "{}")
        assert culex.Task("t1", "logged_job").result(timeout=20) == "done"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 0, err
    assert LINE.fullmatch(next(line for line in err.splitlines() if "buzzing" in line))
    assert re.search(r"^\S+ \S+ - Running task logged_job<t1> ", err, flags=re.M), err
    assert re.search(r"^\S+ \S+ - task logged_job<t1> succeeded, took ", err, flags=re.M), err
    if config is ROOT_TAKEN:
        assert out == "APP app the app's own line\n"  # and no culex line twice
    else:
        assert "the app's own line" in err and out == ""


def test_a_closed_handler_writes_each_line_at_once() -> None:
    """dictConfig closes every handler, culex run's too, whose flusher then stops: a line
    that reaches it afterwards (a dictConfig made after culex run took its handler back)
    is written at once rather than wait for a batch that no flusher will write."""
    out = io.StringIO()
    handler = logs.BatchingHandler(out)
    handler.setFormatter(logs.LineFormatter())
    handler.close()
    handler.emit(logging.makeLogRecord({"msg": "after close", "levelno": logging.INFO}))
    assert LINE.fullmatch(out.getvalue().rstrip("\n"))
