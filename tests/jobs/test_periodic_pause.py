"""Periodic jobs paused and resumed at run time: culex.periodic.pause / resume (and their
async twins), periodic_pause.lua, schedule.lua's refusal, a real runner's scheduler, and
``culex periodic pause|resume``."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterator
from datetime import timedelta

import pytest
import redis

import culex
from culex import cli, config, logs
from culex._redis import enqueuing
from culex._redis.keys import queue_keys
from culex.jobs import periodic
from culex.jobs.periodic import PeriodicJobPaused, UnknownPeriodicJob
from culex.operations.inspection import aperiodic_jobs, periodic_jobs, periodic_status
from culex.runner.scheduler import Scheduler
from culex.server import configured

from ..conftest import await_until, driver_of, members, running, server_ms, snapshot

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)


@pytest.fixture
def defined() -> Iterator[list[type[culex.Job]]]:
    """Job classes a test defines; they leave the registry when it ends."""
    jobs: list[type[culex.Job]] = []
    yield jobs
    for job in jobs:
        culex.registry.remove(job)


async def _schedule_once(*jobs: type[periodic.PeriodicJob]) -> None:
    await Scheduler(list(jobs), config.settings(), await configured.async_driver()).tick()


async def test_a_paused_job_enqueues_nothing_until_resumed_then_its_next_slot_runs(
    r: redis.Redis, defined: list[type[culex.Job]]
) -> None:
    slots: list[int] = []

    class PausableTickJob(culex.PeriodicJob):
        run_every = timedelta(seconds=1)
        run_on_start = True  # (unpaused, it would run at once)

        def perform(self) -> None:
            slots.append(int(self.task_id.rpartition(":")[2]))

    defined.append(PausableTickJob)
    keys = queue_keys("culex", PausableTickJob.queue)
    await periodic.apause(PausableTickJob)  # before any runner has seen it: a record now
    assert r.hget(keys.periodic("PausableTickJob"), "paused") == b"1"
    assert r.pttl(keys.periodic("PausableTickJob")) == -1  # a pause does not lapse
    async with running(culex.Runner(run_from=[PausableTickJob.queue])):
        # The scheduler lists a job in the same round trip as its slot's call: once it is
        # listed, that call was answered, and answered "paused".
        [row] = await await_until(aperiodic_jobs, what="the scheduler to list the job")
        assert row.paused and row.last_task == "" and row.last_run is None
        with pytest.raises(PeriodicJobPaused, match="is paused"):
            await periodic.atrigger(PausableTickJob)
        assert members(r, keys.waiting) == [] and slots == []
        record = r.hgetall(keys.periodic("PausableTickJob"))
        assert b"decided_slot" not in record and b"last_task" not in record
        resumed_at = server_ms(r)
        await periodic.aresume(PausableTickJob)
        await await_until(lambda: slots, what="the next slot to run", timeout=20)
    assert slots[0] > resumed_at  # the slots passed while paused were not caught up
    record = r.hgetall(keys.periodic("PausableTickJob"))
    assert b"paused" not in record and b"paused_at" not in record
    assert r.pttl(keys.periodic("PausableTickJob")) > 0
    [row] = await aperiodic_jobs()
    assert not row.paused and row.last_outcome in ("waiting", "pending", "succeeded")


def test_schedule_refuses_a_paused_job_s_slot_and_trigger_before_any_write(
    r: redis.Redis,
) -> None:
    d, keys = driver_of(r), queue_keys("culex", "paused_slots")
    done = d.run(enqueuing.schedule(keys, "P", "P:500", slot_ms=500, next_slot_ms=1000,
                                    overlap=False, run_new=True, max_retries=0))  # fmt: skip
    assert done.outcome == "enqueued"
    assert d.run(enqueuing.periodic_pause(keys, "P", True, record=None)) == "paused"
    before = snapshot(r)
    for slot_ms, task_id in ((1000, "P:1000"), (None, "P:trigger:x")):
        call = enqueuing.schedule(keys, "P", task_id, slot_ms=slot_ms, next_slot_ms=None,
                                  overlap=True, run_new=True, max_retries=0)  # fmt: skip
        assert d.run(call).outcome == "paused"
    assert snapshot(r) == before
    assert d.run(enqueuing.periodic_pause(keys, "P", False, record=None)) == "resumed"
    assert int(r.hget(keys.periodic("P"), "decided_slot") or 0) >= server_ms(r) - 1000
    before = snapshot(r)  # resuming a job that runs changes nothing
    assert d.run(enqueuing.periodic_pause(keys, "P", False, record=None)) == "resumed"
    assert snapshot(r) == before


async def test_pause_and_resume_by_name_need_a_record_and_refuse_bad_input(
    r: redis.Redis, defined: list[type[culex.Job]]
) -> None:
    class NamedPauseJob(culex.PeriodicJob):
        run_every = timedelta(hours=1)

    defined.append(NamedPauseJob)
    before = snapshot(r)
    with pytest.raises(UnknownPeriodicJob, match="no periodic job 'NamedPauseJob' on queue"):
        periodic.pause("NamedPauseJob", NamedPauseJob.queue)  # no runner has scheduled it
    with pytest.raises(UnknownPeriodicJob):
        await periodic.aresume("NamedPauseJob", NamedPauseJob.queue)
    with pytest.raises(TypeError, match=r"pause\('NamedPauseJob'\) needs the job's queue"):
        periodic.pause("NamedPauseJob")
    with pytest.raises(TypeError, match="resume takes a PeriodicJob class or a job name"):
        periodic.resume(42)  # type: ignore[arg-type]
    assert snapshot(r) == before
    await _schedule_once(NamedPauseJob)
    periodic.pause("NamedPauseJob", NamedPauseJob.queue)
    assert [row.paused for row in periodic_jobs()] == [True]
    [status] = periodic_status([NamedPauseJob])
    assert status["next run"] == "paused"
    periodic.resume("NamedPauseJob", NamedPauseJob.queue)
    assert [row.paused for row in periodic_jobs()] == [False]


async def test_culex_periodic_pause_and_resume(
    r: redis.Redis,
    url: str,
    defined: list[type[culex.Job]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    class CliPausedJob(culex.PeriodicJob):
        cron = "30 2 * * *"

    defined.append(CliPausedJob)
    monkeypatch.setattr(logs, "configure", lambda *args: None)  # the test's logging
    await _schedule_once(CliPausedJob)
    argv = ["periodic", "pause", "CliPausedJob", "--redis-url", url]
    assert await asyncio.to_thread(cli.main, argv) == 0
    assert capsys.readouterr().out.startswith("paused CliPausedJob: it enqueues nothing")
    assert await asyncio.to_thread(cli.main, ["periodic", "--redis-url", url]) == 0
    _, row = (re.split(r"\s{2,}", line) for line in capsys.readouterr().out.splitlines())
    assert row[:4] == ["CliPausedJob", "cli_paused_job", "cron 30 2 * * * (UTC)", "paused"]
    assert await asyncio.to_thread(cli.main, ["periodic", "trigger", "CliPausedJob"]) == 2
    assert "is paused" in capsys.readouterr().err
    argv = ["periodic", "resume", "CliPausedJob", "--queue", "cli_paused_job"]
    assert await asyncio.to_thread(cli.main, argv) == 0
    assert capsys.readouterr().out == "resumed CliPausedJob: it runs at its next slot\n"
    assert await asyncio.to_thread(cli.main, ["periodic"]) == 0
    _, row = (re.split(r"\s{2,}", line) for line in capsys.readouterr().out.splitlines())
    assert row[3] != "paused" and row[3].endswith(" 02:30:00 UTC")
    for argv in (["periodic", "pause", "NoSuchJob"], ["periodic", "resume"]):
        assert await asyncio.to_thread(cli.main, argv) == 2
    errors = capsys.readouterr().err
    assert "no single periodic job named 'NoSuchJob'" in errors and "usage:" in errors
