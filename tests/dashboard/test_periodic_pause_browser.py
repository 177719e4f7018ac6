"""The Periodic page's Pause/Resume button in a real browser: a paused job shows "paused",
loses its Trigger button and enqueues nothing; the button posts with its CSRF token, and
read-only mode hides it and refuses the post."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
import redis

import culex
from culex import config
from culex._redis.keys import queue_keys
from culex.operations import inspection

from ..conftest import wait_until
from .conftest import missing, serve

reason = missing()
if reason is not None:
    pytest.skip(reason, allow_module_level=True)

from playwright.sync_api import Page, expect  # noqa: E402

from culex.dashboard import app  # noqa: E402


class DashboardPausableJob(culex.PeriodicJob):
    queue = "dash_pausable"
    run_every = 3600

    def perform(self) -> None:
        pass


@pytest.fixture
def recorded(r: redis.Redis) -> Iterator[str]:
    """A runner's scheduler has recorded DashboardPausableJob (a runner ran for a while)."""
    worker = culex.Runner(run_from=["dash_pausable"])
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(worker.arun(),))
    thread.start()
    try:
        wait_until(inspection.periodic_jobs, what="the periodic job's record")
    finally:
        loop.call_soon_threadsafe(worker.stop)
        thread.join(30)
        loop.close()
    yield queue_keys("culex", "dash_pausable").periodic("DashboardPausableJob")


def test_pause_and_resume_a_periodic_job_from_its_page(
    r: redis.Redis, recorded: str, page: Page
) -> None:
    dialog = page.locator("#confirm-dialog")
    page.add_locator_handler(dialog, lambda: dialog.locator("[data-confirm-yes]").click())
    with serve(app(config.settings())) as url:
        page.goto(f"{url}/periodic")
        row = page.locator('tr[data-job="DashboardPausableJob"]')
        expect(row.get_by_role("button", name="Trigger now")).to_be_visible()
        row.get_by_role("button", name="Pause").click()
        expect(page.locator("#notice")).to_contain_text("Paused DashboardPausableJob")
        expect(row.locator("[data-paused]")).to_have_text("paused")
        expect(row.get_by_role("button", name="Trigger now")).to_have_count(0)
        assert r.hget(recorded, "paused") == b"1"
        assert [job.paused for job in inspection.periodic_jobs()] == [True]
        row.get_by_role("button", name="Resume").click()
        expect(page.locator("#notice")).to_contain_text("Resumed DashboardPausableJob")
        expect(row.locator("[data-paused]")).to_have_count(0)
        expect(row.get_by_role("button", name="Pause")).to_be_visible()
        assert not r.hexists(recorded, "paused")


def test_the_pause_button_needs_its_csrf_token_and_read_only_mode_hides_it(
    r: redis.Redis, recorded: str, page: Page
) -> None:
    form: dict[str, str | float | bool] = {"job": "DashboardPausableJob", "queue": "dash_pausable"}
    with serve(app(config.settings())) as url:
        page.goto(f"{url}/periodic")
        refused = page.request.post(f"{url}/periodic/pause", form=form)
        assert refused.status == 403
        assert not r.hexists(recorded, "paused")
    with serve(app(config.settings(), read_only=True)) as url:
        page.goto(f"{url}/periodic")
        expect(page.locator('tr[data-job="DashboardPausableJob"]')).to_be_visible()
        expect(page.locator("form[method=post]")).to_have_count(0)
        expect(page.get_by_role("button", name="Pause")).to_have_count(0)
        refused = page.request.post(f"{url}/periodic/pause", form=form)
        assert refused.status == 403 and "read-only" in refused.text()
    assert not r.hexists(recorded, "paused")
