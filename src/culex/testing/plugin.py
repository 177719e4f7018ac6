"""culex's pytest plugin: a private server for the test session (pytest loads it through
culex's ``pytest11`` entry point).

``culex_server`` points culex at a server of the session's own (the embedded binary, on a
unix socket in the session's temporary folder: never the default data folder, never a
server you run), empties it before each test, and puts culex's settings back after it.
Under pytest-xdist each worker is a session of its own, with its own folder and server.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from .. import config
from .._redis import commands
from .._redis.drivers import SyncDriver
from ..server.embedded import EmbeddedServer


@pytest.fixture(scope="session")
def culex_session_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[EmbeddedServer]:
    """The session's server, started on first use and stopped with the session."""
    server = EmbeddedServer(tmp_path_factory.mktemp("culex-server"))
    server.ensure_running()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def culex_server(culex_session_server: EmbeddedServer) -> Iterator[EmbeddedServer]:
    """culex configured to the session's server, emptied for this test."""
    url = culex_session_server.url
    _flush(url)
    saved_env = os.environ.get("CULEX_REDIS_URL")
    saved_code = dict(config._code)
    # The environment wins over configure(): a CULEX_REDIS_URL of the user's own (a real
    # server) must not be what the test talks to.
    os.environ["CULEX_REDIS_URL"] = url
    config.configure(redis_url=url)
    try:
        yield culex_session_server
    finally:
        if saved_env is None:
            os.environ.pop("CULEX_REDIS_URL", None)
        else:
            os.environ["CULEX_REDIS_URL"] = saved_env
        config.reset()
        config.configure(**saved_code)


def _flush(url: str) -> None:
    driver = SyncDriver(url)
    try:
        driver.run(commands.flush_all())
    finally:
        driver.close()
