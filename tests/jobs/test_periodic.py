"""Periodic jobs: slots (DST, months), schedule.lua, the scheduler, runners, the CLI."""

from __future__ import annotations

import asyncio
import collections
import itertools
import os
import re
import signal
import subprocess
import sys
import textwrap
import time
import types
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import redis

import culex
from culex import cli, config, logs
from culex._redis import calls, claims, enqueuing, reads, reports, scripts
from culex._redis.connections import SyncConnection
from culex._redis.drivers import SyncDriverProtocol
from culex._redis.keys import QueueKeys, periodic_jobs_key, queue_keys
from culex.errors import ServerError
from culex.jobs.periodic import (
    RECORD_KEEP_MS,
    PeriodicJob,
    UnknownPeriodicJob,
    atrigger,
    trigger,
)
from culex.jobs.schedules import Cron, Interval, Monthly, ms, wall_clock
from culex.operations.inspection import (
    STATES,
    PeriodicRow,
    aperiodic_jobs,
    aperiodic_records,
    aperiodic_status,
    aqueue_counts,
    periodic_jobs,
    periodic_records,
    periodic_status,
    queue_counts,
)
from culex.runner.scheduler import Scheduler
from culex.server import configured

from ..conftest import (
    await_until,
    count_exchanges,
    driver_of,
    field,
    members,
    running,
    score,
    server_ms,
    snapshot,
    wait_until,
)
from ..topology import Cluster

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)

BERLIN = ZoneInfo("Europe/Berlin")
HOUR = 3_600_000


def at(year: int, month: int, day: int, hour: int = 0, minute: int = 0, *, tz: Any = UTC) -> int:
    return ms(datetime(year, month, day, hour, minute, tzinfo=tz))


def berlin(slot: int | None) -> str:
    assert slot is not None
    return datetime.fromtimestamp(slot / 1000, BERLIN).isoformat()


def walk(schedule: Any, start: int, count: int) -> list[str]:
    """The next ``count`` slots after ``start``, as Berlin times."""
    slots = []
    now = start
    for _ in range(count):
        current, following = schedule.around(now)
        assert current is None or current <= now < following
        slots.append(berlin(following))
        now = following
    return slots


@pytest.fixture
def defined() -> Iterator[list[type[culex.Job]]]:
    """Job classes a test defines; they leave the registry when it ends."""
    jobs: list[type[culex.Job]] = []
    yield jobs
    for job in jobs:
        culex.registry.remove(job)


# -- slots, without I/O -----------------------------------------------------------------


def test_interval_slots_count_from_the_epoch() -> None:
    every = Interval(15 * 60_000)
    now = at(2026, 5, 4, 10, 7) + 30_000
    assert every.around(now) == (at(2026, 5, 4, 10, 0), at(2026, 5, 4, 10, 15))
    assert every.around(at(2026, 5, 4, 10, 15)) == (at(2026, 5, 4, 10, 15), at(2026, 5, 4, 10, 30))


def test_cron_spring_forward_a_time_in_the_gap_runs_once_after_it() -> None:
    # Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST; 02:30 does not exist that day.
    daily = Cron("30 2 * * *", BERLIN)
    assert walk(daily, at(2026, 3, 27, 12), 4) == [
        "2026-03-28T02:30:00+01:00",
        "2026-03-29T03:00:00+02:00",  # the first instant after the gap
        "2026-03-30T02:30:00+02:00",
        "2026-03-31T02:30:00+02:00",
    ]
    # Two times in the gap are one run, and an instant inside the change sees it as current.
    twice = Cron("30,45 2 * * *", BERLIN)
    assert walk(twice, at(2026, 3, 28, 12), 2) == [
        "2026-03-29T03:00:00+02:00",
        "2026-03-30T02:30:00+02:00",
    ]
    assert daily.around(at(2026, 3, 29, 1, 0)) == (at(2026, 3, 29, 1, 0), at(2026, 3, 30, 0, 30))
    # "*" in the hour field follows real time: nothing to skip, nothing twice.
    assert walk(Cron("*/30 * * * *", BERLIN), at(2026, 3, 29, 0, 10), 3) == [
        "2026-03-29T01:30:00+01:00",
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T03:30:00+02:00",
    ]


def test_cron_fall_back_a_time_that_occurs_twice_runs_once_at_its_first_occurrence() -> None:
    # Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:30 happens twice that night.
    daily = Cron("30 2 * * *", BERLIN)
    assert walk(daily, at(2026, 10, 23, 12), 3) == [
        "2026-10-24T02:30:00+02:00",
        "2026-10-25T02:30:00+02:00",  # once, the first 02:30
        "2026-10-26T02:30:00+01:00",
    ]
    # At 02:15 CET (the second pass through that hour) the run of 02:30 CEST is behind us.
    assert daily.around(at(2026, 10, 25, 1, 15)) == (
        at(2026, 10, 25, 0, 30),
        at(2026, 10, 26, 1, 30),
    )
    # An hourly job runs every real hour: both 02:00s, one real hour apart.
    assert walk(Cron("0 * * * *", BERLIN), at(2026, 10, 24, 23, 30), 3) == [
        "2026-10-25T02:00:00+02:00",
        "2026-10-25T02:00:00+01:00",
        "2026-10-25T03:00:00+01:00",
    ]


def test_the_dst_rule_for_wall_clock_times() -> None:
    gap = wall_clock(datetime(2026, 3, 29, 2, 30), BERLIN)
    assert gap.isoformat() == "2026-03-29T03:00:00+02:00"
    overlap = wall_clock(datetime(2026, 10, 25, 2, 30), BERLIN)
    assert overlap.isoformat() == "2026-10-25T02:30:00+02:00"
    plain = wall_clock(datetime(2026, 7, 1, 12, 0), BERLIN)
    assert plain.isoformat() == "2026-07-01T12:00:00+02:00"


def test_months_run_at_local_midnight_of_every_nth_first() -> None:
    monthly = Monthly(1, BERLIN)
    assert walk(monthly, at(2026, 1, 15), 4) == [
        "2026-02-01T00:00:00+01:00",
        "2026-03-01T00:00:00+01:00",
        "2026-04-01T00:00:00+02:00",  # summer time, still local midnight
        "2026-05-01T00:00:00+02:00",
    ]
    assert monthly.around(at(2026, 4, 1, tz=BERLIN)) == (
        at(2026, 4, 1, tz=BERLIN),
        at(2026, 5, 1, tz=BERLIN),
    )
    # Every 5 months counts from January 1970, so every runner agrees across years.
    assert walk(Monthly(5, BERLIN), at(2026, 1, 15), 3) == [
        "2026-04-01T00:00:00+02:00",
        "2026-09-01T00:00:00+02:00",
        "2027-02-01T00:00:00+01:00",
    ]


def test_months_follow_the_dst_rule_where_midnight_is_skipped_or_repeated() -> None:
    havana = ZoneInfo("America/Havana")
    monthly = Monthly(1, havana)
    # 2012-04-01: midnight CST became 01:00 CDT; the slot is the first instant after the gap.
    assert monthly.around(at(2012, 3, 20)) == (at(2012, 3, 1, 5), at(2012, 4, 1, 5))
    # 2020-11-01: 01:00 CDT went back to 00:00 CST; midnight runs at its first occurrence.
    assert monthly.around(at(2020, 10, 20))[1] == at(2020, 11, 1, 4)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("pass", "exactly one of run_every"),
        ("run_every = 60\n    cron = '* * * * *'", "exactly one of run_every"),
        ("cron = '61 * * * *'", "Bad minute"),
        ("cron = '* * * * * *'", "five fields"),
        ("cron = '0 3 * * *'\n    timezone = 'Mars/Olympus'", "unknown time zone"),
        ("run_every = timedelta(hours=1)\n    timezone = 'Europe/Berlin'", "timezone is for"),
        ("run_every = 0.5", "at most once a second"),
        ("run_every = 60\n    max_retries = 3", "never retried"),
        ("run_every = 60\n    user_id: int = 1", "take no params"),
    ],
)
def test_a_periodic_job_is_checked_when_defined(body: str, message: str) -> None:
    source = f"class BrokenPeriodicJob(culex.PeriodicJob):\n    {body}\n"
    namespace = {"culex": culex, "timedelta": timedelta}
    with pytest.raises(TypeError, match=message):
        exec(source, namespace)
    assert culex.registry.get("BrokenPeriodicJob") is None


def test_months_and_cron_definitions(defined: list[type[culex.Job]]) -> None:
    class QuarterlyReport(culex.PeriodicJob):
        run_every = culex.months(3)
        timezone = "Europe/Berlin"

    class Nightly(culex.PeriodicJob):
        cron = "0 3 * * *"
        timezone = "Europe/Berlin"

    defined += [QuarterlyReport, Nightly]
    assert QuarterlyReport.schedule_ == Monthly(3, BERLIN)
    assert str(Nightly.schedule_) == "cron 0 3 * * * (Europe/Berlin)"
    assert Nightly.queue == "nightly" and Nightly.max_retries == 0
    assert Nightly.slot_id(1234) == "Nightly:1234"
    with pytest.raises(TypeError):
        culex.months(0)


# -- schedule.lua: state before -> call -> state after ------------------------------------

Q = queue_keys("culex", "tick")


def slot_call(
    slot: int | None,
    *,
    next_slot: int | None = None,
    overlap: bool = False,
    run_new: bool = True,
    task_id: str | None = None,
) -> calls.Call[enqueuing.Scheduled]:
    return enqueuing.schedule(
        Q,
        "TickJob",
        task_id or f"TickJob:{slot}",
        slot_ms=slot,
        next_slot_ms=next_slot,
        overlap=overlap,
        run_new=run_new,
        max_retries=0,
    )


def outcome(d: SyncDriverProtocol, slot: int | None, **options: Any) -> str:
    return d.run(slot_call(slot, **options)).outcome


def test_schedule_enqueues_each_slot_once(r: redis.Redis) -> None:
    d = driver_of(r)
    assert outcome(d, 1000, next_slot=2000) == "enqueued"
    assert outcome(d, 1000, next_slot=2000) == "done"
    h = r.hgetall(Q.task("TickJob:1000"))
    assert h[b"type"] == b"TickJob" and h[b"queue"] == b"tick" and h[b"params"] == b"{}"
    assert h[b"state"] == b"waiting" and h[b"max_retries"] == b"0" and h[b"periodic"] == b"1"
    assert h[b"slot"] == b"1000"
    assert r.zscore(Q.waiting, "TickJob:1000") == float(h[b"enqueue_time"])
    assert r.llen(Q.signal) == 1
    record = r.hgetall(Q.periodic("TickJob"))
    assert record[b"last_slot"] == b"1000" and record[b"next_slot"] == b"2000"
    assert record[b"last_task"] == b"TickJob:1000"
    # an earlier slot is never enqueued once a later one was (no burst of missed slots)
    r.delete(Q.task("TickJob:1000"))
    r.delete(Q.waiting)
    assert outcome(d, 3000, next_slot=4000) == "enqueued"
    assert outcome(d, 2000, next_slot=3000) == "done"
    assert r.zrange(Q.waiting, 0, -1) == [b"TickJob:3000"]


def test_schedule_a_new_job_waits_for_its_first_slot_unless_run_new(r: redis.Redis) -> None:
    d = driver_of(r)
    assert outcome(d, 1000, next_slot=2000, run_new=False) == "new"
    assert r.zcard(Q.waiting) == 0
    assert r.hget(Q.periodic("TickJob"), "decided_slot") == b"1000"
    assert outcome(d, 1000, run_new=True) == "done"  # that slot is decided for good
    assert outcome(d, 2000, run_new=False) == "enqueued"
    r.flushall()
    assert outcome(d, 1000, run_new=True) == "enqueued"


def test_schedule_skips_a_slot_while_the_previous_run_is_unfinished(r: redis.Redis) -> None:
    d = driver_of(r)
    assert outcome(d, 1000) == "enqueued"
    assert outcome(d, 2000) == "overlap"  # the previous run is waiting
    record = r.hgetall(Q.periodic("TickJob"))
    assert record[b"skipped_slot"] == b"2000" and record[b"skip_reason"] == b"overlap"
    assert record[b"last_slot"] == b"1000"
    claimed = _claim(d, Q)
    assert outcome(d, 3000) == "overlap"  # ... now pending
    assert outcome(d, 3000, overlap=True) == "done"  # 3000 was decided: skipped
    assert outcome(d, 4000, overlap=True) == "enqueued"
    assert d.run(reports.complete(Q, [(claimed.id, claimed.attempt, "null", 1000)])) == []
    record = r.hgetall(Q.periodic("TickJob"))
    assert record[b"last_outcome"] == b"succeeded" and int(record[b"last_finished_at"]) > 0


def test_schedule_refuses_a_slot_that_is_not_due_and_trigger_runs_now(r: redis.Redis) -> None:
    d = driver_of(r)
    future = int(time.time() * 1000) + HOUR
    assert outcome(d, future) == "early"
    assert r.exists(Q.task(f"TickJob:{future}")) == 0
    assert outcome(d, 1000) == "enqueued"
    assert outcome(d, None, task_id="TickJob:trigger:x") == "enqueued"  # no overlap check
    assert r.hget(Q.periodic("TickJob"), "last_slot") == b"1000"  # slots left alone
    assert r.hget(Q.periodic("TickJob"), "last_task") == b"TickJob:trigger:x"
    assert outcome(d, None, task_id="TickJob:trigger:x") == "done"


def test_a_dead_periodic_task_is_recorded(r: redis.Redis) -> None:
    d = driver_of(r)
    outcome(d, 1000)
    claimed = _claim(d, Q)
    fail = reports.fail(
        Q, claimed.id, claimed.attempt, "boom", retry_delay_ms=None, dead_ttl_ms=HOUR, dead_max=10
    )
    assert d.run(fail) == "dead"
    assert r.hget(Q.periodic("TickJob"), "last_outcome") == b"dead"


def test_a_periodic_task_whose_runner_was_lost_is_recorded_dead(r: redis.Redis) -> None:
    d = driver_of(r)
    outcome(d, 1000)
    claimed = _claim(d, Q)
    r.zadd(Q.pending, {claimed.id: 1})  # its lease ran out: the runner is gone
    reclaim = claims.reclaim(Q, limit=10, dead_ttl_ms=HOUR, dead_max=10)
    assert d.run(reclaim) == [(claimed.id, "dead")]  # never retried
    assert r.hget(Q.periodic("TickJob"), "last_outcome") == b"dead"


def test_a_record_key_of_another_type_never_stops_a_task_s_report(r: redis.Redis) -> None:
    """The record is bookkeeping: complete, fail and reclaim leave a broken one as it is
    and still end their tasks (an error would stop a whole batch, and come back on every
    try)."""
    d = driver_of(r)
    for slot in (1000, 2000, 3000, 4000):
        assert outcome(d, slot, overlap=True) == "enqueued"
    done, done_too, failing, lost = (_claim(d, Q) for _ in range(4))
    r.zadd(Q.pending, {lost.id: 1})  # its lease ran out: the runner is gone
    r.set(Q.periodic("TickJob"), "not a record")
    batch = [(t.id, t.attempt, "null", HOUR) for t in (done, done_too)]
    assert d.run(reports.complete(Q, batch)) == []  # none refused
    fail = reports.fail(
        Q, failing.id, failing.attempt, "boom", retry_delay_ms=None, dead_ttl_ms=HOUR, dead_max=10
    )
    assert d.run(fail) == "dead"
    reclaim = claims.reclaim(Q, limit=10, dead_ttl_ms=HOUR, dead_max=10)
    assert d.run(reclaim) == [(lost.id, "dead")]
    states = [r.hget(Q.task(t.id), "state") for t in (done, done_too, failing, lost)]
    assert states == [b"succeeded", b"succeeded", b"dead", b"dead"]
    assert r.zcard(Q.pending) == 0
    assert r.get(Q.periodic("TickJob")) == b"not a record"


def _claim(d: SyncDriverProtocol, keys: QueueKeys) -> claims.Claimed:
    reply = d.run(claims.claim(keys, limit=1, lease_ms=60_000, promote_limit=10, dead_ttl_ms=HOUR))
    return reply.tasks[0]


# -- the scheduler, in this process -----------------------------------------------------


async def _tick_together(job: type[PeriodicJob], schedulers: int = 3) -> None:
    """Several runners' schedulers, each with its own connection, look at once."""
    url = configured.resolve_url(config.settings().redis_url)
    drivers = [await configured.new_async_driver(url) for _ in range(schedulers)]
    try:
        await asyncio.gather(
            *(Scheduler([job], config.settings(), driver).tick() for driver in drivers)
        )
    finally:
        for driver in drivers:
            await driver.close()


def _task_ids(r: redis.Redis, job: type[PeriodicJob]) -> list[str]:
    keys = queue_keys("culex", job.queue)
    found = r.scan_iter(match=f"{keys.task_prefix}*", count=1000)
    return sorted(key.decode()[len(keys.task_prefix) :] for key in found)


def _current_hour(r: redis.Redis) -> int:
    seconds, micros = r.time()
    now = seconds * 1000 + micros // 1000
    return now - now % HOUR


def _one_slot_now(ids: list[str], r: redis.Redis, before: int) -> int:
    """The slot of the one task in ``ids``: the hour now (or ``before``, had one just begun)."""
    [task_id] = ids
    slot = int(task_id.rsplit(":", 1)[1])
    assert slot in (before, _current_hour(r))
    return slot


async def test_run_on_start_runs_once_however_many_runners_start(
    r: redis.Redis, defined: list[type[culex.Job]]
) -> None:
    class WarmCacheJob(culex.PeriodicJob):
        run_every = timedelta(hours=1)
        run_on_start = True

    class HourlyJob(culex.PeriodicJob):
        run_every = timedelta(hours=1)

    defined += [WarmCacheJob, HourlyJob]
    hour = _current_hour(r)
    await _tick_together(WarmCacheJob)
    await _tick_together(WarmCacheJob)  # runners restarting within the slot: nothing more
    _one_slot_now(_task_ids(r, WarmCacheJob), r, hour)
    # without run_on_start, a new job waits for its first slot
    await _tick_together(HourlyJob)
    assert _task_ids(r, HourlyJob) == []
    record_key = queue_keys("culex", HourlyJob.queue).periodic("HourlyJob")
    record = r.hgetall(record_key)
    decided_slot = field(r, record_key, "decided_slot").decode()
    decided = _one_slot_now([f"HourlyJob:{decided_slot}"], r, hour)
    assert record[b"next_slot"] == str(decided + HOUR).encode()


async def test_after_a_long_outage_one_catch_up_run_not_a_burst(
    r: redis.Redis, defined: list[type[culex.Job]]
) -> None:
    class ReportJob(culex.PeriodicJob):
        run_every = timedelta(hours=1)

    defined.append(ReportJob)
    hour = _current_hour(r)
    long_ago = hour - 48 * HOUR  # every runner was down for two days of hourly slots
    r.hset(
        queue_keys("culex", ReportJob.queue).periodic("ReportJob"),
        mapping={"decided_slot": long_ago, "last_slot": long_ago},
    )
    await _tick_together(ReportJob)
    await _tick_together(ReportJob)
    _one_slot_now(_task_ids(r, ReportJob), r, hour)  # one run: the latest due slot only


async def test_a_failure_goes_to_dead_without_retry_and_the_next_slot_runs(
    r: redis.Redis, defined: list[type[culex.Job]]
) -> None:
    runs: list[str] = []

    class FlakyTickJob(culex.PeriodicJob):
        run_every = timedelta(seconds=1)
        run_on_start = True
        overlap = True  # the start may be a moment before a slot: the failed run still pending

        def perform(self) -> None:
            runs.append(self.task_id)
            if len(runs) == 1:
                raise RuntimeError("the first run breaks")

    defined.append(FlakyTickJob)
    record_key = queue_keys("culex", FlakyTickJob.queue).periodic("FlakyTickJob")
    async with running(culex.Runner(run_from=[FlakyTickJob.queue])):
        await await_until(
            lambda: r.hget(record_key, "last_outcome") == b"succeeded", what="a run to succeed"
        )
    first, second = runs[:2]
    info = await culex.Task(first, FlakyTickJob.queue).ainfo()
    assert info["state"] == "dead" and info["attempt"] == "1"
    assert "the first run breaks" in info["last_error"]
    assert int(second.split(":")[1]) - int(first.split(":")[1]) == 1000  # the next slot
    assert r.hget(record_key, "last_outcome") == b"succeeded"


async def test_a_named_periodic_job_goes_by_its_name_in_slots_records_and_claims(
    r: redis.Redis, defined: list[type[culex.Job]]
) -> None:
    class NamedTickJob(culex.PeriodicJob):
        name = "ops.NamedTick"
        run_every = timedelta(hours=1)

        def perform(self) -> str:
            return "ticked"

    defined.append(NamedTickJob)
    assert NamedTickJob.slot_id(1000) == "ops.NamedTick:1000"
    task = await asyncio.to_thread(trigger, NamedTickJob)
    assert task.id.startswith("ops.NamedTick:trigger:")
    async with running(culex.Runner(run_from=[NamedTickJob.queue], concurrency=1)):
        assert await task.aresult(timeout=10) == "ticked"  # the runner found it by its name
    records = await asyncio.to_thread(periodic_records, [NamedTickJob])
    assert records["ops.NamedTick"]["last_task"] == task.id
    assert r.hget(queue_keys("culex", NamedTickJob.queue).task(task.id), "type") == b"ops.NamedTick"


async def test_trigger_and_the_periodic_reads_have_async_twins(
    r: redis.Redis, defined: list[type[culex.Job]]
) -> None:
    class TwinTickJob(culex.PeriodicJob):
        run_every = timedelta(hours=1)

        def perform(self) -> None: ...

    defined.append(TwinTickJob)
    task = await atrigger(TwinTickJob)
    assert task.id.startswith("TwinTickJob:trigger:") and task.job is TwinTickJob
    assert await task.astate() == culex.TaskState.WAITING
    records = await aperiodic_records([TwinTickJob])
    assert records["TwinTickJob"]["last_task"] == task.id
    assert records == await asyncio.to_thread(periodic_records, [TwinTickJob])
    [status] = await aperiodic_status([TwinTickJob])
    assert status["job"] == "TwinTickJob" and status["last outcome"] == "waiting"
    assert [status] == await asyncio.to_thread(periodic_status, [TwinTickJob])
    counts = await aqueue_counts()
    assert counts[TwinTickJob.queue] == {"waiting": 1, "pending": 0, "scheduled": 0, "dead": 0}
    assert counts == await asyncio.to_thread(queue_counts)
    assert await aqueue_counts(queues=["nowhere"]) == {"nowhere": dict.fromkeys(STATES, 0)}


# -- runner processes and the CLI -------------------------------------------------------

TICK_JOBS = textwrap.dedent(
    """
    import os
    from datetime import timedelta

    import culex

    class TickJob(culex.PeriodicJob):
        run_every = timedelta(seconds=1)
        overlap = True  # a run held by the killed runner must not hold back later slots

        def perform(self) -> None:
            with open(os.environ["TICK_LOG"], "a") as log:
                log.write(f"{self.task_id} {os.getpid()}\\n")

    class NightlyJob(culex.PeriodicJob):
        cron = "30 2 * * *"
        timezone = "Europe/Berlin"
    """
)


def culex_command(*args: str) -> list[str]:
    return [sys.executable, "-m", "culex", "--log-level", "WARNING", *args]


def _logged(log: Path) -> list[str]:
    return [line.split()[0] for line in log.read_text().splitlines()] if log.exists() else []


def _wait_for_slots(log: Path, count: int, procs: list[subprocess.Popen[bytes]]) -> None:
    def ran() -> bool:
        assert all(p.poll() is None for p in procs), "a runner exited"
        return len(set(_logged(log))) >= count

    wait_until(ran, 60, what=f"{count} slots to run", every=0.05)


def test_three_runner_processes_one_task_per_slot_also_when_one_is_killed(
    r: redis.Redis, tmp_path: Path
) -> None:
    (tmp_path / "tick_jobs.py").write_text(TICK_JOBS)
    log = tmp_path / "ticks.log"
    env = {
        **os.environ,
        "TICK_LOG": str(log),
        "CULEX_SUCCESSFUL_JOB_TTL": "600",  # keep finished tasks, to count them
        "CULEX_GRACE_PERIOD": "5",
    }
    procs = [
        subprocess.Popen(
            culex_command("run", "tick_jobs"), cwd=tmp_path, env=env, stderr=subprocess.DEVNULL
        )
        for _ in range(3)
    ]
    try:
        _wait_for_slots(log, 5, procs)
        procs[0].send_signal(signal.SIGKILL)
        procs[0].wait(timeout=10)
        killed_at = len(set(_logged(log)))
        _wait_for_slots(log, killed_at + 7, procs[1:])
    finally:
        for proc in procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        codes = [_stopped(proc) for proc in procs]
    assert codes == [-signal.SIGKILL, 0, 0]  # the survivors stopped gracefully
    keys = queue_keys("culex", "tick_job")
    slots = sorted(int(task_id.split(":")[1]) for task_id in _task_ids_of(r, keys))
    assert len(slots) >= 12
    assert [b - a for a, b in itertools.pairwise(slots)] == [1000] * (len(slots) - 1)
    runs = [line.split() for line in log.read_text().splitlines()]
    assert set(collections.Counter(task_id for task_id, _ in runs).values()) == {1}  # never twice
    ran_by = dict(runs)
    killed = str(procs[0].pid)
    for slot in slots:
        task_id = f"TickJob:{slot}"
        state = r.hget(keys.task(task_id), "state")
        if state == b"succeeded":
            assert task_id in ran_by
        elif state == b"pending":  # held by the killed runner (it may have run it, unreported)
            assert ran_by.get(task_id, killed) == killed
        else:  # enqueued as the other runners were stopping
            assert state == b"waiting" and task_id not in ran_by, (task_id, state)
    assert sum(r.hget(keys.task(f"TickJob:{slot}"), "state") != b"succeeded" for slot in slots) <= 3


def _stopped(proc: subprocess.Popen[bytes]) -> int:
    try:
        return proc.wait(timeout=30)
    except subprocess.TimeoutExpired:  # never leave a runner behind on the session's server
        proc.kill()
        return proc.wait()


def _task_ids_of(r: redis.Redis, keys: QueueKeys) -> list[str]:
    found = r.scan_iter(match=f"{keys.task_prefix}*", count=1000)
    return [key.decode()[len(keys.task_prefix) :] for key in found]


def test_culex_periodic_lists_the_jobs_and_trigger_enqueues_one_run(
    r: redis.Redis, tmp_path: Path
) -> None:
    (tmp_path / "tick_jobs.py").write_text(TICK_JOBS)

    def command(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(culex_command(*args), cwd=tmp_path, capture_output=True, text=True)

    triggered = command("periodic", "trigger", "NightlyJob", "tick_jobs")
    assert triggered.returncode == 0, triggered.stderr
    assert triggered.stdout.startswith("enqueued NightlyJob as task nightly_job<NightlyJob:")
    keys = queue_keys("culex", "nightly_job")
    [task_id] = members(r, keys.waiting)
    listed = command("periodic", "tick_jobs")
    assert listed.returncode == 0, listed.stderr
    header, *rows = (re.split(r"\s{2,}", line) for line in listed.stdout.splitlines())
    assert header == ["job", "queue", "schedule", "next run", "last run", "last outcome"]
    tick, nightly = sorted(rows, reverse=True)
    assert tick == ["TickJob", "tick_job", "every 0:00:01", tick[3], "never", "-"]
    assert nightly[:3] == ["NightlyJob", "nightly_job", "cron 30 2 * * * (Europe/Berlin)"]
    assert nightly[3].endswith(" 02:30:00 CEST") or nightly[3].endswith(" 02:30:00 CET")
    assert nightly[5] == "waiting"  # the triggered run has not run yet
    d = driver_of(r)
    claimed = _claim(d, keys)
    assert claimed.id == task_id
    d.run(reports.complete(keys, [(claimed.id, claimed.attempt, "null", 1000)]))
    listed = command("periodic", "tick_jobs")
    nightly_line = next(x for x in listed.stdout.splitlines() if x.startswith("NightlyJob"))
    assert re.split(r"\s{2,}", nightly_line)[5] == "succeeded"
    unknown = command("periodic", "trigger", "NoSuchJob", "tick_jobs")
    assert unknown.returncode == 2
    assert "no periodic job named 'NoSuchJob'" in unknown.stderr


async def test_a_runner_schedules_only_with_run_cron_scheduler(
    r: redis.Redis, defined: list[type[culex.Job]]
) -> None:
    class QuietJob(culex.PeriodicJob):
        run_every = timedelta(hours=1)

    defined.append(QuietJob)

    async def helper_names() -> set[str]:
        def started() -> set[str] | None:
            names = {task.get_name() for task in asyncio.all_tasks()}
            return names if "culex-reporter" in names else None

        return await await_until(started, what="the runner to start", every=0.001)

    async with running(culex.Runner(run_from=[QuietJob.queue])):
        assert "culex-periodic" in await helper_names()
    culex.configure(run_cron_scheduler=False)
    async with running(culex.Runner(run_from=[QuietJob.queue])):
        assert "culex-periodic" not in await helper_names()
    async with running(culex.Runner(run_from=["elsewhere"])):  # not its queue: not its job
        assert "culex-periodic" not in await helper_names()


def test_the_docs_examples_run(r: redis.Redis, capsys: pytest.CaptureFixture[str]) -> None:
    page = Path(__file__).resolve().parents[2] / "docs" / "periodic.md"
    blocks = re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M)
    module = types.ModuleType("culex_periodic_docs")
    sys.modules[module.__name__] = module
    try:
        for block in blocks:
            exec(compile(block, str(page), "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
        for job in list(culex.registry):
            if job.__module__ == module.__name__:
                culex.registry.remove(job)
    assert "BrokenJob.timezone: unknown time zone 'Europe/Berlim'\n" in capsys.readouterr().out
    assert str(module.NightlyReportJob.schedule_) == "cron 30 2 * * * (Europe/Berlin)"
    assert module.InvoiceJob.schedule_ == Monthly(1, ZoneInfo("America/New_York"))
    assert module.CleanupJob.schedule_ == Interval(300_000)
    record = queue_keys("culex", "cleanup_job").periodic("CleanupJob")  # the test's run
    assert field(r, record, "last_task").startswith(b"CleanupJob:trigger:")
    assert field(r, record, "last_outcome") == b"succeeded"


# -- periodic jobs known without their classes: records, the registry, trigger by name ------

RECORD = (("job", "TickJob"), ("queue", "tick"), ("schedule", "every 0:00:01"), ("timezone", ""))


def test_schedule_describes_the_job_on_its_record_and_keeps_it_a_week_past_its_next_slot(
    r: redis.Redis,
) -> None:
    d = driver_of(r)
    now = server_ms(r)
    slot, following = now - now % 1000, now - now % 1000 + 1000
    call = enqueuing.schedule(
        Q, "TickJob", f"TickJob:{slot}", slot_ms=slot, next_slot_ms=following, overlap=False,
        run_new=False, max_retries=0, record=RECORD,
    )  # fmt: skip
    assert d.run(call).outcome == "new"
    assert {k: field(r, Q.periodic("TickJob"), k).decode() for k, _ in RECORD} == dict(RECORD)
    assert r.pexpiretime(Q.periodic("TickJob")) == following + RECORD_KEEP_MS
    # a slot without a next one (a cron expression that stops): a week after now
    call = enqueuing.schedule(
        Q, "TickJob", f"TickJob:{following}", slot_ms=1000, next_slot_ms=None, overlap=False,
        run_new=False, max_retries=0,
    )  # fmt: skip
    before = server_ms(r)
    assert d.run(call).outcome == "done"
    expiry = r.pexpiretime(Q.periodic("TickJob"))
    assert before + RECORD_KEEP_MS <= expiry <= server_ms(r) + RECORD_KEEP_MS


def test_a_trigger_by_name_needs_a_record_and_is_marked_manual(r: redis.Redis) -> None:
    d = driver_of(r)

    def by_name(task_id: str) -> calls.Call[enqueuing.Scheduled]:
        return enqueuing.schedule(
            Q, "TickJob", task_id, slot_ms=None, next_slot_ms=None, overlap=True,
            run_new=False, max_retries=0,
        )  # fmt: skip

    before = snapshot(r)
    assert d.run(by_name("TickJob:trigger:a")).outcome == "unknown"
    assert snapshot(r) == before  # refused: nothing written
    assert outcome(d, 1000, next_slot=2000) == "enqueued"
    assert r.hget(Q.task("TickJob:1000"), "trigger") is None  # a slot's task is not marked
    expiry = r.pexpiretime(Q.periodic("TickJob"))
    assert d.run(by_name("TickJob:trigger:a")).outcome == "enqueued"
    task = r.hgetall(Q.task("TickJob:trigger:a"))
    assert task[b"trigger"] == b"manual" and task[b"periodic"] == b"1" and task[b"slot"] == b""
    assert r.pexpiretime(Q.periodic("TickJob")) == expiry  # the record's life is the scheduler's
    assert r.hget(Q.periodic("TickJob"), "last_slot") == b"1000"  # the slots left alone
    # a trigger by class may create the record: it ends too
    r.delete(Q.periodic("TickJob"))
    assert outcome(d, None, task_id="TickJob:trigger:b") == "enqueued"
    assert 0 < r.pttl(Q.periodic("TickJob")) <= RECORD_KEEP_MS


def test_schedule_refuses_record_fields_that_are_not_pairs_before_any_write(
    r: redis.Redis,
) -> None:
    call = enqueuing.schedule(
        Q, "TickJob", "TickJob:1000", slot_ms=1000, next_slot_ms=2000, overlap=False,
        run_new=True, max_retries=0,
    )  # fmt: skip
    odd = call._replace(args=(*call.args, "schedule"))
    before = snapshot(r)
    with pytest.raises(ServerError, match="pairs"):
        driver_of(r).run(odd)
    assert snapshot(r) == before


def test_read_periodic_reads_a_record_with_its_last_task_s_state(r: redis.Redis) -> None:
    d = driver_of(r)
    assert d.run(reads.read_periodic(Q, "TickJob")) == ({}, "")
    assert outcome(d, 1000, next_slot=2000) == "enqueued"
    read = d.run(reads.read_periodic(Q, "TickJob"))
    assert read.last_state == "waiting" and read.record["last_task"] == "TickJob:1000"
    claimed = _claim(d, Q)
    assert d.run(reads.read_periodic(Q, "TickJob")).last_state == "pending"
    d.run(reports.complete(Q, [(claimed.id, claimed.attempt, "null", HOUR)]))
    read = d.run(reads.read_periodic(Q, "TickJob"))
    assert (read.last_state, read.record["last_outcome"]) == ("succeeded", "succeeded")
    r.set(Q.task("TickJob:1000"), "not a hash")  # the task's key is not the record's concern
    assert d.run(reads.read_periodic(Q, "TickJob")).last_state == ""


async def _schedule_once(*jobs: type[PeriodicJob]) -> None:
    """One tick of a runner's scheduler, as a runner that starts makes it."""
    await Scheduler(list(jobs), config.settings(), await configured.async_driver()).tick()


async def test_the_scheduler_lists_its_jobs_for_readers_without_the_classes(
    r: redis.Redis, defined: list[type[culex.Job]]
) -> None:
    class ListedJob(culex.PeriodicJob):
        cron = "30 2 * * *"
        timezone = "Europe/Berlin"
        queue = "reports"

    class OtherListedJob(culex.PeriodicJob):
        run_every = timedelta(hours=1)

    defined += [ListedJob, OtherListedJob]
    await _schedule_once(ListedJob, OtherListedJob)
    rows = await aperiodic_jobs()
    assert rows == await asyncio.to_thread(periodic_jobs)
    listed, other = rows
    record = queue_keys("culex", "reports").periodic("ListedJob")
    next_slot = int(field(r, record, "next_slot"))
    assert listed == PeriodicRow(
        job="ListedJob", queue="reports", schedule="cron 30 2 * * * (Europe/Berlin)",
        next_run=next_slot / 1000, last_run=None, last_outcome="", last_task="",
        timezone="Europe/Berlin",
    )  # fmt: skip
    assert datetime.fromtimestamp(next_slot / 1000, BERLIN).strftime("%H:%M") == "02:30"
    assert (other.job, other.queue, other.schedule) == (
        "OtherListedJob", "other_listed_job", "every 1:00:00",
    )  # fmt: skip
    entry = score(r, periodic_jobs_key("culex"), "reports ListedJob")
    assert entry == r.pexpiretime(record) == next_slot + RECORD_KEEP_MS
    assert r.pttl(periodic_jobs_key("culex")) > 0  # the registry ends too


async def test_a_job_no_runner_schedules_any_more_drops_out(
    r: redis.Redis, defined: list[type[culex.Job]]
) -> None:
    class StayingJob(culex.PeriodicJob):
        run_every = timedelta(hours=1)

    class GoneJob(culex.PeriodicJob):
        run_every = timedelta(hours=1)

    class RetiredJob(culex.PeriodicJob):
        run_every = timedelta(hours=1)

    defined += [StayingJob, GoneJob, RetiredJob]
    await _schedule_once(StayingJob, GoneJob, RetiredJob)
    assert [row.job for row in await aperiodic_jobs()] == ["GoneJob", "RetiredJob", "StayingJob"]
    key = periodic_jobs_key("culex")
    # GoneJob's record expired (a week after its next slot); RetiredJob's entry lapsed
    r.delete(queue_keys("culex", GoneJob.queue).periodic("GoneJob"))
    r.zadd(key, {f"{RetiredJob.queue} RetiredJob": server_ms(r) - 1})
    assert [row.job for row in await aperiodic_jobs()] == ["StayingJob"]
    # the next scheduler to write trims the lapsed entry
    await Scheduler([StayingJob], config.settings(), await configured.async_driver()).tick()
    assert f"{RetiredJob.queue} RetiredJob" not in members(r, key)


async def test_the_listing_takes_two_round_trips_whatever_the_number_of_jobs(
    r: redis.Redis, defined: list[type[culex.Job]], monkeypatch: pytest.MonkeyPatch
) -> None:
    jobs = [
        type(f"ManyJob{i}", (culex.PeriodicJob,), {"run_every": 3600, "queue": f"many{i % 3}"})
        for i in range(12)
    ]
    defined += jobs
    await _schedule_once(*jobs)
    for script in scripts.ALL:  # (a server that lost a script costs one more trip)
        r.script_load(script.source)
    exchanges = count_exchanges(monkeypatch, SyncConnection)
    rows = periodic_jobs()
    assert len(rows) == 12 and exchanges == [2, 12]


async def test_trigger_by_name_runs_now_its_outcome_shows_and_the_next_slot_still_runs(
    r: redis.Redis, defined: list[type[culex.Job]]
) -> None:
    runs: list[str] = []

    class SecondlyJob(culex.PeriodicJob):
        run_every = timedelta(seconds=1)

        def perform(self) -> str:
            runs.append(self.task_id)
            return "ran"

    defined.append(SecondlyJob)
    await _schedule_once(SecondlyJob)  # a runner has scheduled it: it has a record
    task = await atrigger("SecondlyJob", SecondlyJob.queue)
    assert task.id.startswith("SecondlyJob:trigger:") and task.queue == SecondlyJob.queue
    assert field(r, queue_keys("culex", task.queue).task(task.id), "trigger") == b"manual"
    [row] = await aperiodic_jobs()
    assert (row.last_task, row.last_outcome) == (task.id, "waiting") and row.last_run
    async with running(culex.Runner(run_from=[SecondlyJob.queue])):
        assert await task.aresult(timeout=10) == "ran"

        async def a_slot_ran() -> PeriodicRow | None:
            [row] = await aperiodic_jobs()
            slot = row.last_task.rpartition(":")[2]
            return row if row.last_outcome == "succeeded" and slot.isdigit() else None

        row = await await_until(a_slot_ran, what="the next slot to run")
    assert runs[0] == task.id and row.last_task in runs[1:]
    assert row.next_run is not None and row.last_run is not None


async def test_trigger_refuses_bad_input_before_any_write(
    r: redis.Redis, defined: list[type[culex.Job]]
) -> None:
    class RefusedJob(culex.PeriodicJob):
        run_every = timedelta(hours=1)

    defined.append(RefusedJob)
    before = snapshot(r)
    with pytest.raises(UnknownPeriodicJob, match="no periodic job 'RefusedJob' on queue"):
        await atrigger("RefusedJob", RefusedJob.queue)  # no runner has scheduled it
    with pytest.raises(TypeError, match="needs the job's queue"):
        await atrigger("RefusedJob")
    with pytest.raises(TypeError, match="a PeriodicJob class or a job name"):
        await atrigger(42)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="without spaces"):
        await atrigger("Refused Job", "q")
    with pytest.raises(ValueError, match="queue name"):
        await atrigger("RefusedJob", "a queue")
    with pytest.raises(ValueError, match="runs on queue 'refused_job', not 'elsewhere'"):
        await atrigger(RefusedJob, "elsewhere")
    with pytest.raises(TypeError, match="settings go by keyword"):
        await atrigger(RefusedJob, config.settings())  # type: ignore[arg-type]
    assert snapshot(r) == before
    await _schedule_once(RefusedJob)
    with pytest.raises(UnknownPeriodicJob):
        trigger("RefusedJob", "elsewhere")  # known, but on its own queue only


async def test_culex_periodic_without_a_module_lists_and_triggers_from_redis_alone(
    r: redis.Redis,
    url: str,
    defined: list[type[culex.Job]],
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    class ShownJob(culex.PeriodicJob):
        cron = "30 2 * * *"
        timezone = "Europe/Berlin"

    defined.append(ShownJob)
    monkeypatch.setattr(logs, "configure", lambda *args: None)  # the test's logging
    assert await asyncio.to_thread(cli.main, ["periodic", "--redis-url", url]) == 0
    assert "no periodic jobs" in capsys.readouterr().out
    await _schedule_once(ShownJob)
    assert await asyncio.to_thread(cli.main, ["periodic", "trigger", "ShownJob"]) == 0
    [triggered] = members(r, queue_keys("culex", "shown_job").waiting)
    assert capsys.readouterr().out == f"enqueued ShownJob as task shown_job<{triggered}>\n"
    argv = ["periodic", "trigger", "ShownJob", "--queue", "shown_job"]
    assert await asyncio.to_thread(cli.main, argv) == 0
    assert len(members(r, queue_keys("culex", "shown_job").waiting)) == 2
    capsys.readouterr()
    assert await asyncio.to_thread(cli.main, ["periodic"]) == 0
    header, row = (re.split(r"\s{2,}", line) for line in capsys.readouterr().out.splitlines())
    assert header == [
        "job", "queue", "schedule", "next run", "last run", "last outcome", "last task",
    ]  # fmt: skip
    assert row[:3] == ["ShownJob", "shown_job", "cron 30 2 * * * (Europe/Berlin)"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d 02:30:00 CES?T", row[3])
    assert row[5:] == ["waiting", members(r, queue_keys("culex", "shown_job").waiting)[1]]
    for argv in (["periodic", "trigger", "NoSuchJob"], ["periodic", "trigger", "a", "b", "c"]):
        assert await asyncio.to_thread(cli.main, argv) == 2
    errors = capsys.readouterr().err
    assert "no single periodic job named 'NoSuchJob'" in errors and "usage:" in errors


async def test_the_listing_and_trigger_by_name_on_a_cluster(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch, defined: list[type[culex.Job]]
) -> None:
    """The registry, the records and the tasks live in several slots: no CROSSSLOT."""
    monkeypatch.setenv("CULEX_REDIS_URL", cluster.url)
    config.reset()

    class ShardListedJob(culex.PeriodicJob):
        run_every = timedelta(hours=1)

    class OtherShardListedJob(culex.PeriodicJob):
        cron = "0 3 * * *"
        queue = "other_shard"

    defined += [ShardListedJob, OtherShardListedJob]
    try:
        await _schedule_once(ShardListedJob, OtherShardListedJob)
        task = await atrigger("OtherShardListedJob", "other_shard")
        rows = {row.job: row for row in await aperiodic_jobs()}
        assert rows["OtherShardListedJob"].last_task == task.id
        assert rows["OtherShardListedJob"].last_outcome == "waiting"
        assert rows["ShardListedJob"].schedule == "every 1:00:00"
    finally:
        monkeypatch.undo()
        config.reset()
