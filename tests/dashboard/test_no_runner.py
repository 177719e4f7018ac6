"""The dashboard's queue and run pages say when no runner serves a queue they wait on (the
line of culex.server.serving, which task.result() and run.wait() say too); with a live
runner of the queue, they say nothing of it."""

from __future__ import annotations

import re
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest
import redis

import culex
from culex import config

from ..conftest import running
from .conftest import serve

pytest.importorskip("starlette", reason="the dashboard needs its extra: pip install -e '.[test]'")

from culex.dashboard import app


class NoticedJob(culex.QueuedJob):
    queue = "noticed"

    def perform(self) -> str:
        return "done"


NEVER = (
    "no runner has ever served queue &#39;noticed&#39; (none runs it now, and no task of it "
    "has ended): start one with culex run MODULE; culex runners lists those at work"
)


@pytest.fixture
def base(r: redis.Redis) -> Iterator[str]:
    with serve(app(config.settings())) as url:
        yield url


def page(base: str, path: str, **query: str) -> str:
    with urllib.request.urlopen(f"{base}/{path}?{urllib.parse.urlencode(query)}") as reply:
        return str(reply.read().decode())


def notices(text: str) -> list[str]:
    return re.findall(r"<li data-no-runner>(.*?)</li>", text)


async def test_the_queue_and_run_pages_say_when_no_runner_serves_a_queue(base: str) -> None:
    NoticedJob().enqueue()
    wf = culex.Workflow()
    first = wf.add(NoticedJob(), name="first")
    wf.add(NoticedJob(), after=[first], name="second")
    run = wf.enqueue()
    assert notices(page(base, "queue", queue="noticed")) == [NEVER]
    assert notices(page(base, "workflow", id=run.id)) == [NEVER]
    async with running(culex.Runner(run_from=["noticed"])):
        assert await run.await_(timeout=30) == "succeeded"
        assert notices(page(base, "queue", queue="noticed")) == []  # (it runs it now)
    assert notices(page(base, "workflow", id=run.id)) == []  # (ended: nothing waits)
    NoticedJob().enqueue()  # (the runner has left: since when none serves it)
    [since] = notices(page(base, "queue", queue="noticed"))
    assert since.startswith("no runner has served queue &#39;noticed&#39; since ")
