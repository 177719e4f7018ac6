"""No call waits forever: a server that stops answering (SIGSTOP) costs a caller at most
socket_timeout, past what a blocking command asks for; then culex drops the connection,
raises ServerUnavailable, and a runner and its heartbeat thread carry on once it is back.

A stopped server's kernel still accepts connections and takes what is written to them,
so nothing here is refused: every call would wait for the SIGCONT if no timeout cut it.
The SIGCONT comes only after the call returned; a timer sends it after SAFETY seconds in
case the call never returns, and the test then fails instead of hanging.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import signal
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import culex
from culex import config
from culex._redis import commands
from culex._redis.keys import queue_keys
from culex.server import configured
from culex.server.embedded import EmbeddedServer, _State

from ..conftest import await_until, private_tcp_process, running, server_ms

TIMEOUT = 0.25  # socket_timeout in these tests
SAFETY = 30.0  # seconds after which the test thaws the server itself
# Long enough that the beats missed while the server is stopped do not lose a lease
# (it is stopped until the heartbeat and the reclaim pass, every 2 s, have timed out).
LEASE = 9.0
KEYS = queue_keys("culex", "hang")


class HangJob(culex.QueuedJob):
    queue = "hang"
    n: int

    async def perform(self) -> int:
        gate = _gates.get(self.n)
        if gate is not None:  # a held task: it runs until the test opens its gate
            gate.started.set()
            await gate.opened.wait()
        return self.n


class Gate:
    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.opened = asyncio.Event()


_gates: dict[int, Gate] = {}


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[None]:
    """The process ``pid`` stopped (SIGSTOP) for the block, and thawed after it."""
    thawed = threading.Event()

    def thaw() -> None:
        thawed.set()
        os.kill(pid, signal.SIGCONT)

    safety = threading.Timer(SAFETY, thaw)
    os.kill(pid, signal.SIGSTOP)
    safety.start()
    try:
        yield
    finally:
        safety.cancel()
        os.kill(pid, signal.SIGCONT)
    assert not thawed.is_set(), "a call waited for the server to come back"


class Stoppable:
    """A private server that a test may stop for a block."""

    def __init__(self, port: int, proc: subprocess.Popen[bytes]) -> None:
        self.url = f"redis://127.0.0.1:{port}"
        self.client = redis.Redis(port=port)
        self.pid = proc.pid

    def stopped(self) -> contextlib.AbstractContextManager[None]:
        return stopped(self.pid)


@pytest.fixture
def hung(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Stoppable]:
    with private_tcp_process(tmp_path) as (port, proc):
        server = Stoppable(port, proc)
        monkeypatch.setenv("CULEX_REDIS_URL", server.url)
        monkeypatch.setenv("CULEX_SOCKET_TIMEOUT", str(TIMEOUT))
        monkeypatch.setenv("CULEX_SUCCESSFUL_JOB_TTL", "60")  # read after the runner stops
        config.reset()
        try:
            yield server
        finally:
            server.client.close()
            monkeypatch.undo()
            config.reset()


def _params(task: culex.Task) -> object:
    return json.loads(task.info()["params"])


def test_the_setting_is_checked_and_finite() -> None:
    assert config.Settings().socket_timeout == 5.0
    for bad in (0, -1, float("inf"), "5"):
        with pytest.raises(culex.ConfigurationError, match="socket_timeout"):
            culex.configure(socket_timeout=bad)


def test_enqueue_raises_when_the_server_does_not_answer(hung: Stoppable) -> None:
    HangJob(n=1).enqueue()  # a connection is open, the script loaded
    # That connection's next call may block long (it ends at once: a signal is there),
    # and the one after is bounded by socket_timeout alone again.
    hung.client.lpush(KEYS.signal, 1)
    assert configured.sync_driver().run(commands.wait_signal([KEYS.signal], SAFETY * 2))
    with hung.stopped():
        for n in (2, 3):  # on the idle connection, then on a new one
            with pytest.raises(
                culex.ServerUnavailable,
                match=rf"at {hung.url} did not answer within {TIMEOUT:g} s \(socket_timeout\)",
            ):
                HangJob(n=n).enqueue()
    # A new connection: the reply to a call that timed out (the server ran it once it was
    # back) is never read as this call's.
    assert _params(HangJob(n=4).enqueue()) == {"n": 4}


async def test_aenqueue_raises_when_the_server_does_not_answer(hung: Stoppable) -> None:
    # The first call on the connection may block long (it ends at once: a signal is
    # there), and the next one is bounded by socket_timeout alone again.
    hung.client.lpush(KEYS.signal, 1)
    driver = await configured.async_driver()
    assert await driver.run(commands.wait_signal([KEYS.signal], SAFETY * 2))
    with hung.stopped():
        for n in (2, 3):
            with pytest.raises(culex.ServerUnavailable, match=r"did not answer within"):
                await HangJob(n=n).aenqueue()
    task = await HangJob(n=4).aenqueue()
    assert json.loads((await task.ainfo())["params"]) == {"n": 4}


def test_a_blocking_call_gets_its_own_wait_plus_the_timeout(hung: Stoppable) -> None:
    waited = configured.sync_driver().run(commands.wait_signal([KEYS.signal], 4 * TIMEOUT))
    assert waited is False  # the wait ran its course: nothing signalled
    assert _blpops(hung.client) == 1


async def test_an_idle_runner_waits_longer_than_the_timeout_without_a_cut(
    hung: Stoppable, caplog: pytest.LogCaptureFixture
) -> None:
    culex.configure(idle_wait=4 * TIMEOUT)
    with caplog.at_level(logging.WARNING, logger="culex"):
        async with running(culex.Runner(run_from=["hang"])):
            await await_until(
                lambda: _blpops(hung.client) >= 1, SAFETY, what="a whole wait for work"
            )
            task = await HangJob(n=1).aenqueue()
            assert await task.aresult(timeout=SAFETY) == 1
    assert "did not answer" not in caplog.text


async def test_a_runner_and_its_heartbeat_carry_on_after_the_server_hung(
    hung: Stoppable, caplog: pytest.LogCaptureFixture
) -> None:
    """While the server is stopped the runner's wait for work, a report, a reclaim pass and
    a heartbeat all time out; once it is back, all of them carry on."""
    reported, renewed = Gate(), Gate()  # tasks 0 and 1: one ends while the server is stopped
    _gates.update({0: reported, 1: renewed})
    culex.configure(lease=LEASE)
    # (DEBUG: an outage's first failure is a WARNING, the others' details are at DEBUG)
    with caplog.at_level(logging.DEBUG, logger="culex"), _cleared(_gates):
        async with running(culex.Runner(run_from=["hang"])):
            held = [await HangJob(n=n).aenqueue() for n in (0, 1)]
            await asyncio.wait_for(renewed.started.wait(), SAFETY)
            await asyncio.wait_for(reported.started.wait(), SAFETY)
            with hung.stopped():
                reported.opened.set()
                for what in ("reporting outcomes", "reclaiming", "renew"):
                    timed_out = functools.partial(_timed_out, caplog, what)
                    await await_until(timed_out, SAFETY, what=f"{what} to time out")
                # The claimer's wait for work times out too, unless the report timed out
                # first: a runner whose outcomes are not reported claims nothing until they are
                await await_until(
                    lambda: _timed_out(caplog, "waiting for work") or _held(caplog),
                    SAFETY,
                    what="waiting for work to time out, or claiming to be held",
                )
            thawed_ms = server_ms(hung.client)
            # A lease renewed after the thaw ends later than any renewed before it.
            await await_until(
                lambda: (
                    (hung.client.zscore(KEYS.pending, held[1].id) or 0) > thawed_ms + LEASE * 1e3
                ),
                SAFETY,
                what="the heartbeat to renew a lease after the thaw",
            )
            renewed.opened.set()
            tasks = [*held, *[await HangJob(n=n).aenqueue() for n in range(2, 6)]]
            results = [await task.aresult(timeout=SAFETY) for task in tasks]
    assert results == [0, 1, 2, 3, 4, 5]
    for task in held:
        assert (await task.ainfo())["attempt"] == "1"  # neither was handed out again


def test_a_stopped_embedded_server_is_busy_not_down(tmp_path: Path) -> None:
    """Its checks time out too, and a server that does not answer counts as there (never
    given a twin on the same data folder), not as down."""
    server = EmbeddedServer(tmp_path / "data")
    server.ensure_running()
    pid = server.pid()
    assert pid is not None
    try:
        with stopped(pid):
            assert server._probe(timeout=TIMEOUT) is _State.BUSY
            assert server.status()["running"] is False
        assert server.running() and server.pid() == pid
    finally:
        server.stop()


def _held(caplog: pytest.LogCaptureFixture) -> bool:
    return "no more tasks are claimed until the outcomes are reported" in caplog.text


def _timed_out(caplog: pytest.LogCaptureFixture, what: str) -> bool:
    return any(
        what in message and "did not answer within" in message
        for message in (record.getMessage() for record in caplog.records)
    )


@contextlib.contextmanager
def _cleared(gates: dict[int, Gate]) -> Iterator[None]:
    try:
        yield
    finally:
        gates.clear()


def _blpops(client: redis.Redis) -> int:
    """How many blocking waits the server has ended (it counts one as it ends)."""
    return int(client.info("commandstats").get("cmdstat_blpop", {}).get("calls", 0))
