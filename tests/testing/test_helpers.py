"""enqueued, perform_now and run_periodic, and the fixture they run on."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import culex
from culex.operations.inspection import periodic_records
from culex.server.embedded import EmbeddedServer, default_data_dir
from culex.testing import (
    aenqueued,
    aperform_now,
    arun_periodic,
    drain,
    enqueued,
    enqueued_tasks,
    perform_now,
    run_periodic,
)

from .jobs import (
    HOUR,
    DoubleJob,
    EveryHourJob,
    HookedJob,
    PlotJob,
    Point,
    ShakyJob,
    SumJob,
    UnstorableJob,
)


@pytest.fixture
def client(culex_server: EmbeddedServer) -> Iterator[redis.Redis]:
    with redis.Redis.from_url(culex_server.url) as connected:
        yield connected


# -- the fixture ---------------------------------------------------------------------------


def test_the_fixture_points_culex_at_a_private_server_emptied_for_each_test(
    client: redis.Redis, culex_server: EmbeddedServer
) -> None:
    assert culex_server.url.startswith("unix://")
    assert culex_server.data_dir != default_data_dir().resolve()
    assert "culex-server" in culex_server.data_dir.name  # the session's temporary folder
    assert culex.settings().redis_url == culex_server.url
    assert os.environ["CULEX_REDIS_URL"] == culex_server.url
    assert client.dbsize() == 0  # emptied (the test before left tasks behind)
    SumJob(a=1).enqueue()
    assert client.dbsize() > 0


def test_the_fixture_empties_what_the_test_before_left(client: redis.Redis) -> None:
    assert client.dbsize() == 0
    SumJob(a=1).enqueue()


def test_the_fixture_restores_the_settings_it_found(
    culex_server: EmbeddedServer, tmp_path: Path
) -> None:
    culex.configure(prefix="mine")  # set in the test: kept until the fixture ends
    assert culex.settings().prefix == "mine"
    assert culex.settings().redis_url == culex_server.url


def test_after_the_fixture_the_settings_are_as_they_were() -> None:
    assert culex.settings().prefix == "culex"


# -- enqueued ----------------------------------------------------------------------------------


def test_enqueued_finds_the_waiting_and_scheduled_tasks_whose_params_match(
    client: redis.Redis,
) -> None:
    now = SumJob(a=1, b=2).enqueue()
    later = SumJob(a=1, b=3).enqueue(delay=HOUR)
    other = SumJob(a=2).enqueue()
    assert enqueued(SumJob) == [now, other, later]  # waiting first, then scheduled
    assert enqueued(SumJob, a=1) == [now, later]
    assert enqueued(SumJob, a=1, b=3) == [later]
    assert enqueued(SumJob, b=0) == [other]  # a default compares as the job reads it
    assert enqueued(SumJob, a=5) == []
    drain(["testing_add"])
    assert enqueued(SumJob) == []  # run: no longer enqueued


def test_enqueued_compares_params_as_the_job_decodes_them(client: redis.Redis) -> None:
    class Tagged(culex.QueuedJob):
        queue = "testing_add"  # beside SumJob's tasks, which it must not count
        pair: tuple[int, int]

        def perform(self) -> None: ...

    try:
        task = Tagged(pair=(1, 2)).enqueue()
        SumJob(a=1).enqueue()
        assert enqueued(Tagged, pair=(1, 2)) == [task]  # stored as a list, read as a tuple
        assert enqueued(Tagged, pair=(2, 1)) == []
    finally:
        culex.registry.remove(Tagged)


async def test_aenqueued(client: redis.Redis) -> None:
    task = await SumJob(a=7).aenqueue()
    assert await aenqueued(SumJob, a=7) == [task]


def test_enqueued_checks_its_arguments(culex_server: EmbeddedServer) -> None:
    with pytest.raises(TypeError, match="takes a job class"):
        enqueued(SumJob(a=1))  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes a job class"):
        enqueued(int)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="SumJob has no params c"):
        enqueued(SumJob, c=1)
    with pytest.raises(TypeError, match=r"SumJob\.a"):
        enqueued(SumJob, a="one")


def test_enqueued_reads_a_bounded_number_of_tasks(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(enqueued_tasks, "MAX_TASKS", 3)
    culex.enqueue_many([SumJob(a=n) for n in range(3)])
    assert len(enqueued(SumJob)) == 3
    SumJob(a=9).enqueue(delay=HOUR)
    with pytest.raises(ValueError, match="more than 3 waiting and scheduled tasks"):
        enqueued(SumJob)


# -- perform_now -----------------------------------------------------------------------------


def test_perform_now_runs_the_hooks_and_returns_the_result(culex_server: EmbeddedServer) -> None:
    HookedJob.calls.clear()
    assert perform_now(HookedJob(word="hi")) == "HI"
    assert HookedJob.calls == ["before 1", "perform", "after"]


def test_perform_now_stores_nothing(client: redis.Redis) -> None:
    perform_now(SumJob(a=1))
    assert client.dbsize() == 0


def test_perform_now_rejects_a_param_that_does_not_survive_the_codec() -> None:
    PlotJob.calls.clear()
    job = PlotJob(point=Point(1, 2))  # fine as an object...
    with pytest.raises(ValueError, match="do not survive the trip through Redis"):
        perform_now(job)  # ...but read back from its stored form, it breaks
    assert PlotJob.calls == []


def test_perform_now_gives_a_result_that_does_not_fit_as_plain_json(
    caplog: pytest.LogCaptureFixture,
) -> None:
    assert perform_now(UnstorableJob()) == "not an int"  # as a runner stores it
    assert "UnstorableJob.perform(): expected int, got str 'not an int'" in caplog.text


def test_perform_now_raises_the_jobs_own_exception() -> None:
    from .jobs import Broken

    with pytest.raises(Broken, match="attempt 1 broke"):
        perform_now(ShakyJob())


def test_perform_now_runs_an_async_perform() -> None:
    assert perform_now(DoubleJob(n=4)) == 8


async def test_aperform_now_runs_sync_and_async_performs() -> None:
    assert await aperform_now(DoubleJob(n=5)) == 10
    assert await aperform_now(SumJob(a=2, b=2)) == 4
    with pytest.raises(RuntimeError, match="aperform_now"):
        perform_now(DoubleJob(n=1))


def test_perform_now_checks_its_argument() -> None:
    with pytest.raises(TypeError, match="takes a job object"):
        perform_now(SumJob)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes a job object"):
        asyncio.run(aperform_now("SumJob"))  # type: ignore[arg-type]


# -- run_periodic -----------------------------------------------------------------------------


def test_run_periodic_runs_the_job_now(client: redis.Redis) -> None:
    before = EveryHourJob.ran
    ran = run_periodic(EveryHourJob)
    assert (ran.job, ran.outcome, ran.result) == ("EveryHourJob", "succeeded", before + 1)
    record = periodic_records([EveryHourJob])["EveryHourJob"]
    assert record["last_outcome"] == "succeeded"


async def test_arun_periodic(client: redis.Redis) -> None:
    ran = await arun_periodic(EveryHourJob)
    assert ran.outcome == "succeeded"


def test_run_periodic_takes_a_periodic_job_class(culex_server: EmbeddedServer) -> None:
    with pytest.raises(TypeError, match="takes a PeriodicJob class"):
        run_periodic(SumJob)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes a job class"):
        run_periodic(EveryHourJob())  # type: ignore[arg-type]
