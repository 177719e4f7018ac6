"""Which driver culex uses (culex.server.configured): by URL, by the ``driver`` setting, and with
``redis_options`` for redis-py's client."""

from __future__ import annotations

from pathlib import Path

import pytest
import redis
from redis.credentials import CredentialProvider

import culex
from culex import config
from culex._redis.coalescing import AsyncCoalescer, SyncCoalescer
from culex._redis.drivers import AsyncDriver, AsyncDriverProtocol, SyncDriver, SyncDriverProtocol
from culex._redis.redispy import RedisPyAsyncDriver, RedisPySyncDriver
from culex.server import configured

from ..conftest import private_tcp_server


class PingJob(culex.QueuedJob):
    queue = "connection"
    n: int = 0


class Rotating(CredentialProvider):
    """Hands out the password when asked, as a token provider would (and counts asks)."""

    def __init__(self, password: str) -> None:
        self.password = password
        self.asked = 0

    def get_credentials(self) -> tuple[str]:
        self.asked += 1
        return (self.password,)


def beneath(shared: SyncDriverProtocol | AsyncDriverProtocol) -> object:
    """The driver that sends a shared driver's calls (the shared one coalesces them)."""
    assert isinstance(shared, SyncCoalescer | AsyncCoalescer)
    return shared.driver


async def test_the_driver_setting_chooses_the_client_for_one_server(
    r: redis.Redis, url: str
) -> None:
    assert isinstance(beneath(configured.sync_driver()), SyncDriver)
    assert isinstance(beneath(await configured.async_driver()), AsyncDriver)
    culex.configure(driver="redis-py")
    assert isinstance(beneath(configured.sync_driver()), RedisPySyncDriver)
    assert isinstance(beneath(await configured.async_driver()), RedisPyAsyncDriver)
    task = PingJob(n=1).enqueue()  # through redis-py, stored as culex's own would store it
    assert r.hget(f"culex:{{connection}}:task:{task.id}", "state") == b"waiting"
    assert (await PingJob(n=2).aenqueue()).id != task.id
    assert r.zcard("culex:{connection}:waiting") == 2


def test_a_bad_driver_is_refused() -> None:
    for bad in ("hiredis", "", None, 1):
        with pytest.raises(culex.ConfigurationError, match="driver must be one of culex"):
            culex.configure(driver=bad)


def test_redis_options_reach_redis_py_and_are_refused_with_culex_own_driver(
    r: redis.Redis, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with private_tcp_server(tmp_path, "--requirepass", "s3cret", password="s3cret") as port:
        provider = Rotating("s3cret")
        monkeypatch.setenv("CULEX_REDIS_URL", f"redis://127.0.0.1:{port}")
        culex.configure(redis_options={"credential_provider": provider})
        with pytest.raises(culex.ConfigurationError, match="redis_options are keyword"):
            PingJob().enqueue()
        culex.configure(driver="redis-py")
        task = PingJob(n=3).enqueue()  # logged in with the provider's password, not the URL's
        assert provider.asked >= 1
        other = redis.Redis(port=port, password="s3cret")
        assert other.hget(f"culex:{{connection}}:task:{task.id}", "state") == b"waiting"
        other.close()
        provider.password = "wrong"  # a refused login is said at once, not tried again
        culex.configure(socket_timeout=60)
        with pytest.raises(culex.ServerError, match="refused the login"):
            PingJob(n=4).enqueue()
        configured.sync_driver().close()


def test_redis_options_are_code_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CULEX_REDIS_OPTIONS", "{}")  # not read: objects are not text
    assert config.settings().redis_options == {}
    assert "redis_options" not in config.kinds()  # so no flag of culex run either
    with pytest.raises(culex.ConfigurationError, match="dict of redis-py client keyword"):
        culex.configure(redis_options=["credential_provider"])
