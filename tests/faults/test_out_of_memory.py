"""A server out of memory (maxmemory reached, noeviction), on a server of the test's own:
every script is refused whole (the `#!lua` shebang without allow-oom), never half-run; the
runner keeps its leases (heartbeat.lua is flagged allow-oom), claims nothing while its
reports are refused, sends them again, and spends no retry and no stall on the outage."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest
import redis

import culex
from culex import config
from culex._redis.keys import queue_keys

from ..conftest import await_until, members, private_tcp_server, running, server_ms, snapshot

LEASE = 1.0
SLOTS = 5
TASKS = 20
FILLER = 40  # values of 100 kB that the test stores to take the server's memory


class SteadyJob(culex.QueuedJob):
    """Always succeeds; the first ones wait for the gate, so they end inside the outage."""

    queue = "steady"
    max_retries = 0  # a retry spent on the outage would bury it
    gate: ClassVar[asyncio.Event]
    runs: ClassVar[list[str]] = []
    n: int

    async def perform(self) -> int:
        SteadyJob.runs.append(self.task_id)
        await SteadyJob.gate.wait()
        return self.n


@pytest.fixture
def own_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[redis.Redis]:
    """A server of this test's own (its memory is taken), culex pointed at it (by the
    environment, which the session's server set too and which wins over configure())."""
    with private_tcp_server(tmp_path, "--maxmemory-policy", "noeviction") as port:
        client = redis.Redis(port=port)
        monkeypatch.setenv("CULEX_REDIS_URL", f"redis://127.0.0.1:{port}")
        config.reset()
        culex.configure(lease=LEASE, concurrency=SLOTS)
        try:
            yield client
        finally:
            client.close()
            config.reset()


def take_the_memory(r: redis.Redis) -> None:
    """Fill the server, then set maxmemory 1 MB under what it holds: it refuses every
    write that may grow memory, however the clients' own buffers come and go."""
    for i in range(FILLER):
        r.set(f"filler:{i}", b"x" * 100_000)
    used = int(r.info("memory")["used_memory"])
    r.config_set("maxmemory", used - 1_000_000)
    with pytest.raises(redis.exceptions.OutOfMemoryError):
        r.set("probe", "x")


def give_it_back(r: redis.Redis) -> None:
    r.delete(*(f"filler:{i}" for i in range(FILLER)))
    r.set("probe", "x")  # (writes are taken again)
    r.delete("probe")


def queue_state(r: redis.Redis) -> dict[bytes, Any]:
    """Every key of the queue as it is, but pending's scores (the leases, which heartbeats
    move) and the signal list (a wake-up token, which a blocking wait may pop: a pop frees
    memory, so the server takes it). The runner registry is left out too: its records
    expire while beats are refused."""
    state = {k: v for k, v in snapshot(r).items() if k.startswith(b"culex:{steady}")}
    state.pop(b"culex:{steady}:signal", None)
    pending = b"culex:{steady}:pending"
    state[pending] = sorted(r.zrange(pending, 0, -1))
    return state


async def test_tasks_that_succeed_end_succeeded_after_an_outage_of_memory(
    own_server: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    r = own_server
    SteadyJob.gate, SteadyJob.runs = asyncio.Event(), []
    tasks = [await SteadyJob(n=n).aenqueue() for n in range(TASKS)]
    with caplog.at_level(logging.WARNING, logger="culex"):
        async with running(culex.Runner(run_from=["steady"])):
            await await_until(lambda: len(SteadyJob.runs) == SLOTS, what="every slot taken")
            take_the_memory(r)
            before = queue_state(r)
            SteadyJob.gate.set()  # the running ones succeed now: their reports are refused
            await await_until(
                lambda: "no more tasks are claimed until the outcomes" in caplog.text,
                what="a refused report",
            )
            # Three leases of the server's clock: the leases held are renewed meanwhile.
            start = server_ms(r)
            await await_until(
                lambda: server_ms(r) > start + 3 * LEASE * 1000, timeout=30, what="3 leases"
            )
            assert queue_state(r) == before  # every write refused whole: nothing half-done
            assert len(SteadyJob.runs) == SLOTS  # nothing claimed during the outage
            # nor even asked for, once a report was refused (but a claim already in flight)
            held = next(i for i, rec in enumerate(caplog.records) if "no more" in rec.message)
            claims = [rec for rec in caplog.records[held:] if rec.module == "claimer"]
            assert len(claims) <= 1, [rec.message for rec in claims]
            give_it_back(r)
            results = [await task.aresult(timeout=30) for task in tasks]
    assert results == list(range(TASKS))
    assert sorted(SteadyJob.runs) == sorted(t.id for t in tasks)  # each ran once
    for task in tasks:
        info = await task.ainfo()
        assert info["state"] == "succeeded", info
        assert (info["retry_count"], info["attempt"], info.get("stalls")) == ("0", "1", None)
    assert "the outcomes are reported: claiming again" in caplog.text


class BulkyJob(culex.QueuedJob):
    queue = "bulky"
    text: str


def test_a_batch_stored_in_part_says_which_and_is_sent_again_without_duplicates(
    own_server: redis.Redis,
) -> None:
    """The server runs out of memory in the middle of an enqueue_many: the error names
    the tasks stored and those not, and the same batch sent again (same ids) stores each
    task once."""
    r = own_server
    jobs = [BulkyJob(text=f"{n:05d}" + "x" * 10_000) for n in range(500)]  # 5 MB in all
    ids = [f"bulk-{n}" for n in range(500)]
    used = int(r.info("memory")["used_memory"])
    r.config_set("maxmemory", used + 2_000_000)  # room for about 200 of them
    with pytest.raises(culex.EnqueueManyError) as raised:
        culex.enqueue_many(jobs, ids=ids)
    error = raised.value
    assert error.stored and error.failed, str(error)
    assert sorted(error.stored_ids + error.failed_ids) == sorted(ids)
    assert [job for _, job in error.failed] == [jobs[ids.index(i)] for i in error.failed_ids]
    keys = queue_keys("culex", "bulky")
    assert sorted(members(r, keys.waiting)) == sorted(error.stored_ids)  # exactly those
    assert all(r.exists(keys.task(i)) == 0 for i in error.failed_ids)  # refused whole
    assert "not stored: " + error.failed_ids[0] in str(error)
    r.config_set("maxmemory", 0)  # memory is back
    tasks = culex.enqueue_many(jobs, ids=ids)  # the same batch again
    assert [t.id for t in tasks] == ids
    assert sorted(members(r, keys.waiting)) == sorted(ids)
    for task_id, job in zip(ids, jobs, strict=True):
        assert r.hget(keys.task(task_id), "params") == job.params_json().encode()


def test_enqueue_many_checks_its_ids_before_it_sends(own_server: redis.Redis) -> None:
    jobs = [BulkyJob(text="a"), BulkyJob(text="b")]
    with pytest.raises(ValueError, match="2 jobs"):
        culex.enqueue_many(jobs, ids=["one"])
    with pytest.raises(ValueError, match="twice"):
        culex.enqueue_many(jobs, ids=["one", "one"])
    with pytest.raises(TypeError, match="list of str"):
        culex.enqueue_many(jobs, ids="ab")
    assert own_server.dbsize() == 0
