"""A durable task's page: its steps, what it waits for, the signals kept for it, and the
"Send signal" form (CSRF, read-only mode, a value that is not JSON); and in a real
browser, a signal sent from the page that lets the task succeed."""

from __future__ import annotations

import asyncio
import contextlib
import html
import re
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
import redis

import culex
from culex import config

from ..conftest import await_until, running
from .conftest import missing, serve
from .durable_shown import QUEUE, ShownApprovalJob, runner
from .test_workflow_pages import Client, posts, token

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytest.importorskip("starlette", reason="the dashboard needs its extra: pip install -e '.[test]'")

from culex.dashboard import app


@pytest.fixture
def base(r: redis.Redis) -> Iterator[str]:
    with serve(app(config.settings())) as url:
        yield url


async def waiting_task() -> culex.Task:
    """A task run by a real runner until it waits for "approved" (then the runner stops)."""
    async with running(runner()):
        task = await ShownApprovalJob().aenqueue()
        await await_until(lambda: task.info().get("awaiting") == "approved", what="the wait")
    return task


def step_rows(page: str) -> list[list[str]]:
    """The cells of the Steps table's rows, as text."""
    table = re.search(r'<table class="grid" id="steps">(.*?)</table>', page, re.DOTALL)
    assert table is not None, "no Steps table"
    rows = re.findall(r"<tr data-step=\"\d+\">(.*?)</tr>", table.group(1), re.DOTALL)
    return [
        [
            html.unescape(re.sub(r"<[^>]+>", "", cell))
            for cell in re.findall(r"<td[^>]*>(.*?)</td>", row)
        ]
        for row in rows
    ]


def dd(page: str, name: str) -> str:
    found = re.search(rf'<dd id="{name}">(.*?)</dd>', page, re.DOTALL)
    assert found is not None, name
    return html.unescape(re.sub(r"<[^>]+>", "", found.group(1)))


async def test_the_page_shows_the_records_and_the_form_sends_a_signal(base: str) -> None:
    task = await waiting_task()
    assert task.signal("note", [1, 2]) == "kept"
    client = Client(base)
    status, page = client.get("task", queue=QUEUE, id=task.id)
    assert status == 200, page
    rows = step_rows(page)
    assert [row[:3] for row in rows] == [
        ["0", "ask", "step"],
        ["1", "sleep", "sleep"],
        ["2", "early", "receive"],
    ]
    assert rows[0][4] == str(len('"asked ops"'))
    assert rows[1][5].startswith("until 20") and rows[2][4:] == ["-", "timed out"]
    assert dd(page, "waiting-for") == "signal approved for ever"
    assert dd(page, "signals-kept") == "note (6 bytes)"
    signal_url = f"/task/signal?queue={QUEUE}&id={task.id}"
    assert signal_url in posts(page)
    assert re.search(r'<details class="send-signal" id="send-signal" open>', page)
    assert 'name="name" required maxlength="200" value="approved"' in page  # (the awaited one)

    csrf = token(page)
    form = {"csrf": csrf, "name": "approved", "value": '{"by": "web"}'}
    status, page = client.post("task/signal", form, queue=QUEUE, id=task.id)
    assert status == 200 and "done=signal_delivered" in client.url
    assert "Signal <code>approved</code> delivered" in page
    assert task.state() == culex.TaskState.WAITING
    async with running(runner()):
        assert await task.aresult(timeout=30) == "approved by web"
    page = client.get("task", queue=QUEUE, id=task.id)[1]
    assert [row[:3] for row in step_rows(page)][3:] == [
        ["3", "approved", "receive"],
        ["4", "welcome", "step"],
    ]
    assert dd(page, "waiting-for") == "nothing"
    assert 'id="send-signal"' not in page  # (it has ended: no form)


def test_a_value_that_is_not_json_sends_nothing_and_the_page_says_so(base: str) -> None:
    task = ShownApprovalJob().enqueue()
    client = Client(base)
    page = client.get("task", queue=QUEUE, id=task.id)[1]
    assert 'id="steps"' not in page  # (no record yet)
    assert re.search(r'<details class="send-signal" id="send-signal">', page)  # (closed)
    form = {"csrf": token(page), "name": "approved", "value": "yes"}
    status, page = client.post("task/signal", form, queue=QUEUE, id=task.id)
    assert status == 200 and "Nothing sent: the value is not JSON" in page
    assert not any(field.startswith("signal:") for field in task.info())
    form["value"] = ""  # (empty: null)
    status, page = client.post("task/signal", form, queue=QUEUE, id=task.id)
    assert status == 200 and "Signal <code>approved</code> kept" in page
    assert task.info()["signal:approved"] == "null"
    assert dd(page, "signals-kept") == "approved (4 bytes)"
    form["name"] = "x" * 201
    status, page = client.post("task/signal", form, queue=QUEUE, id=task.id)
    assert status == 200 and "Nothing sent: a signal's name takes 1 to 200 bytes" in page


def test_a_signal_without_its_csrf_token_is_refused(base: str) -> None:
    task = ShownApprovalJob().enqueue()
    client = Client(base)
    client.get("task", queue=QUEUE, id=task.id)  # (the cookie is set)
    for form in ({"name": "approved"}, {"csrf": "0" * 64, "name": "approved"}):
        status, said = client.post("task/signal", form, queue=QUEUE, id=task.id)
        assert status == 403 and "CSRF" in said
    assert not any(field.startswith("signal:") for field in task.info())


def test_read_only_mode_hides_the_form_and_refuses_the_post(r: redis.Redis) -> None:
    task = ShownApprovalJob().enqueue()
    with serve(app(config.settings(), read_only=True)) as url:
        client = Client(url)
        status, page = client.get("task", queue=QUEUE, id=task.id)
        assert status == 200 and 'id="read-only"' in page
        assert 'id="send-signal"' not in page and posts(page) == []
        form = {"csrf": "0" * 64, "name": "approved"}
        status, said = client.post("task/signal", form, queue=QUEUE, id=task.id)
        assert status == 403 and "read-only" in said
    assert not any(field.startswith("signal:") for field in task.info())


@contextlib.contextmanager
def runner_in_a_thread() -> Iterator[culex.Runner]:
    """A runner on its own loop in a thread (the browser's sync API holds this one's)."""
    worker = runner()
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(worker.arun(),))
    thread.start()
    try:
        yield worker
    finally:
        loop.call_soon_threadsafe(worker.stop)
        thread.join(30)
        loop.close()


@pytest.mark.skipif(missing() is not None, reason=str(missing()))
def test_in_a_browser_a_signal_sent_from_the_page_lets_the_task_succeed(
    base: str, page: Page
) -> None:
    from playwright.sync_api import expect

    with runner_in_a_thread():
        task = ShownApprovalJob(who="browser").enqueue()
        page.goto(f"{base}/task?queue={QUEUE}&id={task.id}")
        expect(page.locator("#waiting-for")).to_have_text(
            "signal approved for ever", timeout=30_000
        )  # (the page refreshes itself until the task waits)
        page.reload()  # (the form, outside the refreshed part, now names the awaited signal)
        expect(page.get_by_label("Name")).to_have_value("approved")
        page.get_by_label("Value (JSON)").fill('{"by": "a browser"}')
        page.get_by_role("button", name="Send signal").click()
        expect(page.locator("#notice")).to_contain_text("Signal approved delivered")
        expect(page.locator("#task-state")).to_have_text("succeeded", timeout=30_000)
        expect(page.locator('#steps [data-step="4"]')).to_contain_text("welcome")
    assert task.result(timeout=0) == "approved by a browser"
