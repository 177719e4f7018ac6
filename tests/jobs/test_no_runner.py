"""A wait on a queue that no runner serves says so: ``task.result()`` and ``run.wait()``
warn once (culex.server.culex.NoRunnerWarning) and their TimeoutError says why; with a
live runner of the queue, not a word."""

from __future__ import annotations

import re
import threading
import warnings
from typing import ClassVar

import pytest
import redis

import culex
from culex import config
from culex.server import serving
from culex.server.procedures import Procedure

from ..conftest import running
from ..topology import Cluster


class LonelyJob(culex.QueuedJob):
    queue = "lonely"

    def perform(self) -> str:
        return "done"


class HeldJob(culex.QueuedJob):
    """Runs until the test lets it go."""

    queue = "held"
    go: ClassVar[threading.Event] = threading.Event()

    def perform(self) -> str:
        HeldJob.go.wait(30)
        return "done"


@pytest.fixture(autouse=True)
def soon(r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    """The warning is due after half a second of waiting (5 s in use)."""
    monkeypatch.setattr(serving, "WARN_AFTER", 0.5)


NEVER = (
    "no runner has ever served queue 'lonely' (none runs it now, and no task of it has "
    "ended): start one with culex run MODULE; culex runners lists those at work"
)


def test_a_wait_on_a_queue_no_runner_ever_served_warns_and_times_out_saying_so() -> None:
    task = LonelyJob().enqueue()
    with pytest.warns(culex.NoRunnerWarning) as warned, pytest.raises(TimeoutError) as late:
        task.result(timeout=2)
    assert [str(w.message) for w in warned] == [f"task lonely<{task.id}> waits on a queue no "
                                                f"runner serves: {NEVER}"]  # fmt: skip
    assert str(late.value) == f"task lonely<{task.id}> is still waiting; {NEVER}"


async def test_a_wait_after_the_last_runner_left_says_since_when() -> None:
    async with running(culex.Runner(run_from=["lonely"])):
        served = await LonelyJob().aenqueue()
        assert await served.aresult(timeout=30) == "done"
    task = await LonelyJob().aenqueue()
    with pytest.warns(culex.NoRunnerWarning), pytest.raises(TimeoutError) as late:
        await task.aresult(timeout=2)
    said = str(late.value)
    assert re.fullmatch(
        rf"task lonely<{task.id}> is still waiting; no runner has served queue 'lonely' since "
        r"\d{4}-\d\d-\d\d \d\d:\d\d UTC \(none runs it now; a task of it last ended then\): "
        r"culex runners lists those at work",
        said,
    ), said


async def test_a_wait_on_a_queue_a_live_runner_serves_says_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    looked: list[list[str]] = []
    unserved = serving.unserved

    def spied(prefix: str, queues: list[str]) -> Procedure[list[str]]:
        found = yield from unserved(prefix, queues)
        looked.append(found)
        return found

    monkeypatch.setattr(serving, "unserved", spied)
    HeldJob.go.clear()
    async with running(culex.Runner(run_from=["held"])):
        task = await HeldJob().aenqueue()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            waiting = task.aresult(timeout=30)
            threading.Timer(2, HeldJob.go.set).start()  # (past the warning's time)
            assert await waiting == "done"
    assert looked == [[]]  # the registry was read once, and found a runner
    assert not [w for w in caught if issubclass(w.category, culex.NoRunnerWarning)]


async def test_a_run_waiting_on_a_node_of_a_queue_no_runner_serves_says_which() -> None:
    wf = culex.Workflow()
    first = wf.add(LonelyJob(), name="first")
    wf.add(LonelyJob(), after=[first], name="second")
    run = wf.enqueue()
    with pytest.warns(culex.NoRunnerWarning) as warned, pytest.raises(TimeoutError) as late:
        await run.await_(timeout=2)
    assert [str(w.message) for w in warned] == [
        f"workflow run {run.id} waits on a queue no runner serves: {NEVER}"
    ]
    assert str(late.value) == f"workflow run {run.id} is still running after 2 s; {NEVER}"


def test_on_a_cluster_the_registry_and_the_queue_are_read_in_one_batch(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    # (the runner registry and the queue's counters live in other slots, maybe other masters)
    monkeypatch.setenv("CULEX_REDIS_URL", cluster.url)
    config.reset()
    try:
        task = LonelyJob().enqueue()
        with pytest.warns(culex.NoRunnerWarning), pytest.raises(TimeoutError) as late:
            task.result(timeout=2)
        assert str(late.value) == f"task lonely<{task.id}> is still waiting; {NEVER}"
    finally:
        monkeypatch.undo()
        config.reset()
