"""What a foreign producer, an older version or a foreign runner wrote never breaks a page:
every page answers (200, or 400 for a crafted cursor) and shows the record as stored."""

from __future__ import annotations

import base64
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest
import redis

from culex import config

from .. import foreign_records
from ..foreign_records import DEEP, IDS, QUEUE, SHOWN_BAD_QUEUE, SHOWN_BAD_TYPE

pytest.importorskip("starlette", reason="the dashboard needs its extra: pip install -e '.[test]'")

from culex.dashboard import app

from .conftest import serve


@pytest.fixture
def base(r: redis.Redis, url: str) -> Iterator[str]:
    foreign_records.plant(r)
    with serve(app(config.Settings(redis_url=url))) as served:
        yield served


def get(base: str, path: str, **query: str) -> tuple[int, str]:
    address = f"{base}/{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
    try:
        with urllib.request.urlopen(address, timeout=30) as answer:
            return int(answer.status), answer.read().decode()
    except urllib.error.HTTPError as answer:
        with answer:
            return answer.code, answer.read().decode(errors="replace")


def test_every_page_shows_foreign_records_as_stored(base: str) -> None:
    status, shown = get(base, "")
    assert status == 200, shown
    assert SHOWN_BAD_QUEUE in shown and f">{QUEUE}<" in shown
    for state in ("waiting", "pending", "scheduled", "dead"):
        for order in ("newest", "oldest"):
            status, shown = get(base, "queue", queue=QUEUE, state=state, order=order)
            assert status == 200, (state, shown)
            for task_id, (stored_in, _) in IDS.items():
                if stored_in == state:
                    assert task_id in shown, (task_id, state)
            assert SHOWN_BAD_TYPE in shown
    status, shown = get(base, "queue", queue=QUEUE, state="scheduled")
    # (limits as stored, with where they come from)
    assert "rate fast per 1000 ms (set at run time)" in shown
    assert "concurrency -3 (set at run time)" in shown
    assert '">inf ms</time>' in shown and '">-inf ms</time>' in shown  # (the score as stored)
    status, shown = get(base, "queue", queue=SHOWN_BAD_QUEUE)
    assert status == 200, shown  # (a name the page can address: no such queue, empty)
    for task_id in IDS:
        status, shown = get(base, "task", queue=QUEUE, id=task_id)
        assert status == 200, (task_id, shown)
        assert SHOWN_BAD_TYPE in shown and "g\ufffd" in shown, task_id
        for field in ("params", "last_error"):
            status, text = get(base, "task/text", queue=QUEUE, id=task_id, field=field)
            assert status == 200 and ("\ufffd" in text or text == DEEP), (task_id, field, text)
    status, shown = get(base, "queue", queue=QUEUE, q="t-deep")
    assert status == 200 and "t-deep" in shown  # the search opened the task's page


def test_params_nested_too_deep_to_parse_are_shown_as_stored(base: str) -> None:
    status, shown = get(base, "task", queue=QUEUE, id="t-deep")
    assert status == 200 and "[[[[[[[[" in shown


def test_the_dead_page_runners_periodic_series_and_metrics_answer(base: str) -> None:
    status, shown = get(base, "dead")
    assert status == 200, shown  # (the queue page of the first queue with dead tasks)
    assert "t-dead" in shown and "t-dead-high" in shown
    status, shown = get(base, "runners")
    assert status == 200, shown
    for runner in ("r-guessed", "r-tasks", "r-started", "r-bytes"):
        assert runner in shown, runner
    assert "h\ufffd" in shown and SHOWN_BAD_QUEUE in shown
    status, shown = get(base, "periodic")
    assert status == 200, shown
    assert "every \ufffd" in shown and "Tock\ufffd" in shown
    for span in ("hour", "day", "week"):
        status, shown = get(base, "series", range=span)
        assert status == 200, shown
    status, shown = get(base, "metrics")
    assert status == 200, shown
    # (1 in the totals, 1 in the minute they do not hold yet)
    assert (
        f'culex_tasks_total{{job="{SHOWN_BAD_TYPE}",outcome="dead",queue="{QUEUE}"}} 2.0' in shown
    )
    assert f'culex_queue_tasks{{queue="{SHOWN_BAD_QUEUE}",state="waiting"}} 1.0' in shown


@pytest.mark.parametrize(
    "cursor",
    [
        base64.urlsafe_b64encode(b"1_000:abc").decode(),
        base64.urlsafe_b64encode("١٢:abc".encode()).decode(),  # (Arabic-Indic digits)
        base64.urlsafe_b64encode(b"nan:abc").decode(),
        base64.urlsafe_b64encode(b" 12 :abc").decode(),
        base64.urlsafe_b64encode(b"12:").decode(),
        "~~~~",
        "%%%",
    ],
)
def test_a_crafted_cursor_is_a_400(base: str, cursor: str) -> None:
    for state in ("waiting", "dead"):
        status, shown = get(base, "queue", queue=QUEUE, state=state, cursor=cursor)
        assert status == 400, (cursor, state, shown)
        assert "not a cursor" in shown or "bad cursor" in shown, shown


def test_a_cursor_past_an_infinite_score_or_an_id_that_is_not_utf8_goes_on(base: str) -> None:
    # (a page ends on such a task: its cursor holds them, and the next page reads on)
    for cursor in (b"inf:t-high", b"-inf:t-low", b"12:\xff"):
        encoded = base64.urlsafe_b64encode(cursor).decode()
        status, shown = get(base, "queue", queue=QUEUE, state="waiting", cursor=encoded)
        assert status == 200, (cursor, shown)


def test_the_dead_page_of_a_queue_whose_name_is_not_utf8(r: redis.Redis, base: str) -> None:
    r.delete(f"culex:{{{QUEUE}}}:dead")  # (the one queue with dead tasks is that one)
    status, shown = get(base, "dead")
    assert status == 200 and SHOWN_BAD_QUEUE in shown, shown


def test_a_key_of_another_type_is_a_503_that_says_so(r: redis.Redis, base: str) -> None:
    r.set(f"culex:{{{QUEUE}}}:task:t-string", "not a hash")
    r.zadd(f"culex:{{{QUEUE}}}:waiting", {"t-string": 1})
    status, shown = get(base, "task", queue=QUEUE, id="t-string")
    assert status == 503 and "WRONGTYPE" in shown, shown
    status, shown = get(base, "queue", queue=QUEUE)
    assert status == 200 and "t-bytes" in shown  # (the listing leaves that id out)
