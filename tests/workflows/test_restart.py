"""A workflow run reaches its end although the server restarts while it runs (append-only
file on: what was acknowledged is kept), and although the server loses its script cache."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from decimal import Decimal
from pathlib import Path

import pytest
import redis

import culex
from culex import config
from culex.server.embedded import EmbeddedServer

from ..conftest import await_until, running, suite_binary
from .jobs import QUEUES, Journal, WfPriceJob, WfSumJob


@pytest.fixture
def own_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedServer]:
    """A server for this test alone; culex's settings point at it."""
    server = EmbeddedServer(tmp_path / "valkey", binary=suite_binary())
    url = server.ensure_running()
    monkeypatch.setenv("CULEX_REDIS_URL", url)
    config.reset()
    Journal.clear()
    try:
        yield server
    finally:
        server.stop()
        monkeypatch.undo()
        config.reset()


async def test_a_run_ends_across_server_restarts(own_server: EmbeddedServer) -> None:
    r = redis.Redis.from_url(own_server.url)
    assert r.config_get("appendonly")["appendonly"] == "yes"
    wf = culex.Workflow(name="restarted")
    prices = [wf.add(WfPriceJob(cents=n)) for n in range(1, 31)]
    total = wf.add(WfSumJob(), after=prices)
    last = wf.add(WfSumJob(), after=[total])
    run = wf.enqueue()
    async with running(culex.Runner(run_from=list(QUEUES))):
        for ended in (1, 10, 20):  # restarts while the prices run, the sums waiting
            await await_until(lambda: len(Journal.ends) >= ended, what=f"{ended} prices")  # noqa: B023
            own_server.stop()  # SHUTDOWN: the append-only file is synced, then it exits
            await asyncio.sleep(0.5)
            own_server.ensure_running()
            r.script_flush()
        assert await run.await_(timeout=60) == "succeeded"
    assert total.result(timeout=1) == Decimal("4.65")  # 1 + 2 + ... + 30 cents
    assert last.result(timeout=1) == total.result(timeout=1)
    r.close()
