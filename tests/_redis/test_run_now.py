"""A lone call sent without a turn of the event loop (AsyncDriver.run_now, through the
coalescer and ``aenqueue()``), on a real server: answered at once, a reply that misses the
spin and the calls made meanwhile, a server that lost its scripts or dropped the
connection, and a caller cancelled while its reply is out."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

import culex
from culex._redis import drivers
from culex._redis.calls import Call
from culex._redis.coalescing import AsyncCoalescer
from culex._redis.connections import AsyncConnection
from culex._redis.drivers import AsyncDriver, Pending
from culex._redis.redispy import RedisPyAsyncDriver

from .test_coalescing import RecordingAsync, echo, hold, incr

SPIN = 0.01  # busy_poll's largest: the spin catches a reply whenever the machine allows


class RunNowJob(culex.QueuedJob):
    queue = "run_now"
    n: int = 0

    def perform(self) -> None:
        pass


async def test_a_lone_call_on_an_idle_loop_is_answered_without_a_turn_of_the_loop(
    url: str, r: redis.Redis
) -> None:
    """With the connection made and nothing else to run, run_now returns the value itself
    (the spin learns to wait long enough: nearly every call is answered so)."""
    driver = AsyncDriver(url, busy_poll=SPIN)
    try:
        assert await driver.run(echo("warm")) == "warm"  # (the connection made)
        loop = asyncio.get_running_loop()
        direct, values = 0, []
        for _ in range(50):
            got = driver.run_now(incr("counted"), loop)
            assert got is not None
            if isinstance(got, Pending):
                values.append(await got.wait)
            else:
                direct += 1
                values.append(got)
        assert values == list(range(1, 51))  # each its own reply, in order
        assert direct >= 25, direct
        loop.call_soon(lambda: None)  # the loop has a callback to run: no spin then
        assert driver.run_now(incr("counted"), loop) is None
        assert r.get("counted") == b"50"  # (nothing was sent)
    finally:
        await driver.close()


async def test_a_reply_that_misses_the_spin_is_awaited_and_calls_made_meanwhile_go_together(
    url: str, r: redis.Redis
) -> None:
    inner = RecordingAsync(url)
    inner.busy_poll = SPIN
    shared = AsyncCoalescer(inner)
    try:
        await shared.run(echo("warm"))
        inner.writes.clear()
        got = shared.run_now(hold("hold"), asyncio.get_running_loop())
        assert isinstance(got, Pending)  # (BLPOP stays on the wire until the push)
        held = asyncio.ensure_future(got.wait)
        words = [f"w{i}" for i in range(20)]
        # (made while it is on the wire: they go together, in one write of their own)
        assert await asyncio.gather(*(shared.run(echo(w)) for w in words)) == words
        assert not held.done()
        r.lpush("hold", "go")
        assert await held == [b"hold", b"go"]
        assert await shared.run(echo("alone")) == "alone"
    finally:
        await shared.close()
    # (run_now's own write is not run's; "alone" went by run_now too, or by run)
    assert inner.writes[0] == ("run_many", ["ECHO"] * 20)


async def test_a_caller_cancelled_while_its_reply_is_out_leaves_the_driver_usable(
    url: str, r: redis.Redis
) -> None:
    driver = AsyncDriver(url, busy_poll=SPIN)
    try:
        await driver.run(echo("warm"))
        got = driver.run_now(hold("never"), asyncio.get_running_loop())
        assert isinstance(got, Pending)
        waiting = asyncio.ensure_future(got.wait)
        await asyncio.sleep(0.05)
        waiting.cancel()
        await asyncio.gather(waiting, return_exceptions=True)
        assert waiting.cancelled()
        assert await driver.run(echo("after")) == "after"  # (on a new connection)
        assert await asyncio.wait_for(driver.run(incr("n")), 5) == 1
    finally:
        await driver.close()


async def test_aenqueue_after_the_server_lost_its_scripts_stores_the_task_once(
    r: redis.Redis,
) -> None:
    await RunNowJob(n=0).aenqueue()  # (the driver made, the script loaded)
    r.script_flush()
    task = await RunNowJob(n=1).aenqueue()
    assert r.zscore("culex:{run_now}:waiting", task.id) is not None
    assert r.zcard("culex:{run_now}:waiting") == 2


async def test_aenqueue_on_a_connection_the_server_dropped_stores_the_task_once(
    r: redis.Redis, monkeypatch: Any
) -> None:
    await RunNowJob(n=0).aenqueue()
    sent: list[int] = []
    real = AsyncConnection.send_now

    def counted(self: AsyncConnection, packed: bytes, count: int, loop: Any) -> Any:
        sent.append(count)
        return real(self, packed, count, loop)

    monkeypatch.setattr(AsyncConnection, "send_now", counted)
    killed = r.client_kill_filter(_type="normal", skipme=True)
    assert killed >= 1
    task = await RunNowJob(n=1).aenqueue()
    assert sent  # (it went the direct way, on the dropped connection first)
    assert r.zscore("culex:{run_now}:waiting", task.id) is not None
    assert r.zcard("culex:{run_now}:waiting") == 2


async def test_run_now_is_offered_only_by_culex_s_own_driver(url: str, r: redis.Redis) -> None:
    """Over redis-py's driver the coalescer sends nothing by run_now (its calls go by run);
    over culex's own it does."""
    own = AsyncCoalescer(AsyncDriver(url, busy_poll=SPIN))
    other = AsyncCoalescer(RedisPyAsyncDriver(url, 1.0))
    try:
        assert await own.run(echo("warm")) == "warm"
        assert await other.run(echo("warm")) == "warm"
        loop = asyncio.get_running_loop()
        assert other.run_now(incr("n"), loop) is None
        assert r.get("n") is None  # (nothing was sent)
        got = own.run_now(incr("n"), loop)
        assert got is not None
        assert (await got.wait if isinstance(got, Pending) else got) == 1
    finally:
        await own.close()
        await other.close()


async def test_without_a_spin_run_now_packs_nothing_and_the_call_is_packed_once(
    url: str, r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With busy_poll 0 run_now cannot send (no spin: likewise over TLS), so it returns
    None before packing the call (it had packed it for nothing, and run packed it again:
    a sixth of an aenqueue's own instructions); with a spin the one pack is its send's."""
    packed: list[int] = []
    real = drivers.pack

    def counted(calls: list[Any]) -> bytes:
        packed.append(len(calls))
        return real(calls)

    monkeypatch.setattr(drivers, "pack", counted)
    loop = asyncio.get_running_loop()
    for busy_poll, by_run_now in ((0.0, False), (SPIN, True)):
        driver = AsyncDriver(url, busy_poll=busy_poll)
        shared = AsyncCoalescer(driver)
        try:
            assert await shared.run(echo("warm")) == "warm"  # (the connection made)
            packed.clear()
            for sender in (driver, shared):
                got = sender.run_now(echo("x"), loop)
                assert (got is not None) is by_run_now
                if isinstance(got, Pending):  # (a reply that missed the spin)
                    assert await got.wait == "x"
            assert packed == ([1, 1] if by_run_now else [])
            packed.clear()
            assert await shared.run(incr(f"n{busy_poll}")) == 1
            assert packed == [1]
        finally:
            await shared.close()


async def test_a_reply_that_misses_the_spin_holds_a_slot_of_max_connections(
    url: str, r: redis.Redis
) -> None:
    """With max_connections=1, a call whose reply is still out after run_now holds the one
    slot: another call waits for it, and no second connection is opened meanwhile."""
    driver = AsyncDriver(url, max_connections=1, busy_poll=SPIN)
    name = "run-now-slots"
    try:
        assert await driver.run(Call((), ("CLIENT", "SETNAME", name), lambda x: x)) == b"OK"
        got = driver.run_now(hold("held"), asyncio.get_running_loop())
        assert isinstance(got, Pending)  # (BLPOP stays on the wire until the push)
        held = asyncio.ensure_future(got.wait)
        other = asyncio.ensure_future(driver.run(echo("after")))
        await asyncio.sleep(0.3)
        assert not other.done()  # (it waits for the slot the held call has)
        assert [c["name"] for c in r.client_list()].count(name) == 1
        opened = [c for c in r.client_list() if c["name"] != name and c["cmd"] != "client|list"]
        assert opened == [], opened  # (no second connection)
        r.lpush("held", "go")
        assert await held == [b"held", b"go"]
        assert await other == "after"
    finally:
        await driver.close()


async def test_a_pending_call_cancelled_while_it_waits_for_a_slot_closes_its_connection(
    url: str, r: redis.Redis
) -> None:
    """A Pending awaited late, when another call has taken the one slot meanwhile, waits
    for it; cancelled there, it closes the connection its call went on (its reply would
    otherwise arrive on a connection nobody reads, and the socket stay open)."""
    driver = AsyncDriver(url, max_connections=1, busy_poll=SPIN)
    name = "run-now-late"
    try:
        assert await driver.run(Call((), ("CLIENT", "SETNAME", name), lambda x: x)) == b"OK"
        got = driver.run_now(hold("late"), asyncio.get_running_loop())
        assert isinstance(got, Pending)
        first = asyncio.ensure_future(driver.run(hold("first")))  # (takes the slot first)
        late = asyncio.ensure_future(got.wait)
        await asyncio.sleep(0.3)
        assert not late.done() and not first.done()
        late.cancel()
        with pytest.raises(asyncio.CancelledError):
            await late
        await asyncio.sleep(0.3)
        assert name not in [c["name"] for c in r.client_list()]  # (closed)
        r.lpush("first", "go")
        assert await first == [b"first", b"go"]
    finally:
        await driver.close()
