"""The dashboard's layout in a real browser: a phone's 420 px (no page wider than the
screen, "Live" in sight), and the throughput chart (its step in progress left out of the
lines, its times in UTC as every date of the pages)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
import redis

import culex
from culex import config
from culex._redis.keys import queues_key

from .conftest import missing, serve

reason = missing()
if reason is not None:
    pytest.skip(reason, allow_module_level=True)

from playwright.sync_api import Browser, Page, expect  # noqa: E402

from culex.dashboard import app  # noqa: E402

# The longest name a queue may have, in one word: its cell cannot wrap.
LONG = "a_queue_whose_name_is_long_" + "x" * 150


class LayoutLongJob(culex.QueuedJob):
    queue = LONG
    to: str

    def perform(self) -> None:
        pass


# The outermost elements that reach past the window's right edge (what overflows).
WIDEST = """() => Array.from(document.querySelectorAll("body *"))
  .filter((e) => e.getBoundingClientRect().right > window.innerWidth + 0.5)
  .filter((e) => !e.parentElement.closest("*") || e.parentElement.getBoundingClientRect().right
    <= window.innerWidth + 0.5)
  .map((e) => e.tagName + "." + e.className).slice(0, 5)"""


@pytest.fixture
def narrow(browser: Browser) -> Iterator[Page]:
    """A page 420 px wide, as a phone shows it; a script error fails the test."""
    context = browser.new_context(viewport={"width": 420, "height": 800})
    tab = context.new_page()
    errors: list[str] = []
    tab.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield tab
    finally:
        context.close()
    assert errors == []


def fits(page: Page, address: str = "") -> None:
    """No horizontal overflow of the page, and the Live button in sight."""
    width = page.evaluate("() => [document.documentElement.scrollWidth, window.innerWidth]")
    wide = page.evaluate(WIDEST)
    assert width[0] <= width[1], f"{address} is {width[0]} px wide in {width[1]}: {wide}"
    live = page.locator("#live-toggle")
    expect(live).to_be_visible()
    expect(live).to_be_in_viewport(ratio=1)


def test_every_page_fits_420_px(r: redis.Redis, narrow: Page) -> None:
    culex.configure(events=True)  # (the activity page with its rows)
    tasks = [LayoutLongJob(to=f"someone{i}@example.com").enqueue() for i in range(3)]
    assert tasks[0].cancel("ValueError: " + "no_such_mailbox_" * 30)
    with serve(app(config.settings())) as url:
        for address in (
            f"{url}/",
            f"{url}/queue?queue={LONG}",
            f"{url}/queue?queue={LONG}&state=dead",
            f"{url}/activity?queue={LONG}",
            f"{url}/task?queue={LONG}&id={tasks[0].id}",
            f"{url}/dead",
            f"{url}/runners",
            f"{url}/periodic",
        ):
            narrow.goto(address)
            fits(narrow, address)
        narrow.goto(f"{url}/")
        expect(narrow.locator("#chart canvas")).to_be_visible()
        fits(narrow)


def test_the_chart_leaves_its_step_in_progress_out_and_tells_time_in_utc(
    r: redis.Redis, browser: Browser
) -> None:
    # A browser five hours behind UTC: its own clock is not the pages' one.
    context = browser.new_context(timezone_id="America/New_York")
    page = context.new_page()
    try:
        with serve(app(config.settings())) as url:
            page.goto(url)
            chart = page.locator("#chart")
            expect(chart).to_have_attribute("data-points", "61")
            expect(chart).to_have_attribute("data-drawn", "60")  # (not the minute in progress)
            plot = chart.locator(".u-over")
            box = plot.bounding_box()
            assert box is not None
            plot.hover(position={"x": box["width"] - 2, "y": box["height"] / 2})
            shown = chart.locator(".u-legend .u-series").first.locator(".u-value")
            expect(shown).to_have_text(re.compile(r"\d{4}-\d\d-\d\d \d\d:\d\d"))
            # a minute of the range, in UTC (New York's would be five hours off)
            minutes = page.request.get(f"{url}/series?range=hour").json()["t"]
            utc = {datetime.fromtimestamp(t, UTC).strftime("%Y-%m-%d %H:%M") for t in minutes}
            assert shown.inner_text() in utc
            expect(chart.locator(".u-legend .u-series").first.locator(".u-label")).to_have_text(
                "UTC"
            )
            page.get_by_role("button", name="week").click()
            expect(chart).to_have_attribute("data-points", "169")
            expect(chart).to_have_attribute("data-drawn", "168")
    finally:
        context.close()


def test_a_page_of_queues_charts_its_own(r: redis.Redis, page: Page) -> None:
    names = [f"layout{i:03d}" for i in range(120)]
    r.sadd(queues_key("culex"), *names)
    with serve(app(config.settings())) as url:
        page.goto(url)
        expect(page.locator("#queues-shown")).to_have_text("1\N{EN DASH}50 of 120")
        page.locator('#queue-pages a[rel="next"]').click()
        expect(page.locator("#queues-shown")).to_have_text("51\N{EN DASH}100 of 120")
        expect(page.locator("tr[data-queue]").first).to_have_attribute("data-queue", "layout050")
        chart = page.locator("#chart")
        assert "after=layout049" in (chart.get_attribute("data-series-url") or "")
        expect(chart).to_have_attribute("data-points", "61")
        page.get_by_role("button", name="day").click()
        expect(chart).to_have_attribute("data-points", "25")
        page.locator('#queue-pages a[rel="prev"]').click()
        expect(page.locator("#queues-shown")).to_have_text("1\N{EN DASH}50 of 120")
