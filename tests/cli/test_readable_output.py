"""What the culex commands and the runner's log print for a person to read: a failed
attempt's traceback leads with the job's frames (culex's own folded, ``--full`` shows them),
``culex task`` prints a task's fields in a fixed order, readable."""

from __future__ import annotations

import re
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest
import redis

import culex
from culex import cli, logs

from ..conftest import running
from ..workflows.shown_jobs import QUEUES, ShownBrokenJob, ShownMergeJob, reset
from .test_cli import _enqueue_as, culex_command

FAILING_JOBS = textwrap.dedent(
    """
    import culex

    class ParseJob(culex.QueuedJob):
        text: str

        def perform(self) -> int:
            return int(self.text)  # the job's line
    """
)
REASON = "ValueError: invalid literal for int() with base 10: '12a'"
CULEX_FRAME = re.compile(r'^ +File "[^"]*[/\\]culex[/\\][^"]*", line', re.MULTILINE)


def _after_header(text: str) -> str:
    """The lines after the first traceback header in ``text``."""
    return text.split("Traceback (most recent call last):\n", 1)[1]


def test_a_failed_attempt_s_traceback_leads_with_the_job_s_frame_in_the_log_and_culex_task(
    r: redis.Redis, tmp_path: Path
) -> None:
    (tmp_path / "parse_jobs.py").write_text(FAILING_JOBS)
    proc = subprocess.Popen(
        culex_command("run", "parse_jobs"), cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    try:
        task_id = _enqueue_as(r, "p-1", "ParseJob", "parse_job", '{"text": "12a"}', max_retries=0)
        with pytest.raises(culex.TaskFailed):
            culex.Task(task_id, "parse_job").result(timeout=30)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=30)
    job_frame = re.compile(r'  File "[^"]*parse_jobs\.py", line 8, in perform\n')
    logged = _after_header(err.split("Failure: task parse_job<p-1>", 1)[1])
    # The runner's frames folded into one line that says where the whole one is; then the
    # job's frame and the exception.
    folded, rest = logged.split("\n", 1)
    assert re.fullmatch(
        r"  \(\d+ culex frames? folded: culex task parse_job<p-1> --full\)", folded
    ), logged
    assert job_frame.match(rest), logged
    assert f"\n{REASON}\n" in rest
    assert not CULEX_FRAME.search(logged.split(REASON, 1)[0])

    # culex task: the same; with --full, the frames as stored (culex's first).
    shown = subprocess.run(
        culex_command("task", "parse_job", task_id), capture_output=True, text=True, timeout=60
    )
    assert shown.returncode == 0, shown.stderr
    tail = _after_header(shown.stdout)
    folded_line, rest = tail.split("\n", 1)
    assert re.fullmatch(r" +\(\d+ culex frames? folded: --full\)", folded_line), tail
    assert re.match(r' +File "[^"]*parse_jobs\.py", line 8, in perform\n', rest), tail
    assert REASON in rest and not CULEX_FRAME.search(tail)
    whole = subprocess.run(
        culex_command("task", "parse_job", task_id, "--full"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert whole.returncode == 0, whole.stderr
    first_frame = _after_header(whole.stdout).split("\n", 1)[0]
    assert CULEX_FRAME.match(first_frame), whole.stdout
    assert "folded" not in whole.stdout and re.search(r"parse_jobs\.py\", line 8", whole.stdout)


@pytest.fixture
def quiet(r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty server; the command's logging left as pytest set it."""
    monkeypatch.setattr(logs, "configure", lambda *args, **kwargs: None)
    reset()


async def _broken_run() -> tuple[culex.WorkflowRun, culex.Task, culex.Task]:
    """A run whose first node fails with retry=False on its first attempt, so that the node
    after it ends dead without running: (the run, the failed node, the one after it)."""
    wf = culex.Workflow(name="printing")
    first = wf.add(ShownBrokenJob(), name="print")
    after = wf.add(ShownMergeJob(), after=[first], name="staple")
    run = await wf.aenqueue()
    async with running(culex.Runner(run_from=list(QUEUES))):
        await run.await_(timeout=30)
    return run, first, after


async def test_culex_task_prints_fields_in_a_fixed_order_without_culex_s_bookkeeping(
    quiet: None, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run, first, after = await _broken_run()
    assert cli.main(["task", after.queue, after.id, "--redis-url", url]) == 0
    out = capsys.readouterr().out
    names = [line.split()[0] for line in out.splitlines() if line and line[0] != " "]
    assert names == [
        "id", "queue", "type", "state", "run", "node", "policy", "up", "down", "attempt",
        "retry_count", "max_retries", "enqueue_time", "failed_at", "finished_at", "params",
        "last_error",
    ]  # fmt: skip
    # (a node's links as task names, not JSON; on_end, culex's own mark, left out)
    assert f"\nup            print ({first.queue}<{first.id}>)\n" in out
    assert "\ndown          none\n" in out
    assert f"\nrun           {run.id}\n" in out
    assert cli.main(["task", first.queue, first.id, "--redis-url", url]) == 0
    out = capsys.readouterr().out
    assert f"\ndown          {after.queue}<{after.id}>\n" in out and "on_end" not in out


async def test_culex_workflow_says_why_a_dead_node_died_and_culex_tasks_counts_retries(
    quiet: None, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    run, first, after = await _broken_run()
    assert cli.main(["workflow", run.id, "--redis-url", url]) == 0
    out = capsys.readouterr().out
    header, *rows = out.split("\n\n", 1)[1].strip().splitlines()
    assert header.split()[-1] == "error"
    errors = {row.split()[0]: row[header.index("error") :] for row in rows}
    assert errors == {
        "print": "out of paper",
        "staple": f"upstream print ({first.id}) ended dead: out of paper",
    }
    # fail(retry=False) on attempt 1: no retry; the node after it never ran: none either
    for task in (first, after):
        argv = ["tasks", task.queue, "--state", "dead", "--redis-url", url]
        assert cli.main(argv) == 0
        header, row = capsys.readouterr().out.splitlines()[:2]
        assert row.split()[0] == task.id
        assert row[header.index("retries") :].split()[0] == "0", (header, row)


@pytest.mark.parametrize(
    ("state", "failures", "error", "retries"),
    [
        ("dead", 1, "out of paper", 0),  # the failure that ended it had no retry after it
        ("dead", 3, "ValueError: x", 2),
        ("dead", 0, "cancelled", 0),  # cancelled before it ever ran
        ("dead", 2, "lease expired (runner lost): stall 4, past max_stalls (3)", 2),
        ("scheduled", 1, "ValueError: x", 1),  # its retry is due
        ("succeeded", 2, "ValueError: x", 2),
        ("waiting", 0, "", 0),
    ],
)
def test_retries_count_the_failures_that_ran_again(
    state: str, failures: int, error: str, retries: int
) -> None:
    from culex.operations.browsing import retries as counted

    assert counted(state, failures, error) == retries


def test_culex_events_columns_line_up(r: redis.Redis) -> None:
    class E(culex.QueuedJob):
        queue = "ev"

        def perform(self) -> None: ...

    class ReadableEventsLongerNamedJob(culex.QueuedJob):
        queue = "events_of_a_longer_queue"

        def perform(self) -> None: ...

    culex.configure(events=True)
    ids = [E().enqueue().id, ReadableEventsLongerNamedJob().enqueue().id, E().enqueue().id]
    done = subprocess.run(
        culex_command("events", "ev", "events_of_a_longer_queue"),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert sorted(line.split()[-1] for line in lines) == sorted(ids)
    # each column starts where it does on every other line
    for word in (3, 4, 6):
        starts = {[m.start() for m in re.finditer(r"\S+", line)][word] for line in lines}
        assert len(starts) == 1, (word, done.stdout)
