"""The workflow run page, a node's task page, Cancel and Retry (CSRF, read-only mode), the
overview's "open run" form; and in a real browser, a run cancelled from its page."""

from __future__ import annotations

import asyncio
import contextlib
import html
import http.cookiejar
import re
import threading
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator
from typing import TYPE_CHECKING

import pytest
import redis

import culex
from culex import config

from ..conftest import running
from ..workflows.shown_jobs import (
    QUEUES,
    ShownBrokenJob,
    ShownForeverJob,
    ShownMergeJob,
    ShownStepJob,
    reset,
)
from .conftest import missing, serve

if TYPE_CHECKING:
    from playwright.sync_api import Page

pytest.importorskip("starlette", reason="the dashboard needs its extra: pip install -e '.[test]'")

from culex.dashboard import app


@pytest.fixture(autouse=True)
def fresh(r: redis.Redis) -> None:
    reset()


class Client:
    """urllib with a cookie jar: the CSRF cookie a page sets goes with the next POST."""

    def __init__(self, base: str) -> None:
        self.base = base
        self.opener = urllib.request.build_opener(
            urllib.request.HTTPCookieProcessor(http.cookiejar.CookieJar())
        )

    def get(self, path: str, **query: str) -> tuple[int, str]:
        return self._open(path, query, None)

    def post(self, path: str, form: dict[str, str], **query: str) -> tuple[int, str]:
        """The answer after the redirect it is sent to (a refusal: its own status)."""
        return self._open(path, query, urllib.parse.urlencode(form).encode())

    def _open(self, path: str, query: dict[str, str], data: bytes | None) -> tuple[int, str]:
        address = f"{self.base}/{path}" + (f"?{urllib.parse.urlencode(query)}" if query else "")
        try:
            with self.opener.open(address, data=data, timeout=30) as answer:
                self.url = answer.geturl()
                return int(answer.status), answer.read().decode()
        except urllib.error.HTTPError as answer:
            with answer:
                return answer.code, answer.read().decode(errors="replace")


def token(page: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', page)
    assert found is not None, "no CSRF token on the page"
    return found.group(1)


def levels(page: str) -> list[list[str]]:
    """The node names of the run page, a list per depth, in the page's order."""
    found = []
    for level in re.findall(r'<li class="level" data-depth="\d+">(.*?)</ul>', page, re.DOTALL):
        found.append([html.unescape(n) for n in re.findall(r'data-node="([^"]*)"', level)])
    return found


def posts(page: str) -> list[str]:
    """The actions of the page's POST forms (their paths)."""
    return [html.unescape(a) for a in re.findall(r'<form method="post" action="([^"]*)"', page)]


def diamond() -> tuple[culex.WorkflowRun, dict[str, culex.Task]]:
    """A run of four nodes on two depths below the roots; enqueued, and no runner runs it."""
    wf = culex.Workflow(name="nightly <report>")
    first = wf.add(ShownStepJob(n=150), name="fetch1")
    merge = wf.add(ShownMergeJob(), after=[first], name="merge")
    second = wf.add(ShownStepJob(n=275), name="fetch2")  # added after merge: a root still
    notify = wf.add(ShownMergeJob(), after=[merge, second], name="notify")
    run = wf.enqueue()
    return run, {"fetch1": first, "fetch2": second, "merge": merge, "notify": notify}


@pytest.fixture
def base(r: redis.Redis) -> Iterator[str]:
    with serve(app(config.settings())) as url:
        yield url


def test_the_run_page_shows_the_run_and_its_nodes_by_depth(base: str) -> None:
    run, tasks = diamond()
    status, page = Client(base).get("workflow", id=run.id)
    assert status == 200, page
    assert f"<code>{run.id}</code>" in page
    assert "nightly &lt;report&gt;" in page  # (escaped, as every value)
    assert 'class="state running" id="run-state">running<' in page
    assert 'data-count="waiting">2 waiting<' in page and 'data-count="blocked">2 blocked<' in page
    assert levels(page) == [["fetch1", "fetch2"], ["merge"], ["notify"]]
    for name, task in tasks.items():
        link = f'href="/task?queue={task.queue}&amp;id={task.id}"><b>{name}</b>'
        assert link in page, name
    assert '<span class="state blocked" data-state>blocked</span>' in page
    assert posts(page) == [f"/workflow/cancel?id={run.id}"]  # Cancel only: it runs


def test_a_node_s_task_page_links_its_run_its_upstreams_and_downstreams(base: str) -> None:
    run, tasks = diamond()
    status, page = Client(base).get("task", queue="wf-shown-b", id=tasks["merge"].id)
    assert status == 200, page
    run_link = re.search(r'<dd id="task-run">(.*?)</dd>', page, re.DOTALL)
    assert run_link is not None and f'href="/workflow?id={run.id}"' in run_link.group(1)
    assert "node <b>merge</b>" in run_link.group(1)
    first, notify = tasks["fetch1"], tasks["notify"]
    assert f'href="/task?queue=wf-shown-a&amp;id={first.id}">fetch1</a>' in page
    assert (
        f'href="/task?queue=wf-shown-b&amp;id={notify.id}">wf-shown-b&lt;{notify.id}&gt;</a>'
        in page
    )
    # A root has no upstreams; a task of no workflow shows none of it.
    page = Client(base).get("task", queue="wf-shown-a", id=first.id)[1]
    assert re.search(r'<dd id="task-upstreams"><span class="muted">none</span></dd>', page)
    plain = ShownStepJob(n=1).enqueue()
    assert 'id="task-run"' not in Client(base).get("task", queue="wf-shown-a", id=plain.id)[1]


async def test_a_dead_node_s_task_page_offers_retry_run_not_retry(base: str) -> None:
    # (a node's own Retry is skipped by the server: the node goes back with its run)
    wf = culex.Workflow()
    bad = wf.add(ShownBrokenJob(), name="bad")
    run = wf.enqueue()
    plain = ShownBrokenJob().enqueue()  # (a dead task of no run keeps its own Retry)
    async with running(culex.Runner(run_from=list(QUEUES))):
        assert await run.await_(timeout=30) == "failed"
        with pytest.raises(culex.TaskFailed):
            await plain.aresult(timeout=30)
    client = Client(base)
    page = client.get("task", queue=bad.queue, id=bad.id)[1]
    assert 'class="state dead" id="task-state">dead<' in page
    assert posts(page)[0] == f"/workflow/retry?id={run.id}" and ">Retry run<" in page
    assert not any(path.startswith("/task/retry") for path in posts(page))
    status, page = client.post("workflow/retry", {"csrf": token(page)}, id=run.id)
    assert status == 200 and "Retrying: 1 node(s) run again" in page
    page = client.get("task", queue=plain.queue, id=plain.id)[1]
    assert posts(page)[0] == f"/task/retry?queue={plain.queue}&id={plain.id}"


async def test_cancel_then_retry_from_the_run_page(base: str) -> None:
    wf = culex.Workflow()
    bad = wf.add(ShownBrokenJob(), name="bad")
    wf.add(ShownMergeJob(), after=[bad], name="merge")
    run = wf.enqueue()
    client = Client(base)
    page = client.get("workflow", id=run.id)[1]
    assert posts(page) == [f"/workflow/cancel?id={run.id}"]
    csrf = token(page)  # (this client's, for each POST)
    status, page = client.post("workflow/cancel", {"csrf": csrf}, id=run.id)
    assert status == 200 and client.url.endswith(f"/workflow?id={run.id}&done=run_cancel")
    assert "Cancel requested: the run" in page and 'id="run-cancelling"' in page
    assert posts(page) == []  # cancelling: neither button
    assert run.info()["cancelled"]
    async with running(culex.Runner(run_from=list(QUEUES))):  # (it applies the nodes' ends)
        assert await run.await_(timeout=30) == "cancelled"
    page = client.get("workflow", id=run.id)[1]
    assert 'class="state cancelled" id="run-state">cancelled<' in page
    assert posts(page) == [f"/workflow/retry?id={run.id}"]  # Retry only: it has ended
    assert bad.id not in ShownStepJob.started

    ShownBrokenJob.failing = False
    status, page = client.post("workflow/retry", {"csrf": csrf}, id=run.id)
    assert status == 200 and "Retrying: 2 node(s) run again" in page
    assert run.state() == "running" and run.info()["retries"] == "1"
    async with running(culex.Runner(run_from=list(QUEUES))):
        assert await run.await_(timeout=30) == "succeeded"
    # A retry of a run that no longer allows it does nothing, and says so.
    status, page = client.post("workflow/retry", {"csrf": csrf}, id=run.id)
    assert status == 200 and "Nothing done: the run is no longer" in page
    assert run.state() == "succeeded"


def test_a_post_without_its_csrf_token_is_refused(base: str) -> None:
    run, _ = diamond()
    client = Client(base)
    client.get("workflow", id=run.id)  # (the cookie is set)
    for form in ({}, {"csrf": "0" * 64}):
        status, said = client.post("workflow/cancel", form, id=run.id)
        assert status == 403 and "CSRF" in said
    assert "cancelled" not in run.info()
    assert run.state() == "running"


def test_read_only_mode_shows_no_button_and_refuses_posts(r: redis.Redis) -> None:
    run, _ = diamond()
    with serve(app(config.settings(), read_only=True)) as url:
        client = Client(url)
        status, page = client.get("workflow", id=run.id)
        assert status == 200 and 'id="read-only"' in page
        assert posts(page) == []
        status, said = client.post("workflow/cancel", {"csrf": "0" * 64}, id=run.id)
        assert status == 403 and "read-only" in said
    assert "cancelled" not in run.info()


def test_a_missing_run_and_a_bad_id_are_404(base: str) -> None:
    client = Client(base)
    status, page = client.get("workflow", id="0190nosuchrun")
    assert status == 404 and "workflow run 0190nosuchrun not found" in page
    assert client.get("workflow", id="two words")[0] == 404
    assert client.get("workflow")[0] == 404
    run, _ = diamond()
    csrf = token(client.get("workflow", id=run.id)[1])  # (a form's: the POSTs pass the check)
    status, page = client.post("workflow/cancel", {"csrf": csrf}, id="0190nosuchrun")
    assert status == 404 and "workflow run 0190nosuchrun not found" in page
    assert client.post("workflow/pause", {"csrf": csrf}, id=run.id)[0] == 404
    assert run.state() == "running" and "cancelled" not in run.info()


def test_the_overview_opens_a_run_by_its_id(base: str) -> None:
    run, _ = diamond()
    page = Client(base).get("")[1]
    form = re.search(r'<form method="get" action="([^"]*)" class="open-run"', page)
    assert form is not None and form.group(1) == "/workflow"
    assert '<input name="id"' in page
    client = Client(base)
    status, page = client.get(form.group(1).lstrip("/"), id=f" {run.id} ")  # (pasted)
    assert status == 200 and f"<code>{run.id}</code>" in page


def test_an_expired_node_and_foreign_lists_never_break_a_page(base: str, r: redis.Redis) -> None:
    """A node whose task record is gone shows "expired"; a node's ``up`` and ``down`` that
    are not the JSON lists culex writes (another producer's) show as none."""
    run, tasks = diamond()
    r.delete(f"culex:{{wf-shown-a}}:task:{tasks['fetch2'].id}")
    merge = f"culex:{{wf-shown-b}}:task:{tasks['merge'].id}"
    r.hset(merge, mapping={"up": "not json", "down": '{"wf-shown-b": 1}'})
    client = Client(base)
    status, page = client.get("workflow", id=run.id)
    assert status == 200, page
    assert '<span class="state expired" data-state>expired</span>' in page
    assert 'data-count="expired">1 expired<' in page
    status, page = client.get("task", queue="wf-shown-b", id=tasks["merge"].id)
    assert status == 200, page
    for field in ("upstreams", "downstreams"):
        assert f'<dd id="task-{field}"><span class="muted">none</span></dd>' in page
    r.hset(
        merge, mapping={"up": '[["wf-shown-a", "x"], 5, ["wf-shown-a"]]'}
    )  # (no name: its id shown)
    page = client.get("task", queue="wf-shown-b", id=tasks["merge"].id)[1]
    assert '<dd id="task-upstreams"><a href="/task?queue=wf-shown-a&amp;id=x">x</a></dd>' in page


@contextlib.contextmanager
def runner_thread() -> Iterator[culex.Runner]:
    """A runner on its own loop in a thread (the browser's sync API holds this one's)."""
    worker = culex.Runner(run_from=list(QUEUES))
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
def test_in_a_browser_cancel_on_the_run_page_cancels_the_run(base: str, page: Page) -> None:
    from playwright.sync_api import expect

    wf = culex.Workflow(name="forever")
    forever = wf.add(ShownForeverJob(), name="forever")
    later = wf.add(ShownMergeJob(), after=[forever], name="later")
    dialog = page.locator("#confirm-dialog")
    page.add_locator_handler(dialog, lambda: dialog.locator("[data-confirm-yes]").click())
    with runner_thread():
        run = wf.enqueue()
        page.goto(f"{base}/workflow?id={run.id}")
        expect(page.locator('[data-node="forever"] [data-state]')).to_have_text(
            "pending", timeout=30_000
        )
        page.get_by_role("button", name="Cancel run").click()
        expect(page.locator("#notice")).to_contain_text("Cancel requested")
        # (the page refreshes itself until the runner has stopped the node and the run ended)
        expect(page.locator("#run-state")).to_have_text("cancelled", timeout=30_000)
        expect(page.locator('[data-node="later"] [data-state]')).to_have_text("dead")
        expect(page.get_by_role("button", name="Retry run")).to_be_visible()
    assert run.state() == "cancelled" and later.id not in ShownStepJob.started


def test_a_big_run_is_shown_a_page_at_a_time_after_its_counts(
    base: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    from culex.operations import runs

    monkeypatch.setattr(runs, "PAGE", 2)  # (a run of more nodes than a page holds)
    run, _ = diamond()
    client = Client(base)
    status, page = client.get("workflow", id=run.id)
    assert status == 200, page
    assert 'data-count="waiting">2 waiting<' in page and 'data-count="blocked">2 blocked<' in page
    assert levels(page) == [["fetch1", "fetch2"]]
    assert "nodes 1-2 of 4, by depth" in page and 'rel="prev"' not in page
    assert f'href="/workflow?id={run.id}&amp;offset=2" rel="next"' in page
    page = client.get("workflow", id=run.id, offset="2")[1]
    assert levels(page) == [["merge"], ["notify"]]
    assert 'data-depth="1"' in page and 'data-depth="2"' in page
    assert "nodes 3-4 of 4, by depth" in page and 'rel="next"' not in page
    assert f'href="/workflow?id={run.id}&amp;offset=0" rel="prev"' in page
    assert client.get("workflow", id=run.id, offset="-1")[0] == 404
