"""A queue's activity page in a real browser: its newest task events, linked from the
queue's page, refreshed live like the other pages; it says when events are off."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

import culex
from culex import config

from .conftest import missing, serve

reason = missing()
if reason is not None:
    pytest.skip(reason, allow_module_level=True)

from playwright.sync_api import Page, expect  # noqa: E402

from culex.dashboard import app  # noqa: E402


class ActivityMailJob(culex.QueuedJob):
    queue = "activity_mail"

    def perform(self) -> None:
        pass


@pytest.fixture
def events_on(r: redis.Redis) -> Iterator[str]:
    culex.configure(events=True)
    with serve(app(config.settings())) as url:
        yield url


def test_the_activity_page_lists_the_events_and_refreshes_live(events_on: str, page: Page) -> None:
    task = ActivityMailJob().enqueue()
    assert task.cancel("not needed")
    page.clock.install()  # the page's timers run when the test says so
    page.goto(f"{events_on}/queue?queue=activity_mail")
    page.get_by_role("link", name="activity", exact=True).click()
    expect(page.get_by_role("heading", name="Activity of activity_mail")).to_be_visible()
    rows = page.locator("#activity tbody tr")
    expect(rows).to_have_count(2)
    assert [rows.nth(i).get_attribute("data-event") for i in range(2)] == ["dead", "enqueued"]
    expect(rows.first).to_contain_text(task.id)
    expect(rows.first).to_contain_text("ActivityMailJob")
    later = ActivityMailJob().enqueue()
    page.clock.run_for(4000)
    expect(rows).to_have_count(3)
    expect(rows.first).to_contain_text(later.id)
    rows.first.get_by_role("link", name=later.id).click()
    expect(page.locator("#task-state")).to_have_text("waiting")


def test_the_activity_page_says_when_events_are_off(r: redis.Redis, page: Page) -> None:
    ActivityMailJob().enqueue()
    with serve(app(config.settings())) as url:
        page.goto(f"{url}/activity?queue=activity_mail")
        expect(page.locator("#no-events")).to_contain_text("task events are off")
        response = page.goto(f"{url}/activity?queue=bad%20name")
        assert response is not None and response.status == 404
