"""What a foreign producer, an older version or a foreign runner wrote never breaks a culex
command or a read: each lists it as stored, on a terminal that writes UTF-8."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
import urllib.request

import pytest
import redis

from culex.operations import inspection, metrics, stats

from .. import foreign_records
from ..foreign_records import IDS, QUEUE, SHOWN_BAD_QUEUE, SHOWN_BAD_TYPE
from .test_metrics import metrics_command


@pytest.fixture
def planted(r: redis.Redis) -> None:
    foreign_records.plant(r)


def culex(*args: str, code: int = 0) -> str:
    """``culex ARGS`` in its own process, its output a UTF-8 stream as on a terminal: what it
    printed (stdout), once it exited with ``code`` and printed no traceback."""
    done = subprocess.run(
        [sys.executable, "-m", "culex", *args],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env={**os.environ, "PYTHONIOENCODING": "utf-8"},
        timeout=60,
    )
    assert "Traceback" not in done.stderr, (args, done.stderr)
    assert done.returncode == code, (args, done.stdout, done.stderr)
    return done.stdout + done.stderr


@pytest.mark.usefixtures("planted")
def test_every_listing_command_shows_foreign_records_as_stored() -> None:
    shown = culex("queues")
    assert SHOWN_BAD_QUEUE in shown and "rate fast per 1000 ms; concurrency -3" in shown
    for state in ("waiting", "pending", "scheduled", "dead"):
        for order in ([], ["--oldest"]):
            shown = culex("tasks", QUEUE, "--state", state, *order)
            for task_id, (stored_in, _) in IDS.items():
                if stored_in == state:
                    assert task_id in shown, (task_id, state)
            assert SHOWN_BAD_TYPE in shown, state
    for task_id in IDS:
        shown = culex("task", QUEUE, task_id)
        assert SHOWN_BAD_TYPE in shown and "g\ufffd" in shown, task_id
    shown = culex("dead", QUEUE)
    assert "t-dead" in shown and "t-dead-high" in shown and "boom \ufffd(" in shown
    shown = culex("runners")
    for runner in ("r-guessed", "r-tasks", "r-started", "r-bytes"):
        assert runner in shown, runner
    assert SHOWN_BAD_QUEUE in shown
    for flags in ([], ["--jobs"], ["--window", "2d"]):
        shown = culex("stats", *flags)
        assert SHOWN_BAD_QUEUE in shown
    assert SHOWN_BAD_TYPE in culex("stats", "--jobs")
    shown = culex("periodic")
    assert "every \ufffd" in shown and "Tock\ufffd" in shown


@pytest.mark.usefixtures("planted")
def test_culex_metrics_scrapes_foreign_counters() -> None:
    with metrics_command() as url, urllib.request.urlopen(url, timeout=30) as answer:
        assert answer.status == 200
        scraped = answer.read().decode()
    assert f'job="{SHOWN_BAD_TYPE}",outcome="dead",queue="{QUEUE}"}} 2.0' in scraped
    assert f'culex_queue_tasks{{queue="{SHOWN_BAD_QUEUE}",state="waiting"}} 1.0' in scraped


@pytest.mark.usefixtures("planted")
def test_a_crafted_cursor_is_a_clear_error() -> None:
    for raw in (b"1_000:abc", "١٢:abc".encode(), b"nan:abc", b" 12 :abc"):
        cursor = base64.urlsafe_b64encode(raw).decode()
        shown = culex("tasks", QUEUE, "--after", cursor, code=2)
        assert "not a cursor that a page of tasks gave" in shown, raw


def test_culex_task_refuses_a_bad_id_clearly() -> None:
    assert "a task id must be 1 to 200 printable" in culex("task", QUEUE, "a b", code=2)
    assert "a queue name cannot hold" in culex("task", "a b", "t-1", code=2)


@pytest.mark.usefixtures("planted")
def test_pages_of_one_row_go_through_infinite_scores_and_ids_that_are_not_utf8(
    r: redis.Redis,
) -> None:
    r.zadd("culex:{foreign}:waiting", {b"t-\xff": 5, b"t-\xfe": 5})
    r.hset(b"culex:{foreign}:task:t-\xff", "type", "J")
    r.hset(b"culex:{foreign}:task:t-\xfe", "type", "J")
    for newest_first in (True, False):
        seen, cursor = [], None
        while True:
            page = inspection.tasks(QUEUE, "waiting", limit=1, cursor=cursor,
                                    newest_first=newest_first)  # fmt: skip
            seen += [row.id for row in page.rows]
            if page.next_cursor is None:
                break
            cursor = page.next_cursor
        assert sorted(seen) == sorted(
            ["t-bytes", "t-deep", "t-low", "t-high", "t-\udcff", "t-\udcfe"]
        )
    found = inspection.find_task(QUEUE, "t-high")
    assert found is not None and found.at == float("inf") and found.job == SHOWN_BAD_TYPE


@pytest.mark.usefixtures("planted")
def test_the_reads_return_what_was_stored() -> None:
    latency = inspection.queue_latency()
    assert latency[QUEUE] >= 0  # (its -inf head holds no time: the groups' head, or none)
    counts = inspection.queue_counts()
    assert counts[QUEUE]["waiting"] == 4 and counts["bad\udcffname"]["waiting"] == 1
    totals = stats.totals(queues=[QUEUE])
    assert totals[QUEUE, SHOWN_BAD_TYPE].dead == 2
    runners = {runner["id"]: runner for runner in inspection.runners()}
    assert runners["r-guessed"]["host"] == "elsewhere" and runners["r-guessed"]["tasks"] == []
    assert runners["r-started"]["started"] == 0 and runners["r-started"]["concurrency"] == 0
    assert [t["id"] for t in runners["r-tasks"]["tasks"]] == ["", "", ""]
    assert runners["r-bytes"]["tasks"][0]["job"] == "J\ufffd"
    assert runners["r-bytes"]["tasks"][0]["started"] is None
    [periodic] = [row for row in inspection.periodic_jobs() if row.job == "Tick"]
    assert periodic.schedule == "every \ufffd" and periodic.next_run is None
    assert metrics.render().count(b"culex_tasks_total{") == 6


def test_periodic_status_shows_a_slot_no_datetime_holds(r: redis.Redis) -> None:
    from datetime import timedelta

    import culex

    class FarSlotJob(culex.PeriodicJob):
        queue = QUEUE
        run_every = timedelta(hours=1)

    try:
        record = f"culex:{{{QUEUE}}}:periodic:FarSlotJob"
        r.hset(record, mapping={"next_slot": "1" + "0" * 20, "last_enqueued_at": "x"})
        [row] = inspection.periodic_status([FarSlotJob])
    finally:
        culex.registry.remove(FarSlotJob)
    assert row["next run"] == "100000000000000000000 ms" and row["last run"] == "never"
