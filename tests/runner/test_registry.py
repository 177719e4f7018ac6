"""The runner registry: a runner records itself and what it runs now in the heartbeat it
already sends, disappears when it stops, and ``culex runners`` shows it."""

from __future__ import annotations

import asyncio
import os

import pytest
import redis

import culex
from culex import cli, logs
from culex.operations import inspection

from ..conftest import await_until, running

started = asyncio.Event()
release = asyncio.Event()


class SlowJob(culex.QueuedJob):
    queue = "registry"

    async def perform(self) -> None:
        started.set()
        await release.wait()


async def test_a_runner_is_listed_with_what_it_runs_and_leaves_when_it_stops(
    r: redis.Redis,
) -> None:
    started.clear()
    release.clear()
    culex.configure(lease=0.3, concurrency=3)  # a beat every 0.1 s
    assert await inspection.arunners() == []
    runner = culex.Runner(run_from=["registry"])
    async with running(runner):
        await await_until(lambda: inspection.runners() != [], what="the runner's first beat")
        (listed,) = await inspection.arunners()
        assert listed["id"] == runner.id and listed["pid"] == os.getpid()
        assert (listed["queues"], listed["concurrency"]) == (["registry"], 3)
        assert listed["tasks"] == [] and listed["beat"] > 0 and listed["started"] > 0
        task = await SlowJob().aenqueue()
        await started.wait()
        await await_until(
            lambda: [t["id"] for t in inspection.runners()[0]["tasks"]] == [task.id],
            what="the running task in the registry",
        )
        (busy,) = inspection.runners()[0]["tasks"]
        assert (busy["queue"], busy["job"], busy["attempt"]) == ("registry", "SlowJob", 1)
        release.set()
        await task.aresult(timeout=5)
        await await_until(lambda: inspection.runners()[0]["tasks"] == [], what="an idle beat")
    assert await inspection.arunners() == []  # it left the registry as it stopped
    assert not r.keys("culex:{runners}*")


async def test_a_runner_that_stops_beating_drops_out_when_its_record_expires(
    r: redis.Redis,
) -> None:
    culex.configure(lease=0.3)
    r.zadd("culex:{runners}", {"ghost": 1})  # a runner killed long ago, never cleaned up
    async with running(culex.Runner(run_from=["registry"])) as runner:
        await await_until(lambda: inspection.runners() != [], what="the runner's first beat")
        assert [x["id"] for x in inspection.runners()] == [runner.id]
        assert r.zrange("culex:{runners}", 0, -1) == [runner.id.encode()]


async def test_a_runner_lists_its_queues_again_when_their_names_were_lost(
    r: redis.Redis,
) -> None:
    culex.configure(lease=0.3)  # a beat every 0.1 s
    async with running(culex.Runner(run_from=["registry", "other"])):
        await await_until(lambda: inspection.runners() != [], what="the runner's first beat")
        r.delete("culex:queues")  # as a FLUSHALL or a restore would leave it
        await await_until(
            lambda: r.smembers("culex:queues") == {b"registry", b"other"},
            what="the queues listed again by a beat",
        )


def test_culex_runners_shows_each_runner_and_its_tasks(
    r: redis.Redis, url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(logs, "configure", lambda *args, **kwargs: None)
    r.hset(
        "culex:{runners}:runner:h:1:ab",
        mapping={
            "id": "h:1:ab", "host": "h", "pid": "1", "queues": "a,b", "concurrency": "4",
            "version": "0.1.0", "started": "1000", "beat": "2000",
            "tasks": '[{"queue": "a", "id": "t1", "job": "J", "attempt": 2, "started": 1500}]',
        },
    )  # fmt: skip
    r.zadd("culex:{runners}", {"h:1:ab": 2**40})
    assert cli.main(["runners", "--redis-url", url]) == 0
    out = capsys.readouterr().out
    assert "1 runner(s)" in out and "h:1:ab  pid 1  queues a,b  busy 1/4" in out
    assert "a<t1> J (attempt 2)" in out


async def test_queue_latency_is_the_age_of_the_oldest_ready_task(r: redis.Redis) -> None:
    task = await SlowJob().aenqueue()
    SlowJob().enqueue(delay=3600)  # scheduled: not ready, so not late
    seconds, micros = r.time()
    r.zadd("culex:{registry}:waiting", {task.id: seconds * 1000 + micros // 1000 - 5000})
    lag = await inspection.aqueue_latency(queues=["registry", "empty"])
    assert 5.0 <= lag["registry"] < 60 and lag["empty"] == 0.0
    assert inspection.queue_latency(queues=["registry"])["registry"] >= 5.0
