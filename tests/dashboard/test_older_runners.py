"""The runners and queue pages warn of a feature in use on a queue that a live runner of an
older culex there cannot serve (its record written with raw commands, as that culex's
beat.lua left it)."""

from __future__ import annotations

import pytest
import redis

from culex.server import compatibility

pytest.importorskip("starlette", reason="the dashboard needs its extra: pip install -e '.[test]'")

from ..server.test_compatibility import CompatExpiringJob, CompatPlainJob, plant_runner
from .test_foreign_records import get


def test_runners_and_queue_pages_show_what_an_older_runner_cannot_serve(
    r: redis.Redis, dashboard: str
) -> None:
    CompatExpiringJob().enqueue(expires=3600)
    CompatPlainJob().enqueue()
    plant_runner(r, "old-host:41:0e0e", ["c-expiry", "c-plain"])
    status, page = get(dashboard, "runners")
    assert status == 200, page
    [shown] = [line for line in page.splitlines() if 'data-unserved="c-expiry expiry"' in line]
    assert "uses expiry (expires=) (task " in shown and "runs a task after it expired" in shown
    assert "cannot serve expiry (expires=)</span>" in page  # (the old runner's card)
    status, page = get(dashboard, "queue", queue="c-expiry")
    assert status == 200 and 'data-unserved="c-expiry expiry"' in page
    status, page = get(dashboard, "queue", queue="c-plain")
    assert status == 200 and 'id="unserved"' not in page


def test_no_warning_when_the_runners_serve_every_feature(r: redis.Redis, dashboard: str) -> None:
    CompatExpiringJob().enqueue(expires=3600)
    plant_runner(r, "new-host:7:0f0f", ["c-expiry"], features=compatibility.SERVED)
    for path, query in (("runners", {}), ("queue", {"queue": "c-expiry"})):
        status, page = get(dashboard, path, **query)
        assert status == 200 and 'id="unserved"' not in page and "cannot serve" not in page
