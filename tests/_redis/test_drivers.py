"""What every driver does (culex._redis.drivers), run the same way on each implementation.

A new driver is added to DRIVERS and must pass these as they are. The redis-py drivers run
here on one server; tests/server/test_cluster.py and tests/server/test_sentinel.py run them
on a cluster and through sentinels.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest
import redis

from culex import ServerError, ServerUnavailable
from culex._redis import commands, enqueuing, reads
from culex._redis.calls import Call
from culex._redis.drivers import AsyncDriver, AsyncDriverProtocol, SyncDriver, SyncDriverProtocol
from culex._redis.keys import queue_keys
from culex._redis.redispy import RedisPyAsyncDriver, RedisPySyncDriver

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)

KEYS = queue_keys("culex", "drivers")
DRIVERS: dict[str, tuple[Callable[[str], Any], Any]] = {
    "sync": (SyncDriver, SyncDriverProtocol),
    "async": (AsyncDriver, AsyncDriverProtocol),
    # (a short socket_timeout: these try a server they cannot reach again until it passes)
    "redis-py sync": (lambda url: RedisPySyncDriver(url, 1.0), SyncDriverProtocol),
    "redis-py async": (lambda url: RedisPyAsyncDriver(url, 1.0), AsyncDriverProtocol),
}


async def done(outcome: Any) -> Any:
    """The value of a driver's call, whether it came back at once or as an awaitable."""
    return await outcome if inspect.isawaitable(outcome) else outcome


def put(task_id: str) -> Call[enqueuing.Enqueued]:
    return enqueuing.enqueue(
        KEYS, task_id, "DriverJob", "{}", due_ms=None, delay_ms=0, max_retries=0
    )


def incr(key: str) -> Call[int]:
    return Call((), ("INCR", key), int)


@pytest.mark.parametrize("kind", list(DRIVERS))
async def test_a_driver_runs_a_call_a_batch_and_the_refused(
    kind: str, r: redis.Redis, url: str
) -> None:
    make, protocol = DRIVERS[kind]
    driver = make(url)
    assert isinstance(driver, protocol)
    assert inspect.iscoroutinefunction(driver.run) is (protocol is AsyncDriverProtocol)
    r.hset("a-hash", "f", "v")
    try:
        assert await done(driver.run(put("t1"))) == enqueuing.Enqueued("t1", "waiting", False)
        now, refused, fields, counter = await done(
            driver.run_many(
                [
                    commands.server_time(),
                    incr("a-hash"),
                    commands.read_task(KEYS, "t1"),
                    incr("n"),
                ]
            )
        )
        assert isinstance(now, int) and now > 0
        assert isinstance(refused, ServerError) and "WRONGTYPE" in str(refused)
        assert fields["state"] == "waiting" and counter == 1  # the rest of the batch ran
        with pytest.raises(ServerError, match="WRONGTYPE"):
            await done(driver.run(incr("a-hash")))
        await done(driver.close())  # its idle connections go; the driver can still be used
        assert await done(driver.run(incr("n"))) == 2
    finally:
        await done(driver.close())


@pytest.mark.parametrize("kind", list(DRIVERS))
async def test_a_driver_loads_scripts_the_server_lost(kind: str, r: redis.Redis, url: str) -> None:
    driver = DRIVERS[kind][0](url)
    try:
        await done(driver.run(put("t1")))
        r.script_flush()  # as after a restart: the call is refused with NOSCRIPT, then sent again
        assert (await done(driver.run(reads.wait(KEYS, "t1")))).state == "waiting"
        r.script_flush()
        replies = await done(
            driver.run_many([put("t2"), incr("n"), reads.wait(KEYS, "t2"), put("t3")])
        )
        assert replies == [
            enqueuing.Enqueued("t2", "waiting", False),
            1,
            replies[2],
            enqueuing.Enqueued("t3", "waiting", False),
        ]
        assert replies[2].state == "waiting" and r.get("n") == b"1"  # each call ran once
        assert r.zcard(KEYS.waiting) == 3
    finally:
        await done(driver.close())


@pytest.mark.parametrize("kind", list(DRIVERS))
async def test_a_driver_says_when_the_server_is_out_of_reach(kind: str) -> None:
    driver = DRIVERS[kind][0]("redis://127.0.0.1:1")  # nothing listens on port 1
    with pytest.raises(ServerUnavailable, match="cannot reach"):
        await done(driver.run(commands.server_time()))
    with pytest.raises(ServerUnavailable, match="cannot reach"):
        await done(driver.run_many([commands.server_time()]))
