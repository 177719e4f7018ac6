"""The dashboard in a real browser: every page, the counts, actions, search, live refresh,
read-only mode, CSRF, escaping, basic auth and a mount under a prefix."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
import threading
from collections.abc import Iterator

import pytest
import redis

import culex
from culex import config
from culex.jobs.task import Task, TaskState
from culex.operations import inspection, queue_control

from ..conftest import wait_until
from .conftest import missing, serve

reason = missing()
if reason is not None:
    pytest.skip(reason, allow_module_level=True)

from playwright.sync_api import Browser, Page, expect  # noqa: E402

from culex.dashboard import app  # noqa: E402

SCRIPT = "<script>window.__pwned=1</script>"
IMAGE = "<img src=x onerror=window.__pwned=2>"


class DashboardMailJob(culex.QueuedJob):
    queue = "dash_mail"
    to: str

    def perform(self) -> None:
        pass


class DashboardReportJob(culex.QueuedJob):
    queue = "dash_mail"
    name: str

    def perform(self) -> None:
        pass


def dead_tasks(count: int, reason: str = "gave up") -> list[Task]:
    """``count`` tasks in dead (cancelled while waiting: culex's way to make one)."""
    tasks = [DashboardMailJob(to=f"user{i}@example.com").enqueue() for i in range(count)]
    for task in tasks:
        assert task.cancel(reason)
    return tasks


def accept_dialogs(page: Page) -> None:
    """Answer each confirmation of the page with its action's button (not Cancel)."""
    dialog = page.locator("#confirm-dialog")
    page.add_locator_handler(dialog, lambda: dialog.locator("[data-confirm-yes]").click())


def count_cell(page: Page, queue: str, state: str) -> str:
    return page.locator(f'tr[data-queue="{queue}"] [data-count="{state}"]').inner_text()


def test_every_page_loads(dashboard: str, page: Page) -> None:
    (task,) = dead_tasks(1)
    response = page.goto(dashboard)
    assert response is not None
    policy = response.headers["content-security-policy"]
    assert "script-src 'self'" in policy and "unsafe-inline" not in policy
    expect(page).to_have_title("Overview · culex")
    page.get_by_role("link", name="dash_mail", exact=True).click()
    expect(page.get_by_role("heading", name="Queue dash_mail")).to_be_visible()
    for state in ("scheduled", "pending", "dead", "waiting"):
        page.locator(f'[data-tab="{state}"]').click()
        expect(page.locator(f'[data-tab="{state}"]')).to_have_attribute("aria-current", "page")
    page.get_by_role("link", name="Runners").click()
    expect(page.get_by_role("heading", name="Runners")).to_be_visible()
    page.get_by_role("link", name="Periodic").click()
    expect(page.get_by_role("heading", name="Periodic jobs")).to_be_visible()
    page.get_by_role("link", name="Dead", exact=True).click()
    expect(page.get_by_role("row").filter(has_text=task.id)).to_be_visible()
    page.get_by_role("link", name=task.id).click()
    expect(page.locator("#task-state")).to_have_text("dead")
    page.goto(f"{dashboard}/task?queue=dash_mail&id=no-such-id")
    expect(page.locator("#missing")).to_contain_text("no such task")
    assert task.retry()
    page.get_by_role("link", name="Dead", exact=True).click()
    expect(page.locator("#no-dead")).to_be_visible()


def test_the_counts_are_what_was_enqueued(dashboard: str, page: Page) -> None:
    for i in range(3):
        DashboardMailJob(to=f"{i}@example.com").enqueue()
    for i in range(2):
        DashboardMailJob(to=f"{i}@example.com").enqueue(delay=3600)
    dead_tasks(4)
    page.goto(dashboard)
    counts = {s: count_cell(page, "dash_mail", s) for s in ("waiting", "scheduled", "dead")}
    assert counts == {"waiting": "3", "scheduled": "2", "dead": "4"}
    expect(page.locator('[data-total="pending"]')).to_have_text("0")
    page.goto(f"{dashboard}/queue?queue=dash_mail&state=dead")
    expect(page.locator("table.tasks tbody tr")).to_have_count(4)
    expect(page.locator('[data-tab="scheduled"] [data-count]')).to_have_text("2")


def test_retry_on_a_dead_task_takes_it_out_of_dead(dashboard: str, page: Page) -> None:
    (task,) = dead_tasks(1)
    accept_dialogs(page)
    page.goto(f"{dashboard}/task?queue=dash_mail&id={task.id}")
    page.get_by_role("button", name="Retry").click()
    expect(page.locator("#task-state")).to_have_text("waiting")
    expect(page.locator("#notice")).to_contain_text("back in waiting")
    assert task.state() == TaskState.WAITING
    expect(page.get_by_role("button", name="Retry")).to_have_count(0)


def test_cancel_on_a_waiting_task_sends_it_to_dead(dashboard: str, page: Page) -> None:
    task = DashboardMailJob(to="a@example.com").enqueue(delay=3600)
    accept_dialogs(page)
    page.goto(f"{dashboard}/task?queue=dash_mail&id={task.id}")
    page.get_by_role("button", name="Cancel").click()
    expect(page.locator("#task-state")).to_have_text("dead")
    assert task.state() == TaskState.DEAD


def test_pause_and_resume_a_queue(dashboard: str, page: Page) -> None:
    DashboardMailJob(to="a@example.com").enqueue()
    accept_dialogs(page)
    page.goto(f"{dashboard}/queue?queue=dash_mail")
    expect(page.locator("#paused")).to_have_count(0)
    page.get_by_role("button", name="Pause").click()
    expect(page.locator("#notice")).to_contain_text("Paused")
    expect(page.locator("#paused")).to_have_text("paused")
    assert queue_control.controls(queues=["dash_mail"])["dash_mail"].paused
    page.goto(dashboard)
    expect(page.locator('tr[data-queue="dash_mail"] [data-paused]')).to_have_text("paused")
    page.goto(f"{dashboard}/queue?queue=dash_mail")
    page.get_by_role("button", name="Resume").click()
    expect(page.locator("#notice")).to_contain_text("Resumed")
    expect(page.locator("#paused")).to_have_count(0)
    assert not queue_control.controls(queues=["dash_mail"])["dash_mail"].paused


def test_bulk_retry_of_the_ticked_tasks(dashboard: str, page: Page) -> None:
    first, second, third = dead_tasks(3)
    accept_dialogs(page)
    page.goto(f"{dashboard}/queue?queue=dash_mail&state=dead")
    page.get_by_label(f"tick {first.id}").check()
    page.get_by_label(f"tick {third.id}").check()
    page.get_by_role("button", name="on ticked").click()
    expect(page.locator("#notice")).to_contain_text("Put 2 task(s) back in waiting")
    assert [t.state() for t in (first, second, third)] == ["waiting", "dead", "waiting"]


def test_bulk_retry_of_every_task_the_filter_matches(dashboard: str, page: Page) -> None:
    tasks = dead_tasks(120)  # more than one page holds
    accept_dialogs(page)
    page.goto(f"{dashboard}/queue?queue=dash_mail&state=dead&limit=25")
    expect(page.locator("table.tasks tbody tr")).to_have_count(25)
    page.get_by_role("button", name="on every matching task").click()
    expect(page.locator("#notice")).to_contain_text("Put 120 task(s) back in waiting")
    expect(page.locator('[data-tab="dead"] [data-count]')).to_have_text("0")
    assert {t.state() for t in tasks} == {TaskState.WAITING}


def test_a_bulk_action_asks_first_and_cancel_is_the_default(dashboard: str, page: Page) -> None:
    (task,) = dead_tasks(1)
    page.goto(f"{dashboard}/queue?queue=dash_mail&state=dead")
    page.get_by_label("action").select_option("delete")
    page.get_by_role("button", name="on every matching task").click()
    dialog = page.locator("#confirm-dialog")
    expect(dialog).to_be_visible()
    expect(dialog.locator("[data-confirm-no]")).to_be_focused()
    expect(dialog.locator("[data-confirm-yes]")).to_have_text("Delete")
    page.keyboard.press("Enter")  # (the default button: Cancel)
    expect(dialog).to_be_hidden()
    page.get_by_role("button", name="on every matching task").click()
    page.keyboard.press("Escape")
    expect(dialog).to_be_hidden()
    page.goto(f"{dashboard}/queue?queue=dash_mail&state=dead")  # (nothing was sent)
    assert task.state() == TaskState.DEAD


def test_search_by_id_opens_the_task(dashboard: str, page: Page) -> None:
    task = DashboardMailJob(to="found@example.com").enqueue()
    page.goto(f"{dashboard}/queue?queue=dash_mail")
    page.get_by_label("search tasks").fill(task.id)
    page.get_by_role("button", name="Search").click()
    expect(page).to_have_url(re.compile(f"/task\\?queue=dash_mail&id={task.id}$"))
    expect(page.locator("#params")).to_contain_text("found@example.com")
    page.goto(f"{dashboard}/queue?queue=dash_mail")
    page.get_by_label("search tasks").fill("not-a-task")
    page.get_by_role("button", name="Search").click()
    expect(page.locator("#no-rows")).to_contain_text("No waiting task matching “not-a-task”")


def test_search_by_job_type_and_act_on_every_match(dashboard: str, page: Page) -> None:
    mails = [DashboardMailJob(to=f"{i}@example.com").enqueue(delay=3600) for i in range(3)]
    reports = [DashboardReportJob(name=f"r{i}").enqueue(delay=3600) for i in range(2)]
    accept_dialogs(page)
    page.goto(f"{dashboard}/queue?queue=dash_mail&state=scheduled")
    expect(page.locator("table.tasks tbody tr")).to_have_count(5)
    page.get_by_label("filter by job type").fill("DashboardReportJob")
    page.get_by_role("button", name="Search").click()
    rows = page.locator("table.tasks tbody tr")
    expect(rows).to_have_count(2)
    assert {rows.nth(i).get_attribute("data-task") for i in range(2)} == {t.id for t in reports}
    page.get_by_label("action").select_option("cancel")
    page.get_by_role("button", name="on every matching task").click()
    expect(page.locator("#notice")).to_contain_text("Cancelled 2 task(s)")
    assert {t.state() for t in reports} == {TaskState.DEAD}
    assert {t.state() for t in mails} == {TaskState.SCHEDULED}


def test_pages_of_a_long_list_in_both_orders(dashboard: str, page: Page) -> None:
    tasks = culex.enqueue_many(DashboardMailJob(to=f"{i}@example.com") for i in range(60))
    page.goto(f"{dashboard}/queue?queue=dash_mail&state=waiting&limit=25")
    rows = page.locator("table.tasks tbody tr")
    expect(rows).to_have_count(25)
    expect(rows.first).to_have_attribute("data-task", tasks[0].id)  # run order: next first
    seen = set()
    for _ in range(3):
        seen |= {rows.nth(i).get_attribute("data-task") for i in range(rows.count())}
        if page.get_by_role("link", name="next page").count() == 0:
            break
        with page.expect_navigation():  # (rows read before the next page lands are the last's)
            page.get_by_role("link", name="next page").click()
    assert seen == {t.id for t in tasks}
    page.get_by_label("order").select_option("newest")
    page.get_by_role("button", name="Search").click()
    expect(rows.first).to_have_attribute("data-task", tasks[-1].id)


def test_delete_a_task(dashboard: str, page: Page) -> None:
    (task,) = dead_tasks(1)
    accept_dialogs(page)
    page.goto(f"{dashboard}/task?queue=dash_mail&id={task.id}")
    page.get_by_role("button", name="Delete").click()
    expect(page.locator("#notice")).to_contain_text("Deleted 1 task(s)")
    assert task.state() is None


def test_live_refresh_updates_a_count_and_stops_when_paused(dashboard: str, page: Page) -> None:
    DashboardMailJob(to="first@example.com").enqueue()
    live = [0]
    page.on("request", lambda request: _count_live(request.headers, live))
    page.clock.install()  # the page's timers run when the test says so
    page.goto(dashboard)
    assert count_cell(page, "dash_mail", "waiting") == "1"
    DashboardMailJob(to="second@example.com").enqueue()
    page.clock.run_for(4000)
    expect(page.locator('tr[data-queue="dash_mail"] [data-count="waiting"]')).to_have_text("2")
    page.get_by_role("button", name="Live").click()
    expect(page.locator("#live-toggle")).to_have_text("Paused")
    refreshes = live[0]
    DashboardMailJob(to="third@example.com").enqueue()
    page.clock.run_for(60_000)
    page.evaluate("() => new Promise(resolve => setTimeout(resolve, 0))")  # let fetches start
    assert live[0] == refreshes
    assert count_cell(page, "dash_mail", "waiting") == "2"
    page.get_by_role("button", name="Paused").click()
    page.clock.run_for(4000)
    expect(page.locator('tr[data-queue="dash_mail"] [data-count="waiting"]')).to_have_text("3")


def test_a_question_asked_across_a_live_refresh_still_acts(dashboard: str, page: Page) -> None:
    tasks = dead_tasks(2)
    live = [0]
    page.on("request", lambda request: _count_live(request.headers, live))
    page.clock.install()
    page.goto(f"{dashboard}/queue?queue=dash_mail&state=dead")
    page.get_by_role("button", name="on every matching task").click()
    expect(page.locator("#confirm-dialog")).to_be_visible()
    dead_tasks(1)  # (the refreshed list would differ)
    page.clock.run_for(7000)
    wait_until(lambda: live[0] >= 2)
    page.evaluate("() => new Promise(resolve => setTimeout(resolve, 0))")
    page.locator("#confirm-dialog [data-confirm-yes]").click()
    expect(page.locator("#notice")).to_contain_text("Put 3 task(s) back in waiting")
    assert {t.state() for t in tasks} == {TaskState.WAITING}


def test_live_refresh_waits_while_the_tab_is_hidden(dashboard: str, page: Page) -> None:
    live = [0]
    page.on("request", lambda request: _count_live(request.headers, live))
    page.clock.install()
    page.goto(dashboard)
    page.evaluate(
        """() => {
            Object.defineProperty(document, "visibilityState", {get: () => window.__seen});
            window.__seen = "hidden";
            document.dispatchEvent(new Event("visibilitychange"));
        }"""
    )
    page.clock.run_for(60_000)
    page.evaluate("() => new Promise(resolve => setTimeout(resolve, 0))")
    assert live[0] == 0
    page.evaluate(
        """() => {
            window.__seen = "visible";
            document.dispatchEvent(new Event("visibilitychange"));
        }"""
    )
    page.clock.run_for(4000)
    page.wait_for_function("() => document.body.dataset.refreshed !== undefined")
    assert live[0] >= 1


def _count_live(headers: dict[str, str], live: list[int]) -> None:
    if headers.get("x-culex-live"):
        live[0] += 1


def test_task_data_is_shown_as_text_and_never_runs(dashboard: str, page: Page) -> None:
    task = DashboardMailJob(to=SCRIPT + IMAGE + "x" * 3000).enqueue()
    assert task.cancel(IMAGE + SCRIPT)
    page.goto(f"{dashboard}/queue?queue=dash_mail&state=dead")
    expect(page.locator("td.reason")).to_contain_text(IMAGE)
    page.goto(f"{dashboard}/task?queue=dash_mail&id={task.id}")
    expect(page.locator("#last-error pre")).to_contain_text(f"cancelled: {IMAGE}{SCRIPT}")
    expect(page.locator("#params pre")).to_contain_text(SCRIPT + IMAGE)
    page.get_by_role("button", name=re.compile("show all")).click()
    expect(page.locator("#params pre")).to_contain_text("x" * 3000)
    page.clock.install()
    page.clock.run_for(4000)  # a live refresh puts the same text in again
    assert page.evaluate("() => window.__pwned") is None
    assert page.locator("#params img, #last-error img, #params script").count() == 0


def test_a_post_without_its_csrf_token_gets_403(dashboard: str, page: Page) -> None:
    (task,) = dead_tasks(1)
    page.goto(f"{dashboard}/task?queue=dash_mail&id={task.id}")
    retry = f"{dashboard}/task/retry?queue=dash_mail&id={task.id}"
    assert page.request.post(retry).status == 403
    assert page.request.post(retry, form={"csrf": "0" * 64}).status == 403
    bulk = f"{dashboard}/queue/bulk"
    refused = page.request.post(
        bulk, form={"queue": "dash_mail", "state": "dead", "action": "retry", "scope": "filter"}
    )
    assert refused.status == 403
    assert task.state() == TaskState.DEAD
    token = page.locator('input[name="csrf"]').first.get_attribute("value")
    assert token is not None
    assert page.request.post(retry, form={"csrf": token}).ok  # the page's own token works
    assert task.state() == TaskState.WAITING
    later = DashboardMailJob(to="later@example.com").enqueue(delay=3600)
    run_now = f"{dashboard}/task/run_now?queue=dash_mail&id={later.id}"
    assert page.request.post(run_now, form={"csrf": "0" * 64}).status == 403
    assert later.state() == TaskState.SCHEDULED
    assert page.request.post(run_now, form={"csrf": token}).ok
    assert later.state() == TaskState.WAITING


def test_read_only_mode_shows_no_action_and_refuses_posts(r: redis.Redis, page: Page) -> None:
    (task,) = dead_tasks(1)
    with serve(app(config.settings(), read_only=True)) as url:
        page.goto(f"{url}/task?queue=dash_mail&id={task.id}")
        expect(page.locator("#read-only")).to_be_visible()
        expect(page.locator("#task-state")).to_have_text("dead")
        expect(page.locator("form[method=post]")).to_have_count(0)
        page.goto(f"{url}/queue?queue=dash_mail&state=dead")
        expect(page.get_by_role("row").filter(has_text=task.id)).to_be_visible()
        expect(page.locator("form[method=post], input[type=checkbox]")).to_have_count(0)
        refused = page.request.post(f"{url}/task/retry?queue=dash_mail&id={task.id}")
        assert refused.status == 403 and "read-only" in refused.text()
        refused = page.request.post(f"{url}/queue/pause", form={"queue": "dash_mail"})
        assert refused.status == 403
        later = DashboardMailJob(to="later@example.com").enqueue(delay=3600)
        page.goto(f"{url}/queue?queue=dash_mail&state=scheduled")
        expect(page.get_by_role("row").filter(has_text=later.id)).to_be_visible()
        expect(page.locator("[data-run-now]")).to_have_count(0)
        refused = page.request.post(f"{url}/task/run_now?queue=dash_mail&id={later.id}")
        assert refused.status == 403
        assert later.state() == TaskState.SCHEDULED
    assert task.state() == TaskState.DEAD
    assert not queue_control.controls(queues=["dash_mail"])["dash_mail"].paused


def test_basic_auth(r: redis.Redis, browser: Browser) -> None:
    with serve(app(config.settings(), basic_auth=("ops", "s3cret"))) as url:
        for credentials in (None, {"username": "ops", "password": "wrong"}):
            context = browser.new_context(http_credentials=credentials)  # type: ignore[arg-type]
            assert context.request.get(url).status == 401
            context.close()
        context = browser.new_context(http_credentials={"username": "ops", "password": "s3cret"})
        tab = context.new_page()
        tab.goto(url)
        expect(tab).to_have_title("Overview · culex")
        context.close()


def test_mounted_under_a_prefix(r: redis.Redis, page: Page) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    (task,) = dead_tasks(1)
    outer = Starlette(routes=[Mount("/ops/culex", app=app(config.settings()))])
    accept_dialogs(page)
    with serve(outer) as url:
        page.goto(f"{url}/ops/culex/")
        page.get_by_role("link", name="dash_mail", exact=True).click()
        expect(page).to_have_url(re.compile("/ops/culex/queue\\?queue=dash_mail$"))
        page.get_by_role("link", name="Dead", exact=True).click()
        page.get_by_role("link", name=task.id).click()
        expect(page).to_have_url(re.compile(f"/ops/culex/task\\?queue=dash_mail&id={task.id}$"))
        page.get_by_role("button", name="Retry").click()
        expect(page.locator("#task-state")).to_have_text("waiting")
        page.get_by_role("link", name="Runners").click()
        expect(page).to_have_url(re.compile("/ops/culex/runners$"))
    assert task.state() == TaskState.WAITING


class DashboardSlowJob(culex.QueuedJob):
    queue = "dash_slow"

    def perform(self) -> None:
        release.wait(30)


release = threading.Event()


@contextlib.contextmanager
def running(*queues: str) -> Iterator[culex.Runner]:
    """A runner on its own loop in a thread, for the block."""
    release.clear()
    culex.configure(lease=0.6, concurrency=2)
    worker = culex.Runner(run_from=list(queues))
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(worker.arun(),))
    thread.start()
    try:
        yield worker
    finally:
        release.set()
        loop.call_soon_threadsafe(worker.stop)
        thread.join(30)
        loop.close()


@pytest.fixture
def runner(r: redis.Redis) -> Iterator[culex.Runner]:
    with running("dash_slow") as worker:
        yield worker


def test_the_runners_page_shows_each_runner_and_what_it_runs(
    runner: culex.Runner, page: Page
) -> None:
    task = DashboardSlowJob().enqueue()
    wait_until(
        lambda: [t["id"] for r in inspection.runners() for t in r["tasks"]] == [task.id],
        what="the runner's beat naming its task",
    )
    with serve(app(config.settings())) as url:
        page.goto(f"{url}/runners")
        card = page.locator(f'[data-runner="{runner.id}"]')
        expect(card.get_by_role("link", name=task.id)).to_be_visible()
        expect(card.locator("[data-busy]")).to_have_text("1 / 2")
        expect(card).to_contain_text("dash_slow")
        expect(card).to_contain_text(runner.id)


def test_a_task_id_that_holds_url_characters(dashboard: str, page: Page) -> None:
    task = DashboardMailJob(to="a@example.com").enqueue(id="order/42?x=1#y%20")
    assert task.cancel("no stock")
    accept_dialogs(page)
    page.goto(f"{dashboard}/queue?queue=dash_mail&state=dead")
    page.get_by_role("link", name=task.id).click()
    expect(page.locator("h1")).to_have_text(f"Task {task.id}")
    page.get_by_role("button", name="Retry").click()
    expect(page.locator("#task-state")).to_have_text("waiting")
    assert task.state() == TaskState.WAITING


def test_periodic_jobs_show_their_schedule_and_trigger_now(r: redis.Redis, page: Page) -> None:
    class DashboardTickJob(culex.PeriodicJob):
        queue = "dash_periodic"
        run_every = 3600

        def perform(self) -> None:
            pass

    accept_dialogs(page)
    try:
        with running("dash_periodic"):  # its scheduler records the job
            wait_until(inspection.periodic_jobs, what="the periodic job's record")
        with serve(app(config.settings())) as url:
            page.goto(f"{url}/periodic")
            row = page.locator('tr[data-job="DashboardTickJob"]')
            expect(row).to_contain_text("dash_periodic")
            expect(row).to_contain_text(str(DashboardTickJob.schedule_))
            expect(row.locator("time").first).to_contain_text("in ")  # the next run
            row.get_by_role("button", name="Trigger now").click()
            expect(page.locator("#notice")).to_contain_text("Enqueued a run now")
            page.locator("#notice a").click()
            expect(page.locator("#task-state")).to_have_text("waiting")
            assert (
                inspection.queue_counts(queues=["dash_periodic"])["dash_periodic"]["waiting"] == 1
            )
    finally:
        culex.registry.remove(DashboardTickJob)


class DashboardWorkJob(culex.QueuedJob):
    queue = "dash_work"
    broken: bool = False
    max_retries = 0

    def perform(self) -> None:
        if self.broken:
            raise RuntimeError("the work failed")


def test_the_chart_draws_what_ran(r: redis.Redis, page: Page) -> None:
    culex.enqueue_many(DashboardWorkJob(broken=i % 3 == 0) for i in range(9))
    with running("dash_work"):
        wait_until(
            lambda: (
                inspection.queue_counts(queues=["dash_work"])["dash_work"]
                == {"waiting": 0, "pending": 0, "scheduled": 0, "dead": 3}
            ),
            what="every task to end",
        )
    with serve(app(config.settings())) as url:
        page.goto(url)
        chart = page.locator("#chart")
        expect(chart).to_have_attribute("data-processed", "9")
        expect(chart).to_have_attribute("data-step", "minute")
        canvas = chart.locator("canvas")
        expect(canvas).to_be_visible()
        box = canvas.bounding_box()
        assert box is not None and box["width"] > 100 and box["height"] > 100
        expect(page.locator('#last-hour [data-hour="dead"]')).to_have_text("3")
        row = page.locator('tr[data-queue="dash_work"]')
        expect(row.locator('[data-hour="processed"]')).to_have_text("9")
        scraped = page.request.get(f"{url}/metrics")
        assert scraped.ok and scraped.headers["content-type"].startswith("text/plain")
        assert 'culex_queue_tasks{queue="dash_work",state="dead"} 3.0' in scraped.text()
        page.get_by_role("button", name="week").click()
        expect(chart).to_have_attribute("data-step", "hour")
        expect(chart).to_have_attribute("data-processed", "9")
        expect(chart.locator("canvas")).to_have_count(1)


def test_a_task_s_errors_stay_open_or_closed_across_a_live_refresh(
    r: redis.Redis, dashboard: str, page: Page
) -> None:
    from culex._redis import claims, reports
    from culex._redis.keys import queue_keys

    from ..conftest import driver_of

    task = DashboardMailJob(to="a@example.com").enqueue()
    keys, d = queue_keys("culex", "dash_mail"), driver_of(r)
    for attempt, delay in ((1, 0), (2, None)):
        [claimed] = d.run(
            claims.claim(keys, limit=1, lease_ms=60_000, promote_limit=1, dead_ttl_ms=60_000)
        ).tasks
        assert claimed.attempt == attempt
        d.run(
            reports.fail(keys, task.id, attempt, f"ValueError: {attempt}", retry_delay_ms=delay,
                         dead_ttl_ms=60_000, dead_max=10, traceback=f"trace of {attempt}")
        )  # fmt: skip
    page.clock.install()
    page.goto(f"{dashboard}/task?queue=dash_mail&id={task.id}")
    newest, oldest = page.locator("#errors details").all()
    expect(newest).to_have_attribute("open", "")
    expect(oldest).not_to_have_attribute("open", "")
    newest.locator("summary").click()
    oldest.locator("summary").click()
    expect(oldest.locator("pre")).to_have_text("trace of 1")
    page.evaluate("() => { document.body.dataset.refreshed = '' }")
    page.clock.run_for(4000)
    expect(page.locator("body")).not_to_have_attribute("data-refreshed", "")
    newest, oldest = page.locator("#errors details").all()
    expect(newest).not_to_have_attribute("open", "")
    expect(oldest).to_have_attribute("open", "")


# -- search, the Dead page, retries, confirmations, run order and run now ------------------


class DashboardBillingJob(culex.QueuedJob):
    queue = "dash_billing"
    invoice: str

    def perform(self) -> None:
        pass


def failed_once(r: redis.Redis, task: Task, error: str) -> None:
    """Claim ``task`` and fail it with ``error``: scheduled for a retry an hour on."""
    from culex._redis import claims, reports
    from culex._redis.keys import queue_keys

    from ..conftest import driver_of

    keys = queue_keys("culex", task.queue)
    d = driver_of(r)
    claimed = d.run(
        claims.claim(keys, limit=1, lease_ms=60_000, promote_limit=1, dead_ttl_ms=60_000)
    ).tasks
    assert [c.id for c in claimed] == [task.id]
    d.run(reports.fail(keys, task.id, 1, error, retry_delay_ms=3_600_000, dead_ttl_ms=60_000,
                       dead_max=10))  # fmt: skip


def listed(page: Page) -> list[str | None]:
    rows = page.locator("table.tasks tbody tr")
    return [rows.nth(i).get_attribute("data-task") for i in range(rows.count())]


def test_search_by_an_id_prefix_part_of_a_job_type_params_and_last_error(
    dashboard: str, page: Page
) -> None:
    mails = [DashboardMailJob(to=f"user{i}@example.com").enqueue() for i in range(3)]
    report = DashboardReportJob(name="quarterly").enqueue()
    broken = DashboardMailJob(to="bounce@example.com").enqueue()
    assert broken.cancel("SMTPError 550 mailbox unavailable")
    page.goto(f"{dashboard}/queue?queue=dash_mail")

    def search(text: str, state: str = "waiting") -> list[str | None]:
        page.goto(f"{dashboard}/queue?queue=dash_mail&state={state}")
        page.get_by_label("search tasks").fill(text)
        page.get_by_role("button", name="Search").click()
        expect(page.locator("#listing")).to_contain_text("looked at", ignore_case=True)
        return listed(page)

    assert search(mails[1].id[:-2]) == [mails[1].id]  # an id prefix
    assert search("Report") == [report.id]  # part of a job type
    assert search("user2@") == [mails[2].id]  # text in params
    assert search("mailbox unavailable", "dead") == [broken.id]  # text in the last error
    expect(page.locator("td.reason")).to_contain_text("SMTPError 550")
    assert search("nobody@") == []
    expect(page.locator("#no-rows")).to_contain_text("matching “nobody@”")
    expect(page.locator("#no-rows")).to_contain_text("Looked at 4 of 4")
    # A search is never acted on whole: only ticked tasks.
    expect(page.get_by_role("button", name="on every matching task")).to_have_count(0)
    token = page.locator('input[name="csrf"]').first.get_attribute("value")
    form: dict[str, str | float | bool] = {
        "csrf": token or "", "queue": "dash_mail", "state": "dead", "q": "nobody@",
        "action": "delete", "scope": "filter",
    }  # fmt: skip
    refused = page.request.post(f"{dashboard}/queue/bulk", form=form)
    assert refused.status == 400 and "tick them" in refused.text()
    assert broken.state() == TaskState.DEAD


def test_the_dead_page_lists_every_queue_s_dead_tasks_newest_first(
    r: redis.Redis, dashboard: str, page: Page
) -> None:
    from ..conftest import server_ms

    mail = DashboardMailJob(to="old@example.com").enqueue()
    bill = DashboardBillingJob(invoice="INV-7").enqueue()
    newest = DashboardMailJob(to="new@example.com").enqueue()

    def later_than(then: int) -> bool:
        return server_ms(r) > then

    for task, why in ((mail, "first"), (bill, "second"), (newest, "third")):
        wait_until(functools.partial(later_than, server_ms(r)))  # (each dies in a ms of its own)
        assert task.cancel(why)
    page.goto(f"{dashboard}/dead")
    expect(page.locator("#dead-tasks tbody tr")).to_have_count(3)
    rows = page.locator("#dead-tasks tbody tr")
    ids = [rows.nth(i).get_attribute("data-task") for i in range(3)]
    assert ids == [newest.id, bill.id, mail.id]
    expect(rows.nth(1)).to_have_attribute("data-queue", "dash_billing")
    expect(rows.nth(1).locator("td.params")).to_contain_text("INV-7")
    expect(rows.nth(1).locator("td.reason")).to_have_text("cancelled: second")
    page.goto(f"{dashboard}/dead?limit=2")
    expect(rows).to_have_count(2)
    page.get_by_role("link", name="next page").click()
    expect(rows).to_have_count(1)
    expect(rows.first).to_have_attribute("data-task", mail.id)
    page.get_by_label("Dead tasks of").select_option("dash_billing")
    expect(page.get_by_role("heading", name="Queue dash_billing")).to_be_visible()
    assert listed(page) == [bill.id]
    page.get_by_label("Dead tasks of").select_option("every queue")
    expect(page.locator("#dead-tasks tbody tr")).to_have_count(3)


def test_the_retries_view_shows_scheduled_retries_apart_from_delayed_tasks(
    r: redis.Redis, dashboard: str, page: Page
) -> None:
    delayed = DashboardMailJob(to="later@example.com").enqueue(delay=7200)
    retrying = DashboardMailJob(to="flaky@example.com").enqueue()
    failed_once(r, retrying, "TimeoutError: the mail server did not answer")
    page.goto(f"{dashboard}/queue?queue=dash_mail&state=scheduled")
    assert listed(page) == [retrying.id, delayed.id]  # soonest due first
    page.locator('[data-kind="retrying"]').click()
    assert listed(page) == [retrying.id]
    row = page.locator(f'tr[data-task="{retrying.id}"]')
    expect(row.locator("td.params")).to_contain_text("flaky@example.com")
    expect(row.locator("td.reason")).to_have_text("TimeoutError: the mail server did not answer")
    page.locator('[data-kind="delayed"]').click()
    assert listed(page) == [delayed.id]


def test_a_bulk_confirmation_names_the_action_and_the_count(dashboard: str, page: Page) -> None:
    tasks = dead_tasks(3)
    dialog = page.locator("#confirm-dialog")
    page.goto(f"{dashboard}/queue?queue=dash_mail&state=dead")
    page.get_by_label("action").select_option("delete")
    page.get_by_role("button", name="on every matching task").click()
    expect(dialog.locator("p")).to_have_text(
        "Delete 3 dead task(s) of dash_mail? This cannot be undone."
    )
    dialog.locator("[data-confirm-no]").click()
    page.get_by_label(f"tick {tasks[0].id}").check()
    page.get_by_label(f"tick {tasks[2].id}").check()
    page.get_by_label("action").select_option("retry")
    page.get_by_role("button", name="on ticked").click()
    expect(dialog.locator("p")).to_have_text("Retry 2 ticked dead task(s) of dash_mail?")
    expect(dialog.locator("[data-confirm-yes]")).to_have_text("Retry")
    dialog.locator("[data-confirm-no]").click()
    expect(dialog).to_be_hidden()
    assert {t.state() for t in tasks} == {TaskState.DEAD}  # (both cancelled: nothing sent)
    dialog.page.get_by_role("button", name="on ticked").click()
    dialog.locator("[data-confirm-yes]").click()
    expect(page.locator("#notice")).to_contain_text("Put 2 task(s) back in waiting")
    assert [t.state() for t in tasks] == ["waiting", "dead", "waiting"]


def test_scheduled_soonest_first_with_dates_and_run_now(dashboard: str, page: Page) -> None:
    later, soon, middle = (DashboardMailJob(to=f"{h}@example.com").enqueue(delay=h * 3600)
                           for h in (3, 1, 2))  # fmt: skip
    accept_dialogs(page)
    page.goto(f"{dashboard}/queue?queue=dash_mail&state=scheduled")
    assert listed(page) == [soon.id, middle.id, later.id]
    soon_row = page.locator(f'tr[data-task="{soon.id}"]')
    expect(soon_row.locator("time")).to_contain_text("in ")
    expect(soon_row.locator(".at")).to_have_text(re.compile(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d"))
    page.locator(f'tr[data-task="{middle.id}"] [data-run-now]').click()
    expect(page.locator("#notice")).to_contain_text("Made ready now")
    assert listed(page) == [soon.id, later.id]
    assert middle.state() == TaskState.WAITING
    page.goto(f"{dashboard}/task?queue=dash_mail&id={later.id}")
    page.get_by_role("button", name="Run now").click()
    expect(page.locator("#task-state")).to_have_text("waiting")
    assert later.state() == TaskState.WAITING
    # Run order in waiting: priority first, then ready time.
    urgent = DashboardMailJob(to="urgent@example.com").enqueue(priority=10)
    page.goto(f"{dashboard}/queue?queue=dash_mail")
    assert listed(page) == [urgent.id, middle.id, later.id]


def test_run_now_of_a_task_that_is_no_longer_scheduled_is_refused(
    dashboard: str, page: Page
) -> None:
    task = DashboardMailJob(to="a@example.com").enqueue(delay=3600)
    page.goto(f"{dashboard}/queue?queue=dash_mail&state=scheduled")
    assert task.cancel()
    page.locator(f'tr[data-task="{task.id}"] [data-run-now]').click()
    expect(page.locator("#notice")).to_contain_text("Nothing done")
    assert task.state() == TaskState.DEAD
