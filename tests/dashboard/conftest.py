"""The dashboard served by uvicorn (in a thread, on a free port) against the test server,
and a real Chromium driven by Playwright's sync API (so these tests are plain, not async)."""

from __future__ import annotations

import contextlib
import shutil
import socket
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pytest
import redis

from culex import config
from culex.jobs import enqueue

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page
    from starlette.types import ASGIApp

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def missing() -> str | None:
    """Why the browser tests cannot run here (None: they can)."""
    try:
        import playwright.sync_api  # noqa: F401
        import starlette  # noqa: F401
        import uvicorn  # noqa: F401
    except ImportError as exc:
        return f"the dashboard's browser tests need {exc.name}: pip install -e '.[test]'"
    if shutil.which(CHROMIUM) is None:
        return (
            f"the dashboard's browser tests need Chromium at {CHROMIUM}: apt-get install chromium"
        )
    return None


@contextlib.contextmanager
def serve(app: ASGIApp) -> Iterator[str]:
    """Serve ``app`` with uvicorn in a thread for the block: its base URL."""
    import uvicorn

    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = int(free.getsockname()[1])
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, name="dashboard", daemon=True)
    thread.start()
    ready = threading.Event()
    while not server.started and thread.is_alive():
        ready.wait(0.01)
    if not server.started:
        raise RuntimeError("the dashboard did not start")
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(10)


@pytest.fixture(autouse=True)
def registry_forgotten(r: redis.Redis) -> None:
    """Each test starts on an empty server; this process's memory of the queues it has
    registered there (which spares enqueue a command) is emptied with it."""
    enqueue._registered.clear()


@pytest.fixture
def dashboard(r: redis.Redis) -> Iterator[str]:
    """The dashboard on an empty test server: its base URL."""
    from culex.dashboard import app

    with serve(app(config.settings())) as url:
        yield url


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Chromium, for one module's tests. (Not for the session: while Playwright's sync API
    is started, its event loop counts as running in this thread, and every later test
    that starts one of its own (asyncio.run, pytest-asyncio) fails.)"""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        chromium = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield chromium
        finally:
            chromium.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page; a console error (a script error, a CSP refusal) fails the test."""
    context = browser.new_context()
    tab = context.new_page()
    errors: list[str] = []
    tab.on("console", lambda message: _errors(message, errors))
    tab.on("pageerror", lambda error: errors.append(str(error)))
    try:
        yield tab
    finally:
        context.close()
    assert errors == [], f"the browser reported errors: {errors}"


def _errors(message: Any, errors: list[str]) -> None:
    # A 4xx the test asked for is logged as a failed load; it is not the page's error.
    if message.type == "error" and "status of 40" not in message.text:
        errors.append(message.text)
