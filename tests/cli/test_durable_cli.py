"""``culex task`` of a durable task (its records, what it waits for, its kept signals) and
``culex signal``, against the test server and a real runner; and the reading of the
records (culex.operations.durable_view) on fields culex did not write."""

from __future__ import annotations

import re

import pytest
import redis

import culex
from culex import cli, logs
from culex.operations import durable_view

from ..conftest import await_until, running
from ..dashboard.durable_shown import QUEUE, ShownApprovalJob, runner


@pytest.fixture(autouse=True)
def quiet(r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """An empty server; the command's logging left as pytest set it."""
    monkeypatch.setattr(logs, "configure", lambda *args, **kwargs: None)


def command(url: str, *words: str) -> int:
    return cli.main([*words, "--redis-url", url])


def steps_table(out: str) -> list[list[str]]:
    """The rows of ``culex task``'s steps table, each cut in its columns."""
    lines = out.split("\nsteps (", 1)[1].splitlines()[1:]
    rows = []
    for line in lines[1:]:
        if line.startswith("waiting for"):
            break
        rows.append(re.split(r"\s{2,}", line.strip()))
    return rows


async def waiting_task(wait_s: float | None = None) -> culex.Task:
    """A task run by a real runner until it waits for "approved" (then the runner stops)."""
    async with running(runner()):
        task = await ShownApprovalJob(wait_s=wait_s).aenqueue()
        await await_until(lambda: task.info().get("awaiting") == "approved", what="the wait")
    return task


async def test_task_shows_the_steps_and_the_awaited_signal_and_signal_delivers(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    task = await waiting_task()
    assert command(url, "signal", QUEUE, task.id, "aproved", '{"n": 12}') == 1  # (a typo)
    assert capsys.readouterr().out == (
        f"skipped: signal 'aproved' to {QUEUE}<{task.id}>: nothing kept: the task awaits "
        "signal 'approved' (it is scheduled); --keep keeps it for a later receive\n"
    )
    assert "signal:aproved" not in task.info()
    assert command(url, "signal", QUEUE, task.id, "note", '{"n": 12}', "--keep") == 0
    assert capsys.readouterr().out == (
        f"kept: signal 'note' to {QUEUE}<{task.id}>: kept for a later receive of it: the "
        "task awaits signal 'approved' (it is scheduled)\n"
    )
    assert command(url, "task", QUEUE, task.id) == 0
    out = capsys.readouterr().out
    rows = steps_table(out)
    assert [row[:3] for row in rows] == [
        ["0", "ask", "step"],
        ["1", "sleep", "sleep"],
        ["2", "early", "receive"],
    ]
    assert rows[0][4] == str(len('"asked ops"'))  # (the result's JSON text, in bytes)
    assert rows[1][4] == "-" and rows[1][5].startswith("until 20")
    assert rows[2][4:] == ["-", "timed out"]
    assert "\nwaiting for    signal 'approved' for ever\n" in out
    assert "\nsignals kept   'note' (9 bytes)\n" in out
    assert "step:0" not in out and "signal:note" not in out  # (only in the readable part)

    assert command(url, "signal", QUEUE, task.id, "approved", '{"by": "ana"}') == 0
    assert capsys.readouterr().out.startswith("delivered: signal 'approved'")
    assert task.state() == culex.TaskState.WAITING
    async with running(runner()):
        assert await task.aresult(timeout=30) == "approved by ana"
    assert command(url, "task", QUEUE, task.id) == 0
    out = capsys.readouterr().out
    assert [row[:3] for row in steps_table(out)][3:] == [
        ["3", "approved", "receive"],
        ["4", "welcome", "step"],
    ]
    assert steps_table(out)[3][4:] == [str(len('{"by": "ana"}')), "signal received"]
    assert "\nwaiting for    nothing\n" in out

    assert command(url, "signal", QUEUE, task.id, "approved") == 1  # (it has ended)
    assert capsys.readouterr().out.startswith("ended: signal 'approved'")


async def test_a_wait_with_a_timeout_shows_its_end(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    task = await waiting_task(wait_s=3600)
    until = int(task.info()["awaiting_until"])
    assert command(url, "task", QUEUE, task.id) == 0
    out = capsys.readouterr().out
    shown = durable_view.waiting_for(task.info())
    assert shown == durable_view.Waiting("approved", until)
    assert re.search(r"\nwaiting for    signal 'approved' until 20\d\d-\S+\+00:00\n", out)


def test_signal_refuses_a_value_that_is_not_json_and_an_unknown_task(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    task = ShownApprovalJob().enqueue()
    assert command(url, "signal", QUEUE, task.id, "approved", "{by: ana}") == 2
    said = capsys.readouterr()
    assert said.out == "" and said.err.endswith(
        "\nculex: the value '{by: ana}' is not JSON: Expecting property name enclosed in "
        "double quotes: line 1 column 2 (char 1)\n"
    )  # (one line, after the one that names the server)
    assert not any(field.startswith("signal:") for field in task.info())  # nothing sent
    assert command(url, "signal", QUEUE, "no-such-task", "approved") == 1
    assert capsys.readouterr().out.startswith("unknown: signal 'approved'")
    assert command(url, "signal", QUEUE, task.id, "x" * 201) == 2  # (a name too long)
    assert "1 to 200 bytes" in capsys.readouterr().err
    assert command(url, "signal", QUEUE, task.id, "approved") == 1  # (not started yet)
    assert capsys.readouterr().out.endswith(
        "nothing kept: the task awaits no signal now (it is waiting); --keep keeps it for a "
        "later receive\n"
    )
    assert command(url, "signal", QUEUE, task.id, "approved", "--keep") == 0  # (JSON null)
    assert capsys.readouterr().out.endswith(
        "kept for a later receive of it: the task awaits no signal now (it is waiting)\n"
    )
    assert task.info()["signal:approved"] == "null"
    assert command(url, "signal", QUEUE, task.id, "approved", "[1, NaN]") == 2
    assert "must be JSON as given" in capsys.readouterr().err


def test_the_view_never_fails_on_fields_culex_did_not_write() -> None:
    fields = {
        "state": "scheduled",
        "steps": "99999999999",  # (more than it holds: stops at the first missing)
        "step:0": "not json",
        "step:1": '{"name": "s", "kind": "odd", "at": "x", "value": 5}',
        "step:2": '{"name": "sleep", "kind": "sleep", "at": 1.7e12, "until": 1700000000500}',
        "due_at": "1700000000500",
        "signal:b": "é",
        "signal:a": "",
    }
    found = durable_view.records(fields)
    assert [(r.place, r.kind, r.size) for r in found] == [
        (0, "?", 8),
        (1, "?", None),
        (2, "sleep", None),
    ]
    assert found[2].at == 1_700_000_000_000
    assert durable_view.waiting_for(fields) == durable_view.Waiting(None, 1_700_000_000_500)
    assert durable_view.waiting_for({**fields, "due_at": "1"}) is None  # (a retry's delay)
    assert durable_view.waiting_for({**fields, "state": "waiting"}) is None
    assert durable_view.kept_signals(fields) == [("a", 0), ("b", 2)]
    forever = {"state": "scheduled", "awaiting": "go", "awaiting_until": str(2**42 - 1)}
    assert durable_view.waiting_for(forever) == durable_view.Waiting("go", None)
    assert not durable_view.is_durable({"state": "waiting"})
