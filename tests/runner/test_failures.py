"""A task keeps each failed attempt's error whole, with its traceback: in its hash's errors
field, in the runner's log and in culex task."""

from __future__ import annotations

import inspect
import logging
import re
from datetime import datetime, timedelta
from typing import ClassVar

import pytest
import redis

import culex
from culex import cli, logs
from culex._redis import claims, reports
from culex._redis.keys import queue_keys
from culex.jobs import failures

from ..conftest import driver_of, running

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)


class ParseJob(culex.QueuedJob):
    queue = "parse"
    max_retries = 0
    text: str

    def perform(self) -> int:
        return int(self.text)  # (the line each traceback must name)


class ParseInAChildJob(ParseJob):
    queue = "parse_child"
    isolation = "process"


def line_of(job: type[culex.QueuedJob], words: str) -> str:
    """``File "<this file>", line N, in perform`` for the line of perform holding words."""
    lines, first = inspect.getsourcelines(job.perform)
    number = first + next(i for i, line in enumerate(lines) if words in line)
    return f'File "{__file__}", line {number}, in perform'


@pytest.mark.parametrize("job", [ParseJob, ParseInAChildJob], ids=["thread", "process"])
async def test_a_dead_task_keeps_its_traceback_with_the_job_s_file_and_line(
    r: redis.Redis,
    url: str,
    job: type[ParseJob],
    caplog: pytest.LogCaptureFixture,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    task = await job(text="12a").aenqueue()
    with caplog.at_level(logging.WARNING, logger="culex"):
        async with running(culex.Runner(run_from=[job.queue])):
            with pytest.raises(culex.TaskFailed) as failed:
                await task.aresult(timeout=20)
    reason = "ValueError: invalid literal for int() with base 10: '12a'"
    assert failed.value.reason == reason
    where = line_of(ParseJob, "int(self.text)")
    info = await task.ainfo()
    assert info["last_error"] == reason  # (as before: the reason alone)
    [kept] = failures.attempt_errors(info["errors"])
    assert (kept.attempt, kept.at, kept.error) == (1, int(info["failed_at"]), reason)
    assert kept.traceback.startswith("Traceback (most recent call last):\n")
    assert where in kept.traceback and kept.traceback.endswith(f"\n{reason}\n")

    # In the runner's log, below its Failure line, culex's frames before the job's folded.
    [logged] = [m for m in caplog.messages if m.startswith("Failure: task")]
    hint = f"culex task {job.queue}<{task.id}> --full"
    assert logged.endswith(f"({reason})\n" + failures.folded(kept.traceback, hint).rstrip("\n"))
    assert f"culex frames folded: {hint})\n  {where}\n" in logged

    # In culex task, under the other fields.
    monkeypatch.setattr(logs, "configure", lambda *args, **kwargs: None)
    assert cli.main(["task", job.queue, task.id, "--redis-url", url]) == 0
    out = capsys.readouterr().out
    shown = re.search(r"^(errors +)attempt 1 at (\S+): (.*)$", out, re.MULTILINE)
    assert shown is not None and shown[3] == reason
    assert datetime.fromisoformat(shown[2]).timestamp() * 1000 == kept.at
    assert f"\n{' ' * len(shown[1])}    {where}\n" in out  # (the traceback, indented)


class FailsLongJob(culex.QueuedJob):
    queue = "fails_long"
    max_retries = 6
    runs: ClassVar[list[int]] = []

    def perform(self) -> None:
        FailsLongJob.runs.append(self.attempt)
        raise RuntimeError(f"attempt {self.attempt}: " + "é" * 10_000 + " the end")

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(0)


async def test_a_task_keeps_the_newest_attempts_errors_each_traceback_cut_to_its_end(
    r: redis.Redis,
) -> None:
    FailsLongJob.runs = []
    task = await FailsLongJob().aenqueue()
    async with running(culex.Runner(run_from=["fails_long"])):
        with pytest.raises(culex.TaskFailed, match="attempt 7"):
            await task.aresult(timeout=20)
    assert FailsLongJob.runs == [1, 2, 3, 4, 5, 6, 7]
    kept = failures.attempt_errors((await task.ainfo())["errors"])
    assert [k.attempt for k in kept] == [3, 4, 5, 6, 7]  # failures.KEPT, the newest
    assert [k.at for k in kept] == sorted(k.at for k in kept if k.at is not None)
    for k in kept:
        assert k.error.startswith(f"RuntimeError: attempt {k.attempt}: éé")
        cut, rest = k.traceback.split("\n", 1)
        assert cut.startswith("[... ") and cut.endswith(" bytes cut ...]")
        assert len(rest.encode()) <= failures.TRACEBACK_BYTES
        assert len(rest.encode()) >= failures.TRACEBACK_BYTES - 1  # (a 2-byte é cut: gone)
        assert rest.endswith("éé the end\n")


def test_capped_keeps_whole_characters_of_the_end() -> None:
    assert failures.capped("short") == "short"
    assert failures.capped("a" * 10, 10) == "a" * 10
    assert failures.capped("ab" + "é" * 5, 5) == "[... 7 bytes cut ...]\néé"
    assert failures.capped("\udcff", 10) == "?"  # (a lone surrogate is no UTF-8)


def test_the_errors_field_starts_again_when_it_is_no_list_and_reads_as_none(
    r: redis.Redis,
) -> None:
    d = driver_of(r)
    keys = queue_keys("culex", "parse")
    task = ParseJob(text="1").enqueue()

    def stored_errors() -> str:
        stored = r.hget(keys.task(task.id), "errors")
        return stored.decode() if isinstance(stored, bytes) else ""

    def fail_once(traceback: str | None) -> None:
        [claimed] = d.run(
            claims.claim(keys, limit=1, lease_ms=60_000, promote_limit=1, dead_ttl_ms=1000)
        ).tasks
        call = reports.fail(
            keys, task.id, claimed.attempt, "boom", retry_delay_ms=0, dead_ttl_ms=60_000,
            dead_max=10, traceback=traceback, errors_kept=2,
        )  # fmt: skip
        assert d.run(call) == "scheduled"

    for stored in ("not json", '{"a": 1}', "[1, null]", "7"):
        r.hset(keys.task(task.id), "errors", stored)
        assert failures.attempt_errors(stored) == []
        fail_once("tb")
        [entry] = failures.attempt_errors(stored_errors())
        assert (entry.error, entry.traceback) == ("boom", "tb")
    fail_once("")  # (no traceback: an entry all the same, without one)
    fail_once(None)  # (a caller that sends none, as one of an older version: untouched)
    kept = failures.attempt_errors(stored_errors())
    assert [(k.attempt, k.traceback) for k in kept] == [(4, "tb"), (5, "")]
    assert r.hget(keys.task(task.id), "last_error") == b"boom"
    [claimed] = d.run(
        claims.claim(keys, limit=1, lease_ms=60_000, promote_limit=1, dead_ttl_ms=1000)
    ).tasks
    before = r.hgetall(keys.task(task.id))
    refused = reports.fail(
        keys, task.id, claimed.attempt, "x", retry_delay_ms=0, dead_ttl_ms=1, dead_max=1,
        traceback="t", errors_kept=0,
    )  # fmt: skip
    with pytest.raises(culex.errors.ServerError, match=r"ARGV\[8\] errors_kept must be"):
        d.run(refused)
    assert r.hgetall(keys.task(task.id)) == before  # (refused before any write)


def test_culex_task_shows_a_task_that_failed_before_errors_were_kept(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    d = driver_of(r)
    keys = queue_keys("culex", "parse")
    task = ParseJob(text="1").enqueue()
    [claimed] = d.run(
        claims.claim(keys, limit=1, lease_ms=60_000, promote_limit=1, dead_ttl_ms=1000)
    ).tasks
    old = reports.fail(
        keys, task.id, claimed.attempt, "ValueError: old", retry_delay_ms=None,
        dead_ttl_ms=60_000, dead_max=10,
    )  # fmt: skip
    assert d.run(old) == "dead"
    assert r.hget(keys.task(task.id), "errors") is None
    monkeypatch.setattr(logs, "configure", lambda *args, **kwargs: None)
    assert cli.main(["task", "parse", task.id, "--redis-url", url]) == 0
    out = capsys.readouterr().out
    assert "last_error    ValueError: old\n" in out and "errors" not in out
    r.hset(keys.task(task.id), "errors", "[not a list")  # (written by something else)
    assert cli.main(["task", "parse", task.id, "--redis-url", url]) == 0
    assert "errors        [not a list\n" in capsys.readouterr().out


def _frame(path: str, line: int = 1, name: str = "f") -> str:
    return f'  File "{path}", line {line}, in {name}\n    code()\n    ^^^^^^\n'


RUNNER = "/srv/app/.venv/lib/python3.12/site-packages/culex/runner/attempt.py"
POOL = "/usr/lib/python3.12/concurrent/futures/thread.py"
MINE = "/srv/app/jobs.py"
HEADER = "Traceback (most recent call last):\n"


def test_folded_leaves_out_culex_s_leading_frames_and_says_how_many() -> None:
    stored = HEADER + _frame(POOL) + _frame(RUNNER) + _frame(MINE) + "ValueError: x\n"
    assert failures.folded(stored) == (
        HEADER + "  (2 culex frames folded: --full)\n" + _frame(MINE) + "ValueError: x\n"
    )
    # each traceback of a chain folds its own; one of culex's frames alone is kept whole
    cause = HEADER + _frame(RUNNER) + "KeyError: 'k'\n"
    chained = cause + "\nDuring handling of the above exception, another exception occurred:\n\n"
    chained += HEADER + _frame(RUNNER) + _frame(MINE, 2) + "ValueError: y\n"
    assert failures.folded(chained, "see more") == (
        cause + "\nDuring handling of the above exception, another exception occurred:\n\n"
        + HEADER + "  (1 culex frame folded: see more)\n" + _frame(MINE, 2) + "ValueError: y\n"
    )  # fmt: skip
    # no frame of culex's before the job's first (or no traceback at all): unchanged
    for kept in (
        HEADER + _frame(MINE) + _frame(RUNNER) + "E: e\n",
        HEADER + _frame(POOL) + _frame(MINE) + "E: e\n",
        "no traceback",
    ):
        assert failures.folded(kept) == kept
