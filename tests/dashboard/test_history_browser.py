"""The queue page's Succeeded tab and the task page's log lines, in a real browser."""

from __future__ import annotations

import threading

import pytest
import redis

import culex
from culex.testing import drain

from .conftest import missing

reason = missing()
if reason is not None:
    pytest.skip(reason, allow_module_level=True)

from playwright.sync_api import Page, expect  # noqa: E402


class DashboardHistoryJob(culex.QueuedJob):
    queue = "dash_history"
    n: int = 0

    def perform(self) -> int:
        return self.n


def drained(queue: str) -> None:
    """drain() in a thread of its own: Playwright's loop counts as running in this one."""
    worker = threading.Thread(target=drain, args=(queue,), kwargs={"fail_fast": False})
    worker.start()
    worker.join()


def test_the_succeeded_tab_lists_the_recent_successes(
    r: redis.Redis, dashboard: str, page: Page
) -> None:
    done = [DashboardHistoryJob(n=i).enqueue() for i in range(3)]
    drained("dash_history")
    waiting = DashboardHistoryJob(n=9).enqueue()
    page.goto(f"{dashboard}/queue?queue=dash_history")
    page.locator('[data-tab="succeeded"]').click()
    expect(page.locator('[data-tab="succeeded"]')).to_have_attribute("aria-current", "page")
    rows = page.locator("table.tasks tbody tr")
    expect(rows).to_have_count(3)
    for task in done:
        expect(page.get_by_role("link", name=task.id)).to_be_visible()
    expect(page.get_by_role("link", name=waiting.id)).to_have_count(0)
    page.get_by_role("link", name=done[0].id).click()
    expect(page.locator("#task-state")).to_have_text("succeeded")


class DashboardLoggedJob(culex.QueuedJob):
    queue = "dash_history"
    max_retries = 1

    def perform(self) -> None:
        self.log(f"try {self.attempt}: <b>not bold</b>")
        if self.attempt == 1:
            raise RuntimeError("first try fails")


def test_the_task_page_shows_its_log_lines(r: redis.Redis, dashboard: str, page: Page) -> None:
    task = DashboardLoggedJob().enqueue()
    drained("dash_history")
    page.goto(f"{dashboard}/task?queue=dash_history&id={task.id}")
    rows = page.locator("#logs tbody tr")
    expect(rows).to_have_count(2)
    expect(rows.nth(0)).to_have_attribute("data-attempt", "1")
    expect(rows.nth(0).locator(".log-line")).to_have_text("try 1: <b>not bold</b>")  # escaped
    expect(rows.nth(1)).to_have_attribute("data-attempt", "2")
    expect(rows.nth(1).locator(".log-line")).to_have_text("try 2: <b>not bold</b>")
