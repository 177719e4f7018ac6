"""Prometheus metrics (culex.operations.metrics, culex metrics): scraped over HTTP from the command,
parsed with prometheus_client's own parser, checked against tasks the test enqueued and
ran on the test server."""

from __future__ import annotations

import asyncio
import re
import signal
import subprocess
import sys
import types
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import redis
from prometheus_client.parser import text_string_to_metric_families

import culex
from culex import config
from culex._redis import claims, enqueuing, reports
from culex._redis.keys import queue_keys, queues_key
from culex.jobs import enqueue
from culex.operations import metrics
from culex.operations import scrape as reading
from culex.server import configured

from ..conftest import await_until, driver_of, running
from ..topology import Cluster

QUEUE = "metered"
IDLE = "metered_idle"

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


class MeteredOkJob(culex.QueuedJob):
    queue = QUEUE

    def perform(self) -> None:
        pass


class MeteredFlakyJob(culex.QueuedJob):
    """Fails its first attempt, then succeeds at once."""

    queue = QUEUE

    def perform(self) -> None:
        if self.attempt == 1:
            raise RuntimeError("first time")

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(0)


class MeteredDeadJob(culex.QueuedJob):
    queue = QUEUE
    max_retries = 0

    def perform(self) -> None:
        raise RuntimeError("never")


class MeteredIdleJob(culex.QueuedJob):
    queue = IDLE

    def perform(self) -> None:
        pass


def parsed(text: str) -> Samples:
    return {
        (sample.name, frozenset(sample.labels.items())): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(samples: Samples, name: str, **labels: str) -> float:
    return samples[(name, frozenset(labels.items()))]


@contextmanager
def metrics_command(*flags: str) -> Iterator[str]:
    """``culex metrics --port 0`` in its own process; yields the URL it serves."""
    process = subprocess.Popen(
        [sys.executable, "-m", "culex", "metrics", "--port", "0", *flags],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stdout is not None
        line = process.stdout.readline()
        assert line.startswith("serving "), line + process.communicate(timeout=10)[1]
        yield line.split()[1]
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.communicate(timeout=30)
        finally:
            process.kill()  # (nothing when it has stopped; no process outlives its test)
            process.communicate()
    assert process.returncode == 0, "culex metrics did not stop cleanly on SIGTERM"


def scrape(url: str) -> tuple[str, Samples]:
    with urllib.request.urlopen(url, timeout=30) as response:
        return response.headers["Content-Type"], parsed(response.read().decode())


@pytest.fixture(autouse=True)
def registered_again() -> None:
    """Queues this process registered before the test emptied the server: register anew
    (a scrape reads the queues of the registry)."""
    enqueue._registered.clear()


@pytest.fixture
def url(r: redis.Redis) -> Iterator[str]:
    with metrics_command() as served:
        yield served


async def test_scraped_over_http_after_tasks_ran(r: redis.Redis, url: str) -> None:
    done = [await MeteredOkJob().aenqueue() for _ in range(2)]
    done.append(await MeteredFlakyJob().aenqueue())
    dead = await MeteredDeadJob().aenqueue()
    for _ in range(3):
        await MeteredIdleJob().aenqueue()
    await MeteredIdleJob().aenqueue(delay=3600)
    async with running(culex.Runner(run_from=[QUEUE])):
        for task in done:
            await task.aresult(timeout=30)
        await await_until(lambda: dead.astate(), what="the dead task")
        content_type, samples = scrape(url)
        assert value(samples, "culex_runners") == 1
    assert content_type == metrics.CONTENT_TYPE
    for queue, expected in {
        QUEUE: {"waiting": 0, "pending": 0, "scheduled": 0, "dead": 1},
        IDLE: {"waiting": 3, "pending": 0, "scheduled": 1, "dead": 0},
    }.items():
        found = {s: value(samples, "culex_queue_tasks", queue=queue, state=s) for s in expected}
        assert found == expected, queue
    assert value(samples, "culex_queue_latency_seconds", queue=QUEUE) == 0
    assert value(samples, "culex_queue_latency_seconds", queue=IDLE) > 0
    _, after = scrape(url)
    assert value(after, "culex_runners") == 0  # a stopped runner leaves the registry
    ended = {
        (job, outcome): value(after, "culex_tasks_total", queue=QUEUE, job=job, outcome=outcome)
        for job in ("MeteredOkJob", "MeteredFlakyJob", "MeteredDeadJob")
        for outcome in ("succeeded", "failed", "dead")
    }
    assert {key: n for key, n in ended.items() if n} == {
        ("MeteredOkJob", "succeeded"): 2,
        ("MeteredFlakyJob", "failed"): 1,
        ("MeteredFlakyJob", "succeeded"): 1,
        ("MeteredDeadJob", "dead"): 1,
    }
    timed = {
        job: value(after, "culex_task_duration_seconds_count", queue=QUEUE, job=job)
        for job in ("MeteredOkJob", "MeteredFlakyJob", "MeteredDeadJob")
    }
    assert timed == {"MeteredOkJob": 2, "MeteredFlakyJob": 2, "MeteredDeadJob": 1}
    ok = {"queue": QUEUE, "job": "MeteredOkJob"}
    assert value(after, "culex_task_duration_seconds_bucket", **ok, le="+Inf") == 2
    assert value(after, "culex_task_duration_seconds_bucket", **ok, le="300.0") == 2
    assert value(after, "culex_task_duration_seconds_sum", **ok) >= 0
    assert not [key for key in after if key[0] == "culex_tasks_total" and ("queue", IDLE) in key[1]]


def test_other_paths_are_not_served(r: redis.Redis, url: str) -> None:
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(url.replace("/metrics", "/"), timeout=30)
    assert refused.value.code == 404
    refused.value.close()


def test_an_unreachable_server_is_a_503(r: redis.Redis) -> None:
    with (
        socket_nobody_listens_on() as port,
        metrics_command("--redis-url", f"redis://127.0.0.1:{port}/0") as served,
    ):
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(served, timeout=60)
        assert refused.value.code == 503
        assert b"culex:" in refused.value.read()
        refused.value.close()


@contextmanager
def socket_nobody_listens_on() -> Iterator[int]:
    """A port bound (so no one else takes it) but not listening: connections are refused."""
    import socket

    with socket.socket() as bound:
        bound.bind(("127.0.0.1", 0))
        yield int(bound.getsockname()[1])


async def test_render_and_arender_read_the_same(r: redis.Redis) -> None:
    await MeteredIdleJob().aenqueue()
    samples = parsed(metrics.render().decode())
    again = parsed((await metrics.arender()).decode())
    assert again.keys() == samples.keys()
    steady = [key for key in samples if key[0] != "culex_queue_latency_seconds"]  # (a clock)
    assert [again[key] for key in steady] == [samples[key] for key in steady]
    assert value(samples, "culex_queue_tasks", queue=IDLE, state="waiting") == 1
    assert value(samples, "culex_runners") == 0


PAGE = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def test_the_page_examples_run(r: redis.Redis) -> None:
    """The examples of the page's Prometheus section (other sections have their own test)."""
    section = PAGE.read_text().split("\n## Prometheus\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```", section, flags=re.S | re.M)
    assert blocks
    for block in blocks:
        exec(compile(block, "metrics.md", "exec"), {})


async def round_trips() -> tuple[int, metrics.Snapshot]:
    """Drive one scrape's procedure, counting its round trips."""
    driver = await configured.async_driver(None)
    procedure = reading.snapshot_procedure(culex.settings())
    rounds = 0
    step = next(procedure)
    try:
        while True:
            rounds += 1
            assert isinstance(step, list)
            step = procedure.send(await driver.run_many(step))
    except StopIteration as finished:
        return rounds, finished.value


async def test_a_scrape_is_three_round_trips_whatever_the_queues(r: redis.Redis) -> None:
    for job in (MeteredOkJob, MeteredIdleJob):
        await job().aenqueue()
    rounds, snapshot = await round_trips()
    assert rounds == 2  # nothing counted yet: no minute of counters to add
    assert snapshot.counts[QUEUE]["waiting"] == 1
    async with running(culex.Runner(run_from=[QUEUE])):
        await (await MeteredOkJob().aenqueue()).aresult(timeout=30)
    for job in (MeteredOkJob, MeteredIdleJob):
        await job().aenqueue()
    rounds, snapshot = await round_trips()
    assert rounds == 3
    assert snapshot.totals[QUEUE, "MeteredOkJob"].succeeded == 2


SHARDED = ("emails", "reports", "images", "search")  # queues on every master of the cluster


def test_a_scrape_of_a_cluster_reads_every_shard(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CULEX_REDIS_URL", cluster.url)
    config.reset()
    try:
        for n, queue in enumerate(SHARDED, start=1):

            def body(namespace: dict[str, Any], queue: str = queue) -> None:
                namespace["queue"] = queue

            # abstract: not registered (no runner runs them here)
            job = types.new_class(f"Sharded{n}Job", (MeteredIdleJob,), {"abstract": True}, body)
            culex.enqueue_many(job() for _ in range(n))
        samples = parsed(metrics.render().decode())
    finally:
        monkeypatch.undo()
        config.reset()
    waiting = {q: value(samples, "culex_queue_tasks", queue=q, state="waiting") for q in SHARDED}
    assert waiting == {"emails": 1, "reports": 2, "images": 3, "search": 4}
    assert value(samples, "culex_runners") == 0


def test_an_idle_connection_blocks_no_scrape(r: redis.Redis, url: str) -> None:
    import socket
    from urllib.parse import urlsplit

    where = urlsplit(url)
    with (
        socket.create_connection((where.hostname, where.port)) as idle,
        socket.create_connection((where.hostname, where.port)) as half,
    ):
        half.sendall(b"GET /metr")  # a request that never ends
        # (one server thread for all: the scrape waited behind them, for ever)
        content_type, samples = scrape(url)
        assert content_type == metrics.CONTENT_TYPE
        assert ("culex_runners", frozenset()) in samples
        assert idle.fileno() >= 0  # (still open: the scrape did not wait for it to end)


def test_every_queue_is_in_the_scrape_whatever_call_round_or_part_reads_it(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """23 queues, each in another mix of states, read 2 a call, 6 a round trip and in 2
    parts at once (render: threads; arender: tasks): every queue's series, each as the
    server's sets and counters hold it, and the same text as read in one call."""
    d = driver_of(r)
    names = [f"many{i:02d}" for i in range(23)]
    day = 86_400_000
    for i, name in enumerate(names):
        keys = queue_keys("culex", name)
        r.sadd(queues_key("culex"), name)

        def put(task: str, *, delay_ms: int = 0, group: str = "", keys: Any = keys) -> None:
            d.run(enqueuing.enqueue(keys, task, "ManyJob", "{}", due_ms=None,
                                    delay_ms=delay_ms, max_retries=0, group=group))  # fmt: skip

        if i % 7 == 0:  # one running, one dead
            for task in ("running", "doomed"):
                put(task)
                d.run(claims.claim(keys, limit=1, lease_ms=60_000, promote_limit=10,
                                   dead_ttl_ms=day))  # fmt: skip
            d.run(reports.fail(keys, "doomed", 1, "boom", retry_delay_ms=None,
                               dead_ttl_ms=day, dead_max=10))  # fmt: skip
        for n in range(i % 4):
            put(f"w{n}")
        if i % 3 == 0:
            put("later", delay_ms=day)
        if i % 5 == 0:
            put("grouped", group="g")
        if i % 6 == 1:
            r.hset(keys.stats_total, mapping={"ManyJob|s2": i, "ManyJob|ms": 9})

    # a name another producer wrote that is not UTF-8, in the second part (the parts' own
    # lines are then set aside: the whole text is written as one)
    odd = "many99\udcff"
    r.sadd(queues_key("culex"), odd.encode("utf-8", "surrogateescape"))
    d.run(enqueuing.enqueue(queue_keys("culex", odd), "w", "ManyJob", "{}", due_ms=None,
                            delay_ms=0, max_retries=0))  # fmt: skip
    whole = metrics.render()
    monkeypatch.setattr(reading, "BATCH", 2)
    monkeypatch.setattr(reading, "ROUND", 6)
    assert reading._parts([*names, odd], cluster=False) == [names[:12], [*names[12:], odd]]
    texts = [metrics.render(), asyncio.run(metrics.arender())]

    def steady(text: bytes) -> list[bytes]:  # (the latency is by the clock of each scrape)
        return [line for line in text.splitlines() if b"latency_seconds{" not in line]

    for text in texts:
        assert steady(text) == steady(whole)
        samples = parsed(text.decode())
        assert value(samples, "culex_queue_tasks", queue="many99\ufffd", state="waiting") == 1
        for i, name in enumerate(names):
            keys = queue_keys("culex", name)
            sets = {"pending": keys.pending, "scheduled": keys.scheduled, "dead": keys.dead}
            found = {s: value(samples, "culex_queue_tasks", queue=name, state=s) for s in sets}
            assert found == {s: r.zcard(key) for s, key in sets.items()}, name
            waiting = r.zcard(keys.waiting) + r.zcard(keys.grouped_ready)
            assert value(samples, "culex_queue_tasks", queue=name, state="waiting") == waiting
            latency = value(samples, "culex_queue_latency_seconds", queue=name)
            assert latency >= 0 if waiting else latency == 0, name
            ended = {
                outcome: samples.get(
                    ("culex_tasks_total", frozenset({"queue": name, "job": "ManyJob",
                                                     "outcome": outcome}.items()))
                )
                for outcome in ("succeeded", "dead")
            }  # fmt: skip
            counted = i % 6 == 1 or i % 7 == 0
            assert ended == {
                "succeeded": i if i % 6 == 1 else 0 if counted else None,
                "dead": 1 if i % 7 == 0 else 0 if counted else None,
            }, name
    assert texts[0].count(b"culex_queue_tasks{") == 4 * (len(names) + 1)
    for odd_name in ("many98\udcff", "many00\udcff"):  # (odd names in both parts)
        r.sadd(queues_key("culex"), odd_name.encode("utf-8", "surrogateescape"))
    assert steady(metrics.render()) == steady(asyncio.run(metrics.arender()))
