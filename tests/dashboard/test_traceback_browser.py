"""A failed attempt's traceback on the task page, in a real browser: the job's frames and
the exception first, where the box shows them without scrolling it, culex's own frames
folded into a <details> that holds the whole traceback; and its retries, counted."""

from __future__ import annotations

import contextvars

import pytest
import redis

import culex
from culex.jobs import failures

from ..conftest import wait_until
from .conftest import missing

reason = missing()
if reason is not None:
    pytest.skip(reason, allow_module_level=True)

from playwright.sync_api import Page, expect  # noqa: E402

from .test_browser import running  # noqa: E402

WHO = contextvars.ContextVar[str]("dash_who")
WHEN = contextvars.ContextVar[str]("dash_when")
WHERE = contextvars.ContextVar[str]("dash_where")
EXCEPTION = "RuntimeError: the invoice has no lines"

# Whether the exception's line is inside the box as it first shows (not scrolled).
IN_VIEW = """(box) => {
    const text = box.firstChild, at = text.textContent.indexOf(arguments[1]);
    const range = document.createRange();
    range.setStart(text, at);
    range.setEnd(text, at + 12);
    const line = range.getBoundingClientRect(), frame = box.getBoundingClientRect();
    return box.scrollTop === 0 && line.top >= frame.top && line.bottom <= frame.bottom;
}"""


class DashboardInvoiceJob(culex.QueuedJob):
    queue = "dash_invoices"
    max_retries = 0
    timeout = 60

    def perform(self) -> None:
        self.total()

    def total(self) -> int:
        raise RuntimeError("the invoice has no lines")


def test_the_exception_line_shows_without_scrolling_culex_s_frames_folded(
    r: redis.Redis, dashboard: str, page: Page
) -> None:
    # (three middlewares around a plain def perform: culex's frames, a thread pool's and the
    # middleware chain's, come before the job's)
    chain = [culex.ContextMiddleware(WHO), culex.ContextMiddleware(WHEN)]
    culex.configure(middleware=[*chain, culex.ContextMiddleware(WHERE)])
    task = DashboardInvoiceJob().enqueue()
    with running("dash_invoices"):
        wait_until(lambda: task.state() is culex.TaskState.DEAD, what="the task to fail")
    [kept] = failures.attempt_errors(task.info()["errors"])
    page.set_viewport_size({"width": 1024, "height": 768})
    page.clock.install()
    page.goto(f"{dashboard}/task?queue=dash_invoices&id={task.id}")
    expect(page.locator("#task-retries")).to_have_text("0")  # (it died of its first failure)
    box = page.locator("#errors details.attempt-error > pre")
    expect(box).to_contain_text(EXCEPTION)
    assert box.evaluate(IN_VIEW.replace("arguments[1]", repr(EXCEPTION)))
    expect(box).to_contain_text("culex frames folded: the whole traceback below)")
    expect(box).to_contain_text("in perform")
    whole = page.locator("#errors details.whole-traceback")
    expect(whole.locator("pre")).not_to_be_visible()
    whole.locator("summary").click()
    expect(whole.locator("pre")).to_have_text(kept.traceback.rstrip("\n"))
    page.evaluate("() => { document.body.dataset.refreshed = '' }")
    page.clock.run_for(4000)  # (a live refresh keeps it open)
    expect(page.locator("body")).not_to_have_attribute("data-refreshed", "")
    expect(whole.locator("pre")).to_be_visible()
