"""Browsing the tasks of a state (browse.lua through inspection.tasks) and finding one task:
order, cursors that hold while tasks come and go, the job filter and its bound, bad input."""

from __future__ import annotations

import re
import subprocess
import sys
import types
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
import redis

import culex
from culex._redis.keys import queue_keys, queues_key
from culex.operations import browsing, inspection
from culex.operations.inspection import TaskPage, TaskRow

from ..conftest import snapshot

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)

Q = "browsed"
K = queue_keys("culex", Q)
T0 = 1_700_000_000_000  # a score (ms)


def put(r: redis.Redis, state: str, rows: Iterable[tuple[str, int, str]], **fields: str) -> None:
    """Tasks in the wire format: (id, score, job type) in the set of ``state``."""
    pipe = r.pipeline(transaction=False)
    for task_id, score, job in rows:
        record: dict[Any, Any] = {
            "id": task_id, "type": job, "queue": Q, "params": '{"n": 1}',
            "enqueue_time": score - 5, "retry_count": 0, "attempt": 0, "state": state,
        }  # fmt: skip
        record.update(fields)
        pipe.hset(K.task(task_id), mapping=record)
        pipe.zadd(browsing.state_set(K, state), {task_id: score})
    pipe.sadd(queues_key("culex"), Q)  # (as enqueue() names it: the commands know it then)
    pipe.execute()


def walk(
    state: str, cursor: str | None = None, **options: object
) -> tuple[list[str], list[TaskPage]]:
    """Every page from ``cursor`` on, by following next_cursor: the ids in order, and the
    pages."""
    pages: list[TaskPage] = []
    while True:
        page = inspection.tasks(Q, state, cursor=cursor, **options)  # type: ignore[arg-type]
        pages.append(page)
        cursor = page.next_cursor
        if cursor is None:
            return [row.id for page in pages for row in page.rows], pages


def test_a_page_is_the_newest_first_and_the_oldest_with_newest_first_false(
    r: redis.Redis,
) -> None:
    put(r, "waiting", [("a", T0, "J"), ("b", T0 + 1, "J"), ("c", T0 + 2, "J")])
    page = inspection.tasks(Q, "waiting", limit=2)
    assert [row.id for row in page.rows] == ["c", "b"]
    assert page.total == 3 and page.next_cursor is not None
    assert page.rows[0] == TaskRow(
        id="c", queue=Q, job="J", state="waiting", at=(T0 + 2) / 1000,
        enqueued_at=(T0 - 3) / 1000, retry_count=0, last_error="", params='{"n": 1}',
    )  # fmt: skip
    rest = inspection.tasks(Q, "waiting", limit=2, cursor=page.next_cursor)
    assert [row.id for row in rest.rows] == ["a"] and rest.next_cursor is None
    oldest = inspection.tasks(Q, "waiting", limit=2, newest_first=False)
    assert [row.id for row in oldest.rows] == ["a", "b"]
    # exactly a page's worth left: the page ends the walk, with no empty page after it
    assert inspection.tasks(Q, "waiting", limit=3).next_cursor is None


@pytest.mark.parametrize("newest_first", [True, False])
def test_pages_walk_every_task_once_in_order_even_at_equal_scores(
    r: redis.Redis, newest_first: bool
) -> None:
    rows = [(f"t{i:03}", T0 + i // 7, "J") for i in range(100)]  # runs of 7 equal scores
    put(r, "dead", rows)
    ids, pages = walk("dead", limit=9, newest_first=newest_first)
    expected = sorted((score, task_id) for task_id, score, _ in rows)
    if newest_first:
        expected.reverse()
    assert ids == [task_id for _, task_id in expected]
    assert all(page.total == 100 for page in pages) and len(pages) == 12


@pytest.mark.parametrize("newest_first", [True, False])
def test_a_cursor_holds_while_tasks_come_and_go(r: redis.Redis, newest_first: bool) -> None:
    put(r, "waiting", [(f"t{i}", T0 + i, "J") for i in range(10)])
    put(r, "waiting", [(f"s{i}", T0 + 100, "J") for i in range(5)])  # s0..s4 share a score
    first = inspection.tasks(Q, "waiting", limit=4, newest_first=newest_first)
    seen = [row.id for row in first.rows]
    assert seen == (["s4", "s3", "s2", "s1"] if newest_first else ["t0", "t1", "t2", "t3"])
    # The cursor's own task leaves (claimed), tasks are inserted before and after the
    # cursor, one at the cursor's very score, and a task not yet seen leaves.
    r.zrem(K.waiting, seen[-1])
    put(r, "waiting", [("new", T0 + 500, "J"), ("old", T0 - 500, "J"), ("s15", T0 + 100, "J"),
                       ("t25", T0 + 2, "J")])  # fmt: skip
    r.zrem(K.waiting, "t5")
    ids, _ = walk("waiting", limit=4, newest_first=newest_first, cursor=first.next_cursor)
    if newest_first:  # after s1 (score T0+100): s0, then the lower scores; t25 sorts after t2
        assert ids == ["s0", "t9", "t8", "t7", "t6", "t4", "t3", "t25", "t2", "t1", "t0", "old"]
    else:  # after t3: s15 sorts between s1 and s2 at the equal score
        assert ids == ["t4", "t6", "t7", "t8", "t9", "s0", "s1", "s15", "s2", "s3", "s4", "new"]


def test_a_job_search_looks_at_a_bounded_number_of_ids_and_goes_on(r: redis.Redis) -> None:
    rows = [(f"t{i:05}", T0 + i, "Rare" if i % 1500 == 0 else "Common") for i in range(5000)]
    put(r, "dead", rows)
    first = inspection.tasks(Q, "dead", job="Rare", limit=50, newest_first=False)
    # 2,000 ids looked at: two matches, and a cursor to go on from
    assert [row.id for row in first.rows] == ["t00000", "t01500"]
    assert first.next_cursor is not None and first.total == 5000
    ids, pages = walk("dead", job="Rare", limit=50, newest_first=False)
    assert ids == ["t00000", "t01500", "t03000", "t04500"] and len(pages) == 3
    common, _ = walk("dead", job="Common", limit=500)
    assert len(common) == 5000 - 4 and common[0] == "t04999"
    assert inspection.tasks(Q, "dead", job="Common", limit=7).rows[-1].id == "t04993"
    assert walk("dead", job="Nobody", limit=50)[0] == []


def test_browsing_writes_nothing(r: redis.Redis) -> None:
    put(r, "dead", [(f"t{i}", T0 + i, "J" if i % 3 else "K") for i in range(30)])
    put(r, "pending", [("p", T0, "J")])
    before = snapshot(r)
    walk("dead", limit=4, job="K")
    walk("dead", limit=7, newest_first=False)
    inspection.find_task(Q, "p")
    assert snapshot(r) == before


def test_rows_are_cut_and_ids_without_a_record_are_left_out(r: redis.Redis) -> None:
    put(r, "dead", [("long", T0, "J")], last_error="é" * 600, params='"' + "x" * 900 + '"')
    put(r, "dead", [("gone", T0 + 1, "J")])
    r.delete(K.task("gone"))  # its record expired; the id waits to be trimmed from dead
    page = inspection.tasks(Q, "dead")
    assert [row.id for row in page.rows] == ["long"] and page.total == 2
    assert page.rows[0].last_error == "é" * 500 and page.rows[0].params == '"' + "x" * 499


async def test_a_page_of_an_unknown_queue_is_empty_and_atasks_reads_the_same(
    r: redis.Redis,
) -> None:
    assert inspection.tasks("nowhere", "pending") == TaskPage([], 0, None)
    put(r, "scheduled", [("a", T0, "J"), ("b", T0 + 1, "K")])
    page = await inspection.atasks(Q, "scheduled", job="K")
    assert page == inspection.tasks(Q, "scheduled", job="K") and page.rows[0].id == "b"


@pytest.mark.parametrize(
    ("options", "error", "message"),
    [
        ({"state": "running"}, ValueError, "a state must be one of"),
        ({"state": None}, TypeError, "a state must be a str"),
        ({"limit": 0}, ValueError, "limit must be 1 to 500"),
        ({"limit": 501}, ValueError, "limit must be 1 to 500"),
        ({"limit": 2.5}, TypeError, "limit must be an int"),
        ({"cursor": "nonsense!"}, ValueError, "not a cursor"),
        ({"cursor": "bmFuOng"}, ValueError, "not a cursor"),  # "nan:x" (inf is a score)
        ({"cursor": 3}, TypeError, "a cursor must be a str"),
        ({"job": ""}, ValueError, "a job type must be"),
        ({"job": 3}, TypeError, "a job type must be a str"),
        ({"newest_first": "no"}, TypeError, "newest_first must be a bool"),
        ({"queue": "a b"}, ValueError, "a queue name"),
    ],
)
def test_bad_input_is_refused_with_a_clear_error(
    r: redis.Redis, options: dict[str, object], error: type[Exception], message: str
) -> None:
    given: dict[str, object] = {"queue": Q, "state": "waiting", **options}
    with pytest.raises(error, match=message):
        inspection.tasks(**given)  # type: ignore[arg-type]


async def test_find_task_finds_a_task_in_any_state(r: redis.Redis) -> None:
    put(r, "waiting", [("w", T0, "J")])
    put(r, "pending", [("p", T0 + 30_000, "J")])
    put(r, "dead", [("d", T0 + 2, "K")], last_error="boom", retry_count="4")
    found = inspection.find_task(Q, "d")
    assert found == TaskRow(
        id="d", queue=Q, job="K", state="dead", at=(T0 + 2) / 1000, enqueued_at=(T0 - 3) / 1000,
        retry_count=4, last_error="boom", params='{"n": 1}',
    )  # fmt: skip
    assert (await inspection.afind_task(Q, "p")) == inspection.find_task(Q, "p")
    assert [inspection.find_task(Q, i).state for i in ("w", "p")] == ["waiting", "pending"]  # type: ignore[union-attr]
    assert inspection.find_task(Q, "nobody") is None
    r.hset(K.task("s"), mapping={"type": "J", "state": "succeeded", "finished_at": T0 + 9})
    assert inspection.find_task(Q, "s") == TaskRow(
        id="s", queue=Q, job="J", state="succeeded", at=(T0 + 9) / 1000, enqueued_at=None,
        retry_count=0, last_error="", params="",
    )  # fmt: skip
    with pytest.raises(ValueError, match="a task id"):
        inspection.find_task(Q, "a b")


def test_culex_tasks_shows_a_page_and_the_next_cursor(r: redis.Redis, url: str) -> None:
    put(r, "dead", [("a", T0, "J"), ("b", T0 + 1, "K"), ("c", T0 + 2, "J")], last_error="boom")
    first = culex_command(
        "tasks", Q, "--state", "dead", "--limit", "1", "--job", "J", "--redis-url", url
    )
    assert first.returncode == 0, first.stderr
    header, row, summary, following = first.stdout.splitlines()
    assert header.split() == ["id", "job", "died", "enqueued", "retries", "params", "last", "error"]
    assert row.split()[:2] == ["c", "J"] and row.split()[-1] == "boom"
    assert summary == "1 task(s) of job J shown, newest first; dead holds 3"
    cursor = following.removeprefix("next page: --after ")
    rest = culex_command("tasks", Q, "--state", "dead", "--job", "J", "--after", cursor)
    assert [line.split()[0] for line in rest.stdout.splitlines()[1:-1]] == ["a"]
    assert "next page" not in rest.stdout
    oldest = culex_command("tasks", Q, "--state", "dead", "--oldest", "--limit", "2")
    assert [line.split()[0] for line in oldest.stdout.splitlines()[1:3]] == ["a", "b"]
    bad = culex_command("tasks", Q, "--limit", "0")
    assert bad.returncode == 2 and "limit must be 1 to 500" in bad.stderr
    # a page where a task has a priority or a group shows those columns too
    put(r, "scheduled", [("g", T0, "J")], priority="5", group="customer:42")
    put(r, "scheduled", [("h", T0 + 1, "J")])
    steered = culex_command("tasks", Q, "--state", "scheduled", "--oldest", "--redis-url", url)
    header, *rows = steered.stdout.splitlines()[:3]
    assert header.split()[4:6] == ["priority", "group"]
    assert rows[0].split()[0] == "g" and rows[0].split()[6:8] == ["5", "customer:42"]
    assert rows[1].split()[0] == "h" and rows[1].split()[6] == "0"


def culex_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "culex", *args], capture_output=True, text=True, timeout=60
    )


def test_the_operations_page_examples_run(
    r: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "operations.md"
    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)
    assert len(blocks) >= 5
    module = types.ModuleType("culex_operations_example")
    sys.modules[module.__name__] = module  # job classes resolve their annotations here
    try:
        for block in blocks:
            exec(compile(block, "operations.md", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
        for job in list(culex.registry):
            if job.__module__ == module.__name__:
                culex.registry.remove(job)
    assert capsys.readouterr().out.splitlines() == [
        "50 123",
        'ChargeJob waiting {"cents":2}',
        "123 123",
        """['{"cents":2}', '{"cents":1}', '{"cents":0}']""",
        "waiting",
        "None",
        "123/123",
        "3",
        "1",
        "2",
        "{'waiting': 121, 'pending': 0, 'scheduled': 0, 'dead': 0}",
    ]


# -- search, kinds, and every queue's dead tasks -------------------------------------------


def test_a_search_finds_an_id_prefix_part_of_a_job_type_and_text_in_params_or_last_error(
    r: redis.Redis,
) -> None:
    put(r, "waiting", [("inv-2024-001", T0, "BillingJob"), ("inv-2024-002", T0 + 1, "MailJob")])
    put(r, "waiting", [("x-params", T0 + 2, "MailJob")], params='{"to": "ada@example.com"}')
    put(r, "waiting", [("x-error", T0 + 3, "MailJob")], last_error="SMTPError: 451 try later")
    put(r, "waiting", [("x-other", T0 + 4, "OtherJob")])

    def found(text: str) -> list[str]:
        return walk("waiting", newest_first=False, search=text)[0]

    assert found("inv-2024") == ["inv-2024-001", "inv-2024-002"]  # an id prefix
    assert found("2024-002") == []  # (an id only by its start: the set is scored by time)
    assert found("Billing") == ["inv-2024-001"]  # part of a job type
    assert found("ada@example") == ["x-params"]
    assert found("451") == ["x-error"]
    assert found("smtperror") == []  # (case as written)
    assert found("x-") == ["x-params", "x-error", "x-other"]


def test_a_search_looks_at_2000_ids_a_page_at_most_and_goes_on_from_its_cursor(
    r: redis.Redis,
) -> None:
    put(r, "waiting", [(f"t{i:05}", T0 + i, "J") for i in range(2500)])
    put(r, "waiting", [("needle", T0 + 3000, "J")], params='{"find": "me"}')
    first = inspection.tasks(Q, "waiting", newest_first=False, search='"find"')
    assert (first.rows, first.looked, first.total) == ([], browsing.EXAMINE, 2501)
    assert first.next_cursor is not None
    ids, pages = walk("waiting", first.next_cursor, newest_first=False, search='"find"')
    assert ids == ["needle"] and pages[0].looked == 501


def test_a_kind_tells_scheduled_retries_from_delayed_tasks(r: redis.Redis) -> None:
    put(r, "scheduled", [("delayed", T0, "J")])
    put(r, "scheduled", [("failed-once", T0 + 1, "J")], retry_count="1", last_error="boom")
    put(r, "scheduled", [("stalled", T0 + 2, "J")], stalls="1")
    put(r, "scheduled", [("odd", T0 + 3, "J")], retry_count="nan")  # (counts as 0)
    assert walk("scheduled", kind="retrying", newest_first=False)[0] == ["failed-once", "stalled"]
    assert walk("scheduled", kind="delayed", newest_first=False)[0] == ["delayed", "odd"]
    with pytest.raises(ValueError, match="kind must be retrying or delayed"):
        inspection.tasks(Q, "scheduled", kind="later")


def test_every_queue_s_dead_tasks_newest_first_page_by_page_ties_and_all(r: redis.Redis) -> None:
    import asyncio

    scores = {"a": [5, 5, 3, 1], "b": [5, 4, 3, 3, 3], "c": [6, 2]}
    for queue, listed in scores.items():
        keys = queue_keys("culex", queue)
        for i, score in enumerate(listed):
            task_id = f"{queue}{i}"
            r.hset(keys.task(task_id), mapping={"type": "J", "state": "dead", "params": "{}"})
            r.zadd(keys.dead, {task_id: T0 + score})
    # score (newest first), then queue, then id as a queue's own page has it (last first)
    expected = [f"{q}{-int(i)}" for _, q, i in sorted(
        (-s, q, -i) for q, listed in scores.items() for i, s in enumerate(listed))]  # fmt: skip
    dead = {q: len(listed) for q, listed in scores.items()} | {"empty": 0}
    for limit in (1, 2, 3, 20):
        seen, cursor = [], None
        while True:
            page = asyncio.run(inspection.adead_everywhere(dead, limit=limit, cursor=cursor))
            assert len(page.rows) <= limit and page.queues == ["a", "b", "c"]
            seen += [row.id for row in page.rows]
            cursor = page.next_cursor
            if cursor is None:
                break
        assert seen == expected, limit
    with pytest.raises(ValueError, match="not a cursor"):
        asyncio.run(inspection.adead_everywhere(dead, cursor="bm90IGEgY3Vyc29y"))
