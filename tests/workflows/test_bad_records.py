"""What a runner does with what it cannot apply: a helper loop that raises is logged at
once and started again; a malformed outbox entry is set aside with its reason (its run
fails, naming the node), and the entries after it are applied."""

from __future__ import annotations

import logging

import pytest
import redis

from culex.runner import releaser, stopping

from ..conftest import running
from .jobs import a_runner, chain


async def test_a_helper_loop_that_raises_is_logged_at_once_and_started_again(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The releaser's pass raises once (a bug): the traceback is logged while the runner
    runs, and the loop starts again, so the run still ends."""
    monkeypatch.setattr(stopping, "RESTART", (0.05, 0.05))
    real = releaser.Releaser.release
    raised: list[bool] = []

    async def once(self: releaser.Releaser, *, unfinished: bool = True) -> None:
        if not raised:
            raised.append(True)
            raise RuntimeError("a bug in one pass")
        await real(self, unfinished=unfinished)

    monkeypatch.setattr(releaser.Releaser, "release", once)
    wf, _, _ = chain()
    with caplog.at_level(logging.ERROR, logger="culex"):
        async with running(a_runner()):
            run = await wf.aenqueue()
            assert await run.await_(timeout=30) == "succeeded"
            said = [rec for rec in caplog.records if rec.getMessage().startswith("culex-release")]
            assert said and said[0].exc_info is not None
            assert "starts again" in said[0].getMessage()
    assert raised


@pytest.mark.parametrize("down", ["[5]", '[["wf-b"]]', '{"a": 1}', "not json"])
async def test_an_entry_that_cannot_be_applied_is_set_aside_and_its_run_fails(
    r: redis.Redis, down: str
) -> None:
    """A node whose `down` a foreign writer made unreadable: when it ends, its entry is set
    aside with the reason, its run fails naming the node, and another run of the same
    queues, enqueued after it, runs to its end."""
    wf, first, _ = chain()
    broken = await wf.aenqueue()
    r.hset(f"culex:{{wf-a}}:task:{first.id}", "down", down)  # (as no culex call writes it)
    healthy, _, _ = chain()
    async with running(a_runner()):
        later = await healthy.aenqueue()
        assert await later.await_(timeout=30) == "succeeded"
        assert await broken.await_(timeout=30) == "failed"
    error = broken.info()["error"]
    assert error.startswith(f"node first ({first.id}): its down ") and "[queue, id]" in error
    assert [v.fields["state"] for v in sorted(broken.nodes())] == ["succeeded", "dead"]
    assert r.zrange("culex:{wf-a}:aside", 0, -1) == [first.id.encode()]
    aside = r.hgetall(f"culex:{{wf-a}}:aside:{first.id}")
    assert aside[b"down"] == down.encode() and b"[queue, id]" in aside[b"reason"]
    assert r.zcard("culex:{wf-a}:outbox") == 0
