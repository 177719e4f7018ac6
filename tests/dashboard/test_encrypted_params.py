"""EncryptedParams in a real browser: the task page, its "show all" text, the queue's
listing and the dead page show "encrypted (key <id>)", never the params or the ciphertext."""

from __future__ import annotations

import os

import pytest

import culex

from .conftest import missing

reason = missing()
if reason is not None:
    pytest.skip(reason, allow_module_level=True)

from playwright.sync_api import Page, expect  # noqa: E402

CARD = "4111-1111-1111-1111"


class DashboardSecretJob(culex.QueuedJob):
    queue = "dash_secret"
    card: str

    def perform(self) -> None:
        pass


def test_the_dashboard_shows_encrypted_instead_of_the_params(dashboard: str, page: Page) -> None:
    key = os.urandom(32)
    culex.configure(middleware=[culex.EncryptedParams(keys={"k7": key}, current="k7")])
    waiting = DashboardSecretJob(card=CARD).enqueue()
    dead = DashboardSecretJob(card=CARD).enqueue()
    assert dead.cancel("gave up")
    page.goto(f"{dashboard}/task?queue=dash_secret&id={waiting.id}")
    expect(page.locator("#params")).to_contain_text("encrypted (key k7)")
    page.goto(f"{dashboard}/task/text?queue=dash_secret&id={waiting.id}&field=params")
    assert page.locator("body").inner_text().strip() == "encrypted (key k7)"
    page.goto(f"{dashboard}/queue?queue=dash_secret")
    expect(page.locator("td.params").first).to_have_text("encrypted (key k7)")
    page.goto(f"{dashboard}/dead")
    expect(page.locator("td.params").first).to_have_text("encrypted (key k7)")
    for url in (f"/task?queue=dash_secret&id={dead.id}", "/queue?queue=dash_secret&state=dead"):
        page.goto(dashboard + url)
        html = page.content()
        assert CARD not in html and "$encrypted" not in html and "encrypted (key k7)" in html
