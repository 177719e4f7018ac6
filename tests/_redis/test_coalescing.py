"""Calls made at once, sent together (culex._redis.coalescing), on real servers: which
calls went out in which write, that each caller gets its own reply or error, a lone call,
a failed write, a cancelled caller, threads, and a cluster whose nodes share a batch.

The drivers beneath are culex's own (or redis-py's, on the cluster), subclassed only to
record what each write carried; one test makes a write fail on purpose."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Sequence
from typing import Any

import pytest
import redis

from culex._redis.calls import Call
from culex._redis.coalescing import AsyncCoalescer, SyncCoalescer
from culex._redis.drivers import AsyncDriver, SyncDriver
from culex._redis.redispy import RedisPyAsyncDriver
from culex.errors import ServerError, ServerUnavailable

from ..conftest import wait_until
from ..topology import Cluster


def echo(word: str) -> Call[str]:
    return Call((), ("ECHO", word), lambda reply: reply.decode())


def incr(key: str) -> Call[int]:
    return Call((key,), ("INCR", key), int)


def hold(key: str) -> Call[Any]:
    """A call that stays on the wire until the test pushes to ``key`` (BLPOP, sent as an
    ordinary call: the coalescer sees a call on the wire, the server another client)."""
    return Call((key,), ("BLPOP", key, 5), lambda reply: reply)


class RecordingAsync(AsyncDriver):
    """culex's async driver, noting each write: ("run", [words]) or ("run_many", [...])."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.writes: list[tuple[str, list[str]]] = []

    async def run(self, call: Call[Any]) -> Any:
        self.writes.append(("run", [str(call.args[0])]))
        return await super().run(call)

    async def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        self.writes.append(("run_many", [str(call.args[0]) for call in calls]))
        return await super().run_many(calls)


class RecordingSync(SyncDriver):
    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.writes: list[tuple[str, list[str]]] = []
        self.lock = threading.Lock()

    def run(self, call: Call[Any]) -> Any:
        with self.lock:
            self.writes.append(("run", [str(call.args[0])]))
        return super().run(call)

    def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        with self.lock:
            self.writes.append(("run_many", [str(call.args[0]) for call in calls]))
        return super().run_many(calls)


pytestmark = pytest.mark.procedures


async def on_wire(shared: AsyncCoalescer, key: str) -> asyncio.Future[Any]:
    """A call of ``hold(key)``, once it is on the wire."""
    held = asyncio.ensure_future(shared.run(hold(key)))
    await asyncio.sleep(0)  # it goes at once (alone), and stays until the push
    return held


async def test_calls_made_while_one_is_on_the_wire_go_out_in_one_write(
    url: str, r: redis.Redis
) -> None:
    inner = RecordingAsync(url)
    shared = AsyncCoalescer(inner)
    try:
        held = await on_wire(shared, "hold")
        words = [f"w{i}" for i in range(50)]
        replies = await asyncio.gather(*(shared.run(echo(word)) for word in words))
        r.lpush("hold", "go")
        assert await held == [b"hold", b"go"]
    finally:
        await shared.close()
    assert replies == words  # each its own reply, in its caller's place
    assert inner.writes == [("run", ["BLPOP"]), ("run_many", ["ECHO"] * 50)]


async def test_a_lone_call_goes_at_once_and_each_caller_keeps_its_order(url: str) -> None:
    inner = RecordingAsync(url)
    shared = AsyncCoalescer(inner)
    try:
        assert await shared.run(echo("alone")) == "alone"
        assert inner.writes == [("run", ["ECHO"])]  # no batch, no wait for the loop's turn

        async def producer(name: str) -> list[int]:
            return [await shared.run(incr(f"order:{name}")) for _ in range(20)]

        counts = await asyncio.gather(*(producer(str(n)) for n in range(10)))
    finally:
        await shared.close()
    assert counts == [list(range(1, 21))] * 10  # each producer's calls ran in its order
    assert any(kind == "run_many" and len(words) > 1 for kind, words in inner.writes)


async def test_a_refused_call_fails_alone(url: str, r: redis.Redis) -> None:
    r.set("text", "not a number")
    shared = AsyncCoalescer(AsyncDriver(url))
    try:
        held = await on_wire(shared, "hold")
        results = await asyncio.gather(
            shared.run(incr("counter")),
            shared.run(incr("text")),
            shared.run(incr("counter")),
            return_exceptions=True,
        )
        r.lpush("hold", "go")
        await held
    finally:
        await shared.close()
    assert results[0] == 1 and results[2] == 2
    assert isinstance(results[1], ServerError) and "not an integer" in str(results[1])


class FailingOnce(AsyncDriver):
    """culex's async driver whose second batch fails on the wire (a fault on purpose)."""

    def __init__(self, url: str) -> None:
        super().__init__(url)
        self.batches = 0

    async def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        self.batches += 1
        if self.batches == 2:
            raise ServerUnavailable("the connection broke while the batch was on the wire")
        return await super().run_many(calls)


async def test_a_failed_write_fails_exactly_the_calls_it_carried(url: str, r: redis.Redis) -> None:
    shared = AsyncCoalescer(FailingOnce(url))
    try:
        held = await on_wire(shared, "hold")
        one = asyncio.gather(*(shared.run(incr("a")) for _ in range(3)))
        await asyncio.sleep(0)  # that batch is sent at the end of this turn
        two = asyncio.gather(*(shared.run(incr("b")) for _ in range(4)), return_exceptions=True)
        await asyncio.sleep(0)
        three = asyncio.gather(*(shared.run(incr("c")) for _ in range(5)))
        assert sorted(await one) == [1, 2, 3]
        failed = await two
        assert sorted(await three) == [1, 2, 3, 4, 5]
        r.lpush("hold", "go")
        await held
    finally:
        await shared.close()
    assert [type(error) for error in failed] == [ServerUnavailable] * 4
    assert len({id(error) for error in failed}) == 4  # an error of its own for each caller
    assert r.get("b") is None  # (this fault broke the write before it reached the server)
    assert r.get("a") == b"3" and r.get("c") == b"5"


async def test_a_caller_cancelled_before_its_batch_went_is_left_out(
    url: str, r: redis.Redis
) -> None:
    inner = RecordingAsync(url)
    shared = AsyncCoalescer(inner)
    try:
        held = await on_wire(shared, "hold")
        kept = asyncio.ensure_future(shared.run(incr("kept")))
        dropped = asyncio.ensure_future(shared.run(incr("dropped")))
        await asyncio.sleep(0)  # both joined the next batch; it is not sent yet
        dropped.cancel()
        assert await kept == 1
        with pytest.raises(asyncio.CancelledError):
            await dropped
        # One cancelled once its batch went: the others get their replies, and the
        # connection stays in step.
        batch = [
            asyncio.ensure_future(shared.run(call))
            for call in (hold("second"), echo("e1"), echo("e2"))
        ]
        await asyncio.sleep(0.05)  # the batch is on the wire, held by its BLPOP
        batch[1].cancel()
        r.lpush("second", "go")
        assert [await batch[0], await batch[2]] == [[b"second", b"go"], "e2"]
        with pytest.raises(asyncio.CancelledError):
            await batch[1]
        r.lpush("hold", "go")
        await held
        assert await shared.run(echo("after")) == "after"
    finally:
        await shared.close()
    assert r.get("kept") == b"1" and r.get("dropped") is None
    assert ("run_many", ["INCR"]) in inner.writes  # the batch went without the cancelled
    assert ("run_many", ["BLPOP", "ECHO", "ECHO"]) in inner.writes


def behind_a_held_call(
    shared: SyncCoalescer, r: redis.Redis, call: Callable[[int], None], count: int
) -> None:
    """Run ``call(n)`` in ``count`` threads while another thread's call holds the wire: they
    all wait for it, then it is let go, and every thread is joined."""
    first = threading.Thread(target=shared.run, args=(hold("hold"),))
    first.start()
    wait_until(lambda: shared._carrying, what="the first call on the wire")
    threads = [threading.Thread(target=call, args=(n,)) for n in range(count)]
    for thread in threads:
        thread.start()
    wait_until(lambda: len(shared._waiting) == count, what=f"{count} calls waiting")
    r.lpush("hold", "go")
    for thread in [first, *threads]:
        thread.join(10)


def test_threads_that_call_at_once_share_a_write(url: str, r: redis.Redis) -> None:
    inner = RecordingSync(url)
    shared = SyncCoalescer(inner)
    replies: dict[int, str] = {}

    def call(n: int) -> None:
        replies[n] = shared.run(echo(f"t{n}"))

    try:
        behind_a_held_call(shared, r, call, 8)
    finally:
        shared.close()
    assert replies == {n: f"t{n}" for n in range(8)}
    assert inner.writes == [("run", ["BLPOP"]), ("run_many", ["ECHO"] * 8)]


class FailingSync(SyncDriver):
    """culex's sync driver whose first batch fails on the wire (a fault on purpose)."""

    def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        if not getattr(self, "failed", False):
            self.failed = True
            raise ServerUnavailable("the connection broke while the batch was on the wire")
        return super().run_many(calls)


def test_a_failed_write_fails_exactly_the_threads_it_carried(url: str, r: redis.Redis) -> None:
    shared = SyncCoalescer(FailingSync(url))
    errors: dict[int, BaseException] = {}

    def call(n: int) -> None:
        try:
            shared.run(incr("failed"))
        except ServerUnavailable as exc:
            errors[n] = exc

    try:
        behind_a_held_call(shared, r, call, 3)
        assert shared.run(incr("after")) == 1  # the next call goes on
    finally:
        shared.close()
    assert sorted(errors) == [0, 1, 2] and len({id(e) for e in errors.values()}) == 3
    assert r.get("failed") is None


def test_a_thread_gets_its_own_error_and_a_lone_thread_its_reply(url: str, r: redis.Redis) -> None:
    r.set("text", "not a number")
    shared = SyncCoalescer(SyncDriver(url))
    try:
        assert shared.run(incr("n")) == 1
        with pytest.raises(ServerError, match="not an integer"):
            shared.run(incr("text"))
        assert shared.run(incr("n")) == 2  # the driver goes on
    finally:
        shared.close()


class RecordingCluster(RedisPyAsyncDriver):
    def __init__(self, url: str) -> None:
        super().__init__(url, 5.0)
        self.batches: list[int] = []

    async def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        self.batches.append(len(calls))
        return await super().run_many(calls)


async def test_calls_on_a_cluster_are_not_coalesced(cluster: Cluster) -> None:
    """A batch ends with its slowest node: on a cluster each call goes on its own, so a
    master out of reach holds up only its own calls (tests/server/test_cluster.py)."""
    inner = RecordingCluster(cluster.url)
    shared = AsyncCoalescer(inner)
    keys = [f"key:{n}" for n in range(60)]  # spread over the three masters' slots
    try:
        await shared.run(echo("warm"))  # (the slots known before the batch)
        first = asyncio.ensure_future(shared.run(incr("first")))
        counts = await asyncio.gather(*(shared.run(incr(key)) for key in keys))
        await first
    finally:
        await shared.close()
    assert counts == [1] * 60
    client = redis.RedisCluster.from_url("redis://" + cluster.nodes[0].address)
    try:
        assert all(client.get(key) == b"1" for key in keys)
        nodes = {client.get_node_from_key(key).name for key in keys}
    finally:
        client.close()
    assert len(nodes) == 3
    assert inner.batches == []  # no batch: each call went alone
