"""Runners of an older culex ignore pause, limits and groups: the registry says which
runner supports what (``protocol``), and culex pause, culex limit and enqueue(group=) warn
when a runner without it runs the queue."""

from __future__ import annotations

import warnings
from collections.abc import Iterator

import pytest
import redis

import culex
from culex._redis import claims
from culex.cli import main
from culex.operations import inspection
from culex.server import compatibility
from culex.server.compatibility import OlderRunnerWarning

from ..conftest import await_until, driver_of, running


class OldJob(culex.QueuedJob):
    queue = "mixed"

    def perform(self) -> None:
        pass


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    compatibility._checked.clear()  # (an enqueue's last look, kept per process)
    yield
    compatibility._checked.clear()


def record(r: redis.Redis, runner_id: str, queues: str, **fields: str) -> None:
    """A runner's record as a runner of that culex writes it (an older one: no protocol)."""
    found = {"host": "old-host", "pid": "41", "queues": queues, "version": "0.1.0", **fields}
    driver_of(r).run(claims.beat("culex", runner_id, 60_000, found))


def test_pause_and_limit_warn_of_an_older_runner_on_the_queue(r: redis.Redis) -> None:
    record(r, "old", "mixed,other")
    record(r, "new", "mixed", protocol=str(compatibility.PROTOCOL))
    with pytest.warns(OlderRunnerWarning) as warned:
        culex.pause("mixed")
    [line] = [str(w.message) for w in warned]
    assert line.startswith("1 runner(s) of an older culex run queue 'mixed' (0.1.0 on ")
    assert "old-host pid 41" in line and "ignore a pause" in line
    with pytest.warns(OlderRunnerWarning, match="limits set at run time"):
        culex.limit("mixed", concurrency=1)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        culex.resume("mixed")  # (resuming: nothing an older runner ignores)
        culex.pause("elsewhere")  # a queue no older runner runs


def test_no_warning_when_every_runner_of_the_queue_says_its_protocol(r: redis.Redis) -> None:
    record(r, "new", "mixed", protocol=str(compatibility.PROTOCOL))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        culex.pause("mixed")
        culex.limit("mixed", concurrency=1)
        OldJob().enqueue(group="g1")


async def test_a_runner_says_its_protocol_in_the_registry(r: redis.Redis) -> None:
    culex.configure(lease=0.3)
    async with running(culex.Runner(run_from=["mixed"])):
        await await_until(lambda: inspection.runners() != [], what="the runner's first beat")
        (listed,) = await inspection.arunners()
        assert listed["protocol"] == str(compatibility.PROTOCOL)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            await culex.apause("mixed")


def test_enqueue_with_a_group_warns_and_looks_again_only_a_minute_later(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    record(r, "old", "mixed")
    with pytest.warns(OlderRunnerWarning, match="ignore groups"):
        OldJob().enqueue(group="g1")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        OldJob().enqueue(group="g1")  # within the minute: no read of the registry
        OldJob().enqueue()  # without a group: none either
    monkeypatch.setattr(compatibility, "RECHECK", 0.0)  # (as if the minute had passed)
    with pytest.warns(OlderRunnerWarning):
        culex.enqueue_many([OldJob(), OldJob()], group="g2")


def test_culex_pause_and_limit_print_the_warning_as_a_line(
    r: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    record(r, "old", "mixed")
    r.sadd("culex:queues", "mixed")  # (as the runner's beat would: a queue culex has seen)
    assert main(["pause", "mixed"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("mixed: paused")
    assert out[1].startswith("warning: 1 runner(s) of an older culex run queue 'mixed'")
    assert main(["limit", "mixed", "--concurrency", "2"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert len(out) == 6 and "limits set at run time" in out[5]
