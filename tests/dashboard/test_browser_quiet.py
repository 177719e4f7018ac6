"""The runners page in a real browser: a quiet runner is shown as quiet, a running one is
not."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Iterator

import pytest
import redis

import culex
from culex import config
from culex.operations import inspection

from ..conftest import wait_until
from .conftest import missing, serve

reason = missing()
if reason is not None:
    pytest.skip(reason, allow_module_level=True)

from playwright.sync_api import Page, expect  # noqa: E402

from culex.dashboard import app  # noqa: E402


class DashboardQuietJob(culex.QueuedJob):
    queue = "dash_quiet"

    def perform(self) -> None:
        pass


@pytest.fixture
def runners(r: redis.Redis) -> Iterator[tuple[culex.Runner, asyncio.AbstractEventLoop]]:
    """A runner on its own loop in a thread, and its loop."""
    culex.configure(lease=0.6, concurrency=1)
    worker = culex.Runner(run_from=["dash_quiet"])
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(worker.arun(),))
    thread.start()
    try:
        yield worker, loop
    finally:
        loop.call_soon_threadsafe(worker.stop)
        thread.join(30)
        loop.close()


def test_the_runners_page_shows_a_quiet_runner_as_quiet(
    runners: tuple[culex.Runner, asyncio.AbstractEventLoop], page: Page
) -> None:
    worker, loop = runners
    wait_until(lambda: inspection.runners(), what="the runner's first beat")
    with serve(app(config.settings())) as url:
        page.goto(f"{url}/runners")
        card = page.locator(f'[data-runner="{worker.id}"]')
        expect(card.locator("[data-state]")).to_have_text("running")
        expect(card.locator(".badge")).to_have_count(0)
        loop.call_soon_threadsafe(worker.quiet)
        wait_until(
            lambda: [r["state"] for r in inspection.runners()] == ["quiet"],
            what="the runner's beat saying quiet",
        )
        page.goto(f"{url}/runners")
        expect(card.locator("[data-state]")).to_have_text("quiet")
        expect(card.locator(".badge")).to_have_text("quiet")
