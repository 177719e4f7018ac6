"""culex.runner.outage: an outage told in two lines, whatever the number of failures."""

from __future__ import annotations

import logging

import pytest

from culex.errors import ServerUnavailable
from culex.runner.outage import Outage


def test_an_outage_is_told_when_it_begins_and_when_everything_that_failed_worked(
    caplog: pytest.LogCaptureFixture,
) -> None:
    outage = Outage()
    lost = ServerUnavailable("cannot reach the Redis server at redis://h:1")
    with caplog.at_level(logging.DEBUG, logger="culex"):
        outage.worked("claiming tasks")  # (nothing failed: nothing to say)
        for _ in range(3):
            outage.failed("claiming tasks", lost)
            outage.failed("reporting outcomes", lost)
        outage.worked("claiming tasks")  # (the reports still wait)
        outage.worked("reporting outcomes", "reclaiming expired leases")
        outage.failed("reporting outcomes", lost)  # a second outage
        outage.worked("reporting outcomes")
    warned = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert [line.split(" ", 2)[:2] for line in warned] == [
        ["claiming", "tasks"],
        ["the", "server"],
        ["reporting", "outcomes"],
        ["the", "server"],
    ]
    assert "cannot reach the Redis server at redis://h:1" in warned[0]
    assert "a failover, or a restart, may be under way" in warned[0]
    assert "the server answers again" in warned[1]
    debug = [r for r in caplog.records if r.levelno == logging.DEBUG]
    assert len(debug) == 5  # every failure after the first of an outage
    assert outage.failing == set() and outage.since is None
