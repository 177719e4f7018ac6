"""Redis faults (issue 3): a runner backs off without a busy loop, keeps the tasks in its
hands, and carries on when the server serves again; enqueue raises a clear culex error.

Each test has a private server of its own: the faults (read-only, out of memory, a script
that holds the server) must not leak into the session's server.
"""

from __future__ import annotations

import asyncio
import socket
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import redis

import culex
from culex import config
from culex._redis import enqueuing
from culex._redis.calls import Call
from culex._redis.connections import AsyncConnection, ReplyError, SyncConnection
from culex._redis.drivers import server_error
from culex._redis.keys import queue_keys
from culex.server import configured
from culex.server.embedded import EmbeddedServer

from ..conftest import await_until, count_exchanges, members, running, suite_binary, wait_until

KEYS = queue_keys("culex", "fault")
BLOCK = 1.2  # seconds a fault lasts
# Calls a runner may make in one second while the server refuses it: an idle runner makes
# about 20 (a blocking wait and a claim per idle_wait); a busy loop would make thousands.
QUIET = 200


class FaultJob(culex.QueuedJob):
    queue = "fault"
    n: int
    pause: float = 0.0

    async def perform(self) -> int:
        await asyncio.sleep(self.pause)
        return self.n


@pytest.fixture
def own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[str, redis.Redis]]:
    server = EmbeddedServer(tmp_path / "data", binary=suite_binary())
    url = server.ensure_running()
    monkeypatch.setenv("CULEX_REDIS_URL", url)
    # the tests read a finished task's attempt after the runner stopped
    monkeypatch.setenv("CULEX_SUCCESSFUL_JOB_TTL", "60")
    config.reset()
    client = redis.Redis.from_url(url)
    try:
        yield url, client
    finally:
        client.close()
        server.stop()
        monkeypatch.undo()
        config.reset()


def _hold_the_server(client: redis.Redis) -> threading.Thread:
    """A script that runs for BLOCK seconds: everyone else is answered BUSY meanwhile."""
    client.config_set("busy-reply-threshold", 100)
    script = f"""
    local t = redis.call('TIME')
    local start = t[1] * 1000000 + t[2]
    repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] - start > {BLOCK * 1e6}
    return 1
    """
    holder = threading.Thread(target=client.eval, args=(script, 0))
    holder.start()

    def busy() -> bool:
        try:
            client.ping()
        except redis.ResponseError as exc:
            assert str(exc).startswith("BUSY")
            return True
        return False

    wait_until(busy, what="the server to say BUSY to others")
    return holder


def _replica_of_nobody(client: redis.Redis) -> None:
    """Make the server a replica of a port nothing listens on: it answers writes READONLY."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    client.execute_command("REPLICAOF", "127.0.0.1", str(port))


Fault = tuple[Callable[[redis.Redis], object], Callable[[redis.Redis], object], str | None]
FAULTS: dict[str, Fault] = {
    # name: (start, end, what an enqueue meanwhile raises)
    "BUSY": (_hold_the_server, lambda c: None, "BUSY"),
    "READONLY": (
        _replica_of_nobody,
        lambda c: c.execute_command("REPLICAOF", "NO", "ONE"),
        "READONLY",
    ),
    "OOM": (
        lambda c: c.config_set("maxmemory", 1),
        lambda c: c.config_set("maxmemory", 0),
        "out of memory",
    ),
    "NOSCRIPT": (lambda c: c.script_flush(), lambda c: None, None),
}


def _calls(client: redis.Redis) -> int:
    """Script calls and blocking waits the server got (answered or refused)."""
    stats = client.info("commandstats")
    return sum(
        int(stats[name].get(kind, 0))
        for name in ("cmdstat_evalsha", "cmdstat_blpop")
        if name in stats
        for kind in ("calls", "rejected_calls", "failed_calls")
    )


@pytest.mark.parametrize("fault", list(FAULTS))
async def test_a_runner_rides_out_a_fault_and_keeps_its_tasks(
    own: tuple[str, redis.Redis], fault: str
) -> None:
    url, client = own
    start, end, refusal = FAULTS[fault]
    first = await FaultJob(n=1).aenqueue()
    async with running(culex.Runner(run_from=["fault"], redis_url=url)):
        assert await first.aresult(timeout=10) == 1
        held = await FaultJob(n=2, pause=BLOCK / 2).aenqueue()
        await await_until(lambda: client.zcard(KEYS.pending), what="the runner to take it")
        before = _calls(client)
        holder = start(client)
        try:
            if refusal is not None:
                with pytest.raises(culex.ServerUnavailable, match=refusal):
                    await FaultJob(n=3).aenqueue()
            await asyncio.sleep(BLOCK)
        finally:
            if isinstance(holder, threading.Thread):
                holder.join()
            end(client)
        assert _calls(client) - before < QUIET * BLOCK
        assert await held.aresult(timeout=20) == 2  # finished, and its report got through
        after = await FaultJob(n=4).aenqueue()
        assert await after.aresult(timeout=20) == 4
    assert client.hget(KEYS.task(held.id), "attempt") == b"1"  # it ran once: lease kept


@pytest.mark.parametrize(
    ("reply", "unavailable"),
    [
        ("LOADING Redis is loading the dataset in memory", True),
        ("BUSY Redis is busy running a script", True),
        ("READONLY You can't write against a read only replica.", True),
        ("OOM command not allowed when used memory > 'maxmemory'.", True),
        ("WRONGTYPE Operation against a key holding the wrong kind of value", False),
    ],
)
def test_error_replies_are_told_apart(reply: str, unavailable: bool) -> None:
    """Error replies as the wire hands them over. LOADING cannot be made on demand here
    (the others are, above): it takes the same path."""
    error = server_error(ReplyError(reply), "redis://here")
    assert isinstance(error, culex.ServerUnavailable) is unavailable
    assert isinstance(error, culex.ServerError) and reply in str(error)


def test_lost_scripts_cost_one_more_round_trip_for_a_whole_batch(
    own: tuple[str, redis.Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, client = own
    FaultJob(n=0).enqueue()  # connected, and enqueue.lua is loaded
    client.script_flush()  # as after a restart
    counts = count_exchanges(monkeypatch, SyncConnection)
    tasks = culex.enqueue_many([FaultJob(n=i) for i in range(100)])
    # 100 refused with NOSCRIPT, then one SCRIPT LOAD and the 100 again, in one trip
    assert counts == [100, 101]
    assert client.zcard(KEYS.waiting) == 101
    assert [t.id for t in tasks] == members(client, KEYS.waiting)[1:]

    client.script_flush()
    counts.clear()
    FaultJob(n=101).enqueue()
    assert counts == [1, 2]  # one call: the same, the load and the call in one trip


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_check_behind_calls_sent_again_is_sent_again_behind_them(
    own: tuple[str, redis.Redis], mode: str
) -> None:
    """A check of the calls before it (WAITAOF behind a durable enqueue's write:
    Call.confirms) must see them run: when the server had lost their script and they go
    again, the check goes again behind them. The check here reads the task's key."""
    url, client = own
    FaultJob(n=0).enqueue()
    client.script_flush()  # as after a restart
    write = enqueuing.enqueue(
        KEYS, "checked", "FaultJob", '{"n":1}', due_ms=None, delay_ms=0, max_retries=0
    )
    check = Call((), ("EXISTS", KEYS.task("checked")), int, confirms=True)
    if mode == "sync":
        replies = configured.sync_driver(url).run_many([write, check])
    else:

        async def sent() -> list[object]:
            return await (await configured.async_driver(url)).run_many([write, check])

        replies = asyncio.run(sent())
    assert replies[0].state == "waiting"
    assert replies[1] == 1  # (sent once only, it said 0: it ran before the write)


async def test_lost_scripts_cost_one_more_round_trip_async(
    own: tuple[str, redis.Redis], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, client = own
    await FaultJob(n=0).aenqueue()
    client.script_flush()
    counts = count_exchanges(monkeypatch, AsyncConnection)
    await culex.aenqueue_many([FaultJob(n=i) for i in range(50)])
    assert counts == [50, 51]
    assert client.zcard(KEYS.waiting) == 51
