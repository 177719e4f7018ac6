"""culex's own wire to the server: URLs, TCP, login, database numbers, dropped connections."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import culex
from culex import config
from culex._redis import commands
from culex._redis.address import Address
from culex._redis.calls import Call
from culex._redis.drivers import SyncDriver
from culex._redis.keys import queue_keys
from culex.errors import ServerUnavailable
from culex.server import configured

from ..conftest import private_tcp_server, running

PASSWORD = "s3cret/with:odd@chars"


class WireJob(culex.QueuedJob):
    queue = "wire"
    n: int

    def perform(self) -> int:
        return self.n


def test_urls_are_read_and_bad_ones_refused() -> None:
    tcp = Address.parse("redis://user:p%40ss@example.com:6380/2")
    assert (tcp.host, tcp.port, tcp.db, tcp.username, tcp.password, tcp.tls) == (
        "example.com",
        6380,
        2,
        "user",
        "p@ss",
        False,
    )
    assert Address.parse("redis://localhost").port == 6379
    tls = Address.parse("rediss://h?ssl_cert_reqs=none")
    assert tls.tls and not tls.tls_verify
    unix = Address.parse("unix:///run/valkey.sock?db=5")
    assert (unix.path, unix.db) == ("/run/valkey.sock", 5)
    assert Address.parse("redis://:pw@h").handshake() == [("AUTH", "pw")]
    for bad in ("http://h", "redis://h/x", "unix://", "localhost:6379"):
        with pytest.raises(culex.ConfigurationError, match="bad Redis URL"):
            Address.parse(bad)


@pytest.fixture
def tcp_server(tmp_path: Path) -> Iterator[int]:
    """A private server on a TCP port that wants a password."""
    with private_tcp_server(tmp_path, "--requirepass", PASSWORD, password=PASSWORD) as port:
        yield port


async def test_tcp_with_a_password_and_a_database_number(
    tcp_server: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    quoted = PASSWORD.replace("/", "%2F").replace(":", "%3A").replace("@", "%40")
    url = f"redis://:{quoted}@127.0.0.1:{tcp_server}/3"
    monkeypatch.setenv("CULEX_REDIS_URL", url)  # the environment wins over configure()
    config.reset()
    sync_task = WireJob(n=1).enqueue()
    async_task = await WireJob(n=2).aenqueue()
    client = redis.Redis(port=tcp_server, password=PASSWORD, db=3)
    try:
        keys = queue_keys("culex", "wire")
        assert client.zcard(keys.waiting) == 2  # in database 3, where the URL said
        assert redis.Redis(port=tcp_server, password=PASSWORD).dbsize() == 0
        async with running(culex.Runner(run_from=["wire"], redis_url=url)):
            assert await sync_task.aresult(timeout=10) == 1
            assert await async_task.aresult(timeout=10) == 2
    finally:
        client.close()
    wrong = f"redis://:nope@127.0.0.1:{tcp_server}/3"
    with pytest.raises(culex.ServerUnavailable, match="refused the login"):
        configured.new_sync_driver(wrong).run(commands.server_time())
    monkeypatch.undo()
    config.reset()


async def test_a_connection_the_server_dropped_is_replaced(r: redis.Redis, url: str) -> None:
    sync = configured.new_sync_driver(url)
    asynchronous = await configured.new_async_driver(url)
    try:
        before = (
            sync.run(commands.server_time()),
            await asynchronous.run(commands.server_time()),
        )
        r.client_kill_filter(_type="normal", skipme=True)  # every idle connection of ours
        after = sync.run(commands.server_time()), await asynchronous.run(commands.server_time())
        assert after >= before
    finally:
        sync.close()
        await asynchronous.close()


def test_a_forked_child_talks_over_a_connection_of_its_own(r: redis.Redis, url: str) -> None:
    """Drivers are kept per URL, not per process: a child forked after its parent used one
    must open its own connection, or it would read replies meant for the parent."""
    client_id = Call((), ("CLIENT", "ID"), int)  # the server's id of the connection asking
    driver = configured.sync_driver(url)
    parent = driver.run(client_id)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: the same driver, copied by the fork
        try:
            os.write(write, str(configured.sync_driver(url).run(client_id)).encode())
        finally:
            os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    child = int(os.read(read, 64) or 0)
    os.close(read)
    assert status == 0 and child not in (0, parent)
    assert driver.run(client_id) == parent  # the parent's connection was left alone


def test_an_error_names_the_server_without_its_password() -> None:
    with socket.socket() as free:  # a port nothing listens on: refused at once
        free.bind(("127.0.0.1", 0))
        port = int(free.getsockname()[1])
    driver = SyncDriver(f"redis://user:s3cret@127.0.0.1:{port}/0")
    with pytest.raises(ServerUnavailable) as caught:
        driver.run(commands.ping())
    assert "s3cret" not in str(caught.value)
    assert f"127.0.0.1:{port}" in str(caught.value)
