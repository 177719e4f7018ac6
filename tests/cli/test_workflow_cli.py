"""culex workflow: a run shown, cancelled and retried, against the test server and real
runners (the jobs of the workflow tests)."""

from __future__ import annotations

import asyncio
import re

import pytest
import redis

import culex
from culex import cli, logs
from culex.cli.workflow_commands import _show
from culex.operations.runs import PAGE, RunOverview, overview
from culex.workflows.finishing import depths
from culex.workflows.run import NodeView

from ..conftest import running
from ..workflows.shown_jobs import (
    QUEUES,
    ShownBrokenJob,
    ShownForeverJob,
    ShownMergeJob,
    ShownStepJob,
    reset,
)


@pytest.fixture(autouse=True)
def quiet(r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty server; the command's logging left as pytest set it."""
    monkeypatch.setattr(logs, "configure", lambda *args, **kwargs: None)
    reset()


def runner() -> culex.Runner:
    return culex.Runner(run_from=list(QUEUES))


def workflow(url: str, *words: str) -> int:
    return cli.main(["workflow", *words, "--redis-url", url])


def table(out: str) -> list[list[str]]:
    """The node table's rows (after its header), each cut in its columns."""
    lines = out.split("\n\n", 1)[1].strip().splitlines()
    header = lines[0]
    starts = [m.start() for m in re.finditer(r"(?<=  )\S|^\S", header)]
    return [
        [line[a:b].strip() for a, b in zip(starts, [*starts[1:], None], strict=True)]
        for line in lines[1:]
    ]


async def test_a_run_is_shown_with_its_nodes_by_depth(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    wf = culex.Workflow(name="nightly-report")
    first = wf.add(ShownStepJob(n=150), name="fetch1")
    merge = wf.add(ShownMergeJob(), after=[first], name="merge")
    second = wf.add(ShownStepJob(n=275), name="fetch2")  # added after merge, a root all the same
    notify = wf.add(ShownMergeJob(), after=[merge, second], name="notify")
    run = wf.enqueue()

    assert workflow(url, run.id) == 0
    out = capsys.readouterr().out
    assert f"run      {run.id}\n" in out and "name     nightly-report\n" in out
    assert "state    running\n" in out and "ended    -\n" in out
    assert "nodes    4: 2 blocked, 2 waiting\n" in out
    rows = table(out)
    assert [row[:4] for row in rows] == [
        ["fetch1", "waiting", "wf-shown-a", first.id],
        ["fetch2", "waiting", "wf-shown-a", second.id],
        ["merge", "blocked", "wf-shown-b", merge.id],
        ["notify", "blocked", "wf-shown-b", notify.id],
    ]
    assert [row[7] for row in rows] == ["-", "-", "fetch1", "merge, fetch2"]

    async with running(runner()):
        assert await run.await_(timeout=30) == "succeeded"
    assert workflow(url, run.id) == 0
    out = capsys.readouterr().out
    assert "state    succeeded\n" in out and "nodes    4: 4 succeeded\n" in out
    assert not re.search(r"^ended    -$", out, re.MULTILINE)
    for row in table(out):
        assert row[1] == "succeeded" and row[4] == "1"  # one attempt each
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", row[5]), row
        assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", row[6]), row


async def test_cancel_then_retry_from_the_command_line(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    wf = culex.Workflow()
    forever = wf.add(ShownForeverJob(), name="forever")
    later = wf.add(ShownMergeJob(), after=[forever], name="later")
    run = wf.enqueue()
    async with running(runner()):
        while forever.id not in ShownStepJob.started:
            await forever.astate()  # (a round trip a turn, until it runs)
        # (in a thread: the runner goes on, on this loop, while the command waits for Redis)
        assert await asyncio.to_thread(workflow, url, "cancel", run.id) == 0
        assert f"cancelling workflow run {run.id}" in capsys.readouterr().out
        assert await run.await_(timeout=30) == "cancelled"
    assert later.id not in ShownStepJob.started
    assert workflow(url, "cancel", run.id) == 1  # it has ended: nothing to call off
    assert capsys.readouterr().out == f"workflow run {run.id}: not cancelled, it is cancelled\n"
    assert workflow(url, run.id) == 0
    assert "state    cancelled\n" in capsys.readouterr().out


async def test_retry_runs_a_failed_run_again(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    wf = culex.Workflow()
    bad = wf.add(ShownBrokenJob(), name="bad")
    wf.add(ShownMergeJob(), after=[bad], name="merge")
    run = wf.enqueue()
    assert workflow(url, "retry", run.id) == 2  # still running: refused
    assert "is running: a run is retried once it has ended" in capsys.readouterr().err
    async with running(runner()):
        assert await run.await_(timeout=30) == "failed"
        assert await asyncio.to_thread(workflow, url, run.id) == 0
        shown = capsys.readouterr().out
        assert "state    failed\n" in shown and "nodes    2: 2 dead\n" in shown
        ShownBrokenJob.failing = False
        assert await asyncio.to_thread(workflow, url, "retry", run.id) == 0
        assert capsys.readouterr().out == f"retrying workflow run {run.id}: 2 node(s) run again\n"
        assert await run.await_(timeout=30) == "succeeded"
    assert workflow(url, run.id) == 0
    out = capsys.readouterr().out
    assert "retries  1\n" in out and "nodes    2: 2 succeeded\n" in out
    assert bad.result(timeout=1) == "printed"


async def test_dead_retry_of_a_node_says_it_goes_back_with_its_run(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    wf = culex.Workflow()
    bad = wf.add(ShownBrokenJob(), name="bad")
    merge = wf.add(ShownMergeJob(), after=[bad], name="merge")
    run = wf.enqueue()
    async with running(runner()):
        assert await run.await_(timeout=30) == "failed"
    capsys.readouterr()
    done = cli.main(["dead", "retry", bad.queue, bad.id, "ghost", "--redis-url", url])
    assert done == 1  # (nothing was put back: not a success)
    assert capsys.readouterr().out.splitlines() == [
        f"put 0 dead task(s) of {bad.queue} back in waiting",
        f"skipped {bad.id}: a node of workflow run {run.id}, which retries its dead nodes "
        f"together: culex workflow retry {run.id}",
        "skipped (not dead, or its record expired): ghost",
    ]
    assert bad.state() == merge.state() == culex.TaskState.DEAD


def test_a_missing_run_is_one_line_and_exit_1(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert workflow(url, "0190nosuchrun") == 1
    said = capsys.readouterr().out
    assert said.count("\n") == 1 and said.startswith("workflow run 0190nosuchrun not found")
    for words in (["cancel", "0190nosuchrun"], ["retry", "0190nosuchrun"]):
        assert workflow(url, *words) == 1
        assert "not found" in capsys.readouterr().out


def test_bad_words_are_a_usage_error(url: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert workflow(url, "cancel", "a", "b") == 2
    assert "usage: culex workflow RUN_ID" in capsys.readouterr().err
    assert workflow(url, "has space") == 2  # (no run id holds a space: refused before any read)
    assert "culex: a workflow run id is 1 to 200 printable characters" in capsys.readouterr().err


async def test_a_run_is_paged_by_limit_offset_and_state(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    wf = culex.Workflow()
    roots = [wf.add(ShownStepJob(n=i), name=f"root{i:02d}") for i in range(12)]
    wf.add(ShownMergeJob(), after=roots, name="merge")
    run = wf.enqueue()
    assert workflow(url, run.id, "--limit", "5", "--offset", "5") == 0
    out = capsys.readouterr().out
    assert "nodes    13: 1 blocked, 12 waiting\n" in out
    assert [row[0] for row in table(out)[:5]] == [f"root{i:02d}" for i in range(5, 10)]
    assert out.endswith("\nnodes 6-10 of 13 shown (--limit 5); next: --offset 10\n")
    assert workflow(url, run.id, "--state", "blocked") == 0
    out = capsys.readouterr().out
    ((merge,),) = [row[:1] for row in table(out)]
    assert merge == "merge" and "root00, root01, root02 +9 more" in out
    assert workflow(url, run.id, "--limit", "0") == 2
    assert "--limit must be 1 or more" in capsys.readouterr().err
    assert workflow(url, run.id, "--state", "finished") == 2
    assert "--state is one of blocked, waiting" in capsys.readouterr().err
    assert workflow(url, "cancel", run.id, "--offset", "3") == 2


def _big_run(nodes: int) -> RunOverview:
    """A run of ``nodes`` nodes, the last after all the others (a fan-in), as read."""
    views = [
        NodeView(f"n{i}", culex.Task(f"t{i:06d}", "big"), (), "dead", {"state": "waiting"})
        for i in range(nodes - 1)
    ]
    after = tuple(view.name for view in views)
    views.append(NodeView("last", culex.Task("tlast", "big"), after, "dead", {}))
    return overview("r1", {"state": "running"}, views)


def test_a_run_of_10000_nodes_prints_its_counts_and_one_page_in_linear_work(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _show(_big_run(10_000))
    out = capsys.readouterr().out
    assert "nodes    10000: 9999 waiting, 1 expired\n" in out
    assert len(table(out)) == PAGE + 2  # (the rows, a blank line, where the page is)
    assert out.endswith(
        f"\nnodes 1-{PAGE} of 10000 shown (--limit {PAGE}); next: --offset {PAGE}\n"
    )
    # Each line is bounded, whatever a node's upstreams: no cell widens every row (the fan-in
    # node's 9,999 names padded every line to 80,000 characters: quadratic).
    assert max(map(len, out.splitlines())) < 200
    _show(_big_run(10_000), offset=9_999)
    assert "n0, n1, n2 +9996 more\n" in capsys.readouterr().out


class Counting(dict[str, tuple[str, ...]]):
    """A dict that counts its look-ups."""

    looked = 0

    def __getitem__(self, key: str) -> tuple[str, ...]:
        Counting.looked += 1
        return super().__getitem__(key)

    def __contains__(self, key: object) -> bool:
        Counting.looked += 1
        return super().__contains__(key)


@pytest.mark.parametrize("shape", ["fan-in", "chain"])
def test_the_depths_of_10000_nodes_take_linear_look_ups(shape: str) -> None:
    n = 10_000
    after: dict[str, tuple[str, ...]]
    if shape == "chain":
        after = {f"n{i}": (f"n{i - 1}",) if i else () for i in range(n)}
    else:
        after = {f"n{i}": () for i in range(n - 1)} | {"last": tuple(f"n{i}" for i in range(n - 1))}
    Counting.looked = 0
    found = depths(Counting(after))
    assert max(found.values()) == (n - 1 if shape == "chain" else 1)
    assert Counting.looked <= 10 * n, Counting.looked
