"""Cancelling a task that has not started: cancel.lua (state before -> call -> state after),
Task.cancel / acancel, what a runner does with a cancelled task, and ``culex cancel``."""

from __future__ import annotations

import subprocess
import sys
from typing import ClassVar

import pytest
import redis

import culex
from culex import cli, logs
from culex._redis import claims, commands, enqueuing, interventions, reports, scripts
from culex._redis.calls import Call
from culex._redis.connections import SyncConnection
from culex._redis.drivers import SyncDriverProtocol
from culex._redis.keys import queue_keys, queues_key
from culex.errors import ServerError
from culex.server.procedures import Procedure, run_sync, together

from ..conftest import count_exchanges, driver_of, running, score, snapshot, writes

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)

DAY_MS = 86_400_000


class CalledOffJob(culex.QueuedJob):
    """Remembers every task it ran."""

    queue = "called_off"
    ran: ClassVar[list[str]] = []

    async def perform(self) -> str:
        CalledOffJob.ran.append(self.task_id)
        return f"ran {self.task_id}"


K = queue_keys("culex", CalledOffJob.queue)


def known(d: SyncDriverProtocol) -> None:
    """The queue in the registry of queue names, as enqueue() puts it (the culex commands
    refuse a queue culex never saw)."""
    d.run(commands.register_queue(queues_key("culex"), K.name))


def put(d: SyncDriverProtocol, task_id: str, *, delay_ms: int = 0) -> None:
    d.run(
        enqueuing.enqueue(
            K, task_id, "CalledOffJob", "{}", due_ms=None, delay_ms=delay_ms, max_retries=4
        )
    )


def claim(d: SyncDriverProtocol) -> list[claims.Claimed]:
    return d.run(
        claims.claim(K, limit=10, lease_ms=30_000, promote_limit=100, dead_ttl_ms=DAY_MS)
    ).tasks


def cancel(d: SyncDriverProtocol, task_id: str, reason: str = "", *, dead_max: int = 100) -> str:
    return d.run(interventions.cancel(K, task_id, reason, dead_ttl_ms=DAY_MS, dead_max=dead_max))


# -- the script --------------------------------------------------------------------------------


def assert_cancelled(
    r: redis.Redis, task_id: str, before: dict[bytes | str, bytes | str], error: str
) -> None:
    """The task left waiting and scheduled and died now, as fail.lua buries a task."""
    after = r.hgetall(K.task(task_id))
    assert r.zscore(K.waiting, task_id) is None and r.zscore(K.scheduled, task_id) is None
    assert r.zscore(K.pending, task_id) is None
    assert after[b"state"] == b"dead" and after[b"last_error"] == error.encode()
    now = int(after[b"finished_at"])
    assert after[b"failed_at"] == after[b"finished_at"]
    assert now >= int(before[b"enqueue_time"])
    assert r.zscore(K.dead, task_id) == now
    assert 0 < r.pttl(K.task(task_id)) <= DAY_MS
    # nothing else in the hash changed: no attempt ran, no retry was used
    changed = {b"state", b"last_error", b"failed_at", b"finished_at"}
    assert {k: v for k, v in after.items() if k not in changed} == {
        k: v for k, v in before.items() if k not in changed
    }


def test_a_waiting_task_is_cancelled_into_dead(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "t")
    put(d, "other")
    before = r.hgetall(K.task("t"))
    assert before[b"state"] == b"waiting" and r.zscore(K.waiting, "t") is not None
    assert r.pttl(K.task("t")) == -1

    assert cancel(d, "t") == "cancelled"

    assert_cancelled(r, "t", before, "cancelled")
    assert r.zrange(K.waiting, 0, -1) == [b"other"]  # the others keep their places
    assert [t.id for t in claim(d)] == ["other"]  # and a runner never sees it


def test_a_scheduled_task_is_cancelled_into_dead_with_its_reason(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "later", delay_ms=60_000)
    before = r.hgetall(K.task("later"))
    assert before[b"state"] == b"scheduled" and r.zscore(K.scheduled, "later") is not None

    assert cancel(d, "later", "the order was withdrawn") == "cancelled"

    assert_cancelled(r, "later", before, "cancelled: the order was withdrawn")
    assert r.zcard(K.scheduled) == 0


def test_a_task_waiting_for_its_retry_can_be_cancelled(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "flaky")
    [t] = claim(d)
    fail = reports.fail(
        K, "flaky", t.attempt, "boom", retry_delay_ms=60_000, dead_ttl_ms=DAY_MS, dead_max=10
    )
    assert d.run(fail) == "scheduled"
    before = r.hgetall(K.task("flaky"))
    assert cancel(d, "flaky") == "cancelled"
    assert_cancelled(r, "flaky", before, "cancelled")
    assert r.hget(K.task("flaky"), "retry_count") == b"1"  # the failed attempt still counts


def test_without_the_running_keys_a_running_task_is_refused_and_nothing_changes(
    r: redis.Redis,
) -> None:
    d = driver_of(r)
    put(d, "running")
    [t] = claim(d)
    before = snapshot(r)
    call = interventions.cancel(K, "running", "too late", dead_ttl_ms=DAY_MS, dead_max=100,
                                running=False)  # fmt: skip
    assert len(call.keys) == 8  # as a caller from before running tasks could be cancelled
    assert d.run(call) == "pending"
    assert snapshot(r) == before
    # its runner's report still lands
    assert d.run(reports.complete(K, [("running", t.attempt, '"done"', 60_000)])) == []


def counted(r: redis.Redis, job: str) -> dict[str, int]:
    """The counters of ``job`` in every minute bucket of K, by outcome letter (s, f, d)."""
    found: dict[str, int] = {}
    for key in r.scan_iter(match=K.stats_prefix + "m:*"):
        for name, value in r.hgetall(key).items():
            kind, rest = (name.decode() if isinstance(name, bytes) else name).split("|", 1)
            if kind == job and rest[0] in "sfd":
                found[rest[0]] = found.get(rest[0], 0) + int(value)
    return found


def test_a_running_task_s_cancel_is_requested_once(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "running")
    claim(d)
    before = r.hgetall(K.task("running"))

    assert cancel(d, "running", "user left") == "cancelling"

    after = r.hgetall(K.task("running"))
    assert after.pop(b"cancel_requested") == b"cancelled: user left"
    assert after.pop(b"on_end") == b"1"  # (complete reads the request only then)
    assert after == before  # still pending, under the same attempt
    assert r.zscore(K.pending, "running") is not None
    assert r.zrange(K.cancels, 0, -1) == [b"running"]
    assert 0 < score(r, K.cancels, "running") <= int(r.time()[0]) * 1000 + 1000
    # a duplicate changes nothing: the first request and its reason stand
    snap, written = snapshot(r), writes(r)
    assert cancel(d, "running", "again") == "cancelling"
    assert snapshot(r) == snap and writes(r) == written


def test_the_runner_s_report_of_a_cancelled_attempt_buries_it_counted_once_as_dead(
    r: redis.Redis,
) -> None:
    d = driver_of(r)
    put(d, "running")
    [t] = claim(d)
    assert cancel(d, "running") == "cancelling"
    # even a report that asks for a retry: a cancelled task is never retried
    fail = reports.fail(
        K, "running", t.attempt, "whatever", retry_delay_ms=0, dead_ttl_ms=DAY_MS, dead_max=10
    )
    assert d.run(fail) == "dead"
    after = r.hgetall(K.task("running"))
    assert after[b"state"] == b"dead" and after[b"last_error"] == b"cancelled"
    assert b"cancel_requested" not in after  # answered: a retry from dead runs it again
    assert r.zscore(K.dead, "running") is not None and r.zscore(K.pending, "running") is None
    assert r.exists(K.cancels) == 0  # the request ended with the task
    assert counted(r, "CalledOffJob") == {"d": 1}
    assert d.run(fail) is None  # a duplicate report is refused (fenced)
    assert counted(r, "CalledOffJob") == {"d": 1}
    assert d.run(interventions.retry_dead(K, ["running"])).retried == ["running"]
    [again] = claim(d)
    assert d.run(reports.complete(K, [("running", again.attempt, "1", 60_000)])) == []


def test_a_success_that_lands_before_the_runner_learns_stands(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "quick")
    [t] = claim(d)
    assert cancel(d, "quick") == "cancelling"
    assert d.run(reports.complete(K, [("quick", t.attempt, '"done"', 60_000)])) == []
    assert r.hget(K.task("quick"), "state") == b"succeeded"
    assert r.exists(K.cancels) == 0
    assert cancel(d, "quick") == "succeeded"  # a stale cancel after the end does nothing


def test_a_task_whose_cancel_was_requested_is_not_handed_back(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "running")
    [t] = claim(d)
    assert cancel(d, "running") == "cancelling"
    before = snapshot(r)
    assert d.run(reports.release(K, "running", t.attempt)) is False
    assert snapshot(r) == before


def test_reclaim_buries_a_task_whose_runner_is_gone_before_it_could_cancel_it(
    r: redis.Redis,
) -> None:
    d = driver_of(r)
    put(d, "orphan")
    put(d, "other")
    lost = d.run(
        claims.claim(K, limit=10, lease_ms=0, promote_limit=100, dead_ttl_ms=DAY_MS)
    ).tasks  # a lease of 0 ms has run out at once
    assert cancel(d, "orphan", "stop it") == "cancelling"
    reclaim = claims.reclaim(K, limit=100, dead_ttl_ms=DAY_MS, dead_max=10)
    reclaimed = d.run(reclaim)
    assert sorted(reclaimed) == [("orphan", "dead"), ("other", "waiting")]
    after = r.hgetall(K.task("orphan"))
    assert after[b"state"] == b"dead" and after[b"last_error"] == b"cancelled: stop it"
    assert b"cancel_requested" not in after and after[b"retry_count"] == b"0"
    assert after[b"stalls"] == b"1"  # (a stall, not a failed attempt)
    assert r.exists(K.cancels) == 0
    assert counted(r, "CalledOffJob") == {"d": 1, "f": 1}  # "other" failed, to run again
    stale = next(t for t in lost if t.id == "orphan")
    fail = reports.fail(
        K, "orphan", stale.attempt, "late", retry_delay_ms=0, dead_ttl_ms=DAY_MS, dead_max=10
    )
    assert d.run(fail) is None  # the lost runner's late report is refused


def test_a_push_back_that_lands_after_the_request_ends_the_task_cancelled(
    r: redis.Redis,
) -> None:
    """The job raised RetryLater before its runner read the request: retry_later buries
    the task as fail would (counted once, as dead), and nothing runs it again."""
    d = driver_of(r)
    put(d, "pushed")
    [t] = claim(d)
    assert cancel(d, "pushed", "user left") == "cancelling"
    later = reports.retry_later(K, "pushed", t.attempt, 0, dead_ttl_ms=DAY_MS, dead_max=10)
    assert d.run(later) is True
    after = r.hgetall(K.task("pushed"))
    assert after[b"state"] == b"dead" and after[b"last_error"] == b"cancelled: user left"
    assert b"cancel_requested" not in after and b"retry_later_count" not in after
    assert r.zscore(K.dead, "pushed") is not None and r.zscore(K.scheduled, "pushed") is None
    assert r.zscore(K.pending, "pushed") is None and r.exists(K.cancels) == 0
    assert 0 < r.pttl(K.task("pushed")) <= DAY_MS
    assert counted(r, "CalledOffJob") == {"d": 1}
    assert claim(d) == []
    assert d.run(later) is False  # fenced: a duplicate report changes nothing
    assert counted(r, "CalledOffJob") == {"d": 1}


def test_claim_ends_a_ready_task_whose_cancel_was_requested_instead_of_running_it(
    r: redis.Redis,
) -> None:
    """As an older runner's push-back or hand-back leaves it: ready, with the request."""
    d = driver_of(r)
    put(d, "back")
    put(d, "other")
    r.hset(K.task("back"), mapping={"cancel_requested": "cancelled: stop", "on_end": "1"})
    r.zadd(K.cancels, {"back": 1})
    before = r.hgetall(K.task("back"))
    assert [t.id for t in claim(d)] == ["other"]
    answered = {k: v for k, v in before.items() if k != b"cancel_requested"}
    assert_cancelled(r, "back", answered, "cancelled: stop")  # (the request answered)
    assert r.exists(K.cancels) == 0
    assert counted(r, "CalledOffJob") == {}  # it did not run again: nothing counted


def test_retry_from_dead_clears_an_old_cancel_request(r: redis.Redis) -> None:
    """An operator's retry from dead is deliberate: the task runs, whatever request an
    older script left on its hash."""
    d = driver_of(r)
    put(d, "old")
    assert cancel(d, "old") == "cancelled"
    r.hset(K.task("old"), "cancel_requested", "cancelled")
    assert d.run(interventions.retry_dead(K, ["old"])).retried == ["old"]
    assert r.hget(K.task("old"), "cancel_requested") is None
    [again] = claim(d)
    assert again.id == "old"


def test_requests_left_by_a_client_that_sent_no_cancels_key_end_at_the_next_request(
    r: redis.Redis,
) -> None:
    d = driver_of(r)
    for task_id in ("a", "b"):
        put(d, task_id)
    a, _ = claim(d)
    assert cancel(d, "a") == "cancelling"
    # a foreign runner reports "a" with fail's older key list: its request stays behind
    old_fail = reports.fail(
        K, "a", a.attempt, "x", retry_delay_ms=None, dead_ttl_ms=DAY_MS, dead_max=10
    )
    assert d.run(old_fail._replace(keys=old_fail.keys[:9])) == "dead"
    assert r.zrange(K.cancels, 0, -1) == [b"a"]
    r.zadd(K.cancels, {"ghost": 1})  # (and an id without a task)
    assert cancel(d, "b") == "cancelling"
    assert r.zrange(K.cancels, 0, -1) == [b"b"]  # the next request swept them


def test_a_finished_task_and_an_unknown_id_are_refused_and_nothing_changes(
    r: redis.Redis,
) -> None:
    d = driver_of(r)
    put(d, "done")
    put(d, "died")
    done, died = claim(d)
    assert d.run(reports.complete(K, [("done", done.attempt, '"ok"', 60_000)])) == []
    fail = reports.fail(
        K, "died", died.attempt, "boom", retry_delay_ms=None, dead_ttl_ms=DAY_MS, dead_max=10
    )
    assert d.run(fail) == "dead"
    before, written = snapshot(r), writes(r)
    assert cancel(d, "done") == "succeeded"
    assert cancel(d, "died") == "dead"
    assert cancel(d, "never-enqueued") == ""
    assert snapshot(r) == before and writes(r) == written
    assert r.exists(K.task("never-enqueued")) == 0  # no hash is made for an unknown id


def test_a_state_its_set_does_not_confirm_is_refused(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "stray")
    r.zrem(K.waiting, "stray")  # (no script leaves this; a hand edit might)
    r.set(K.task("stringy"), "not a hash")
    before = snapshot(r)
    assert cancel(d, "stray") == "waiting"
    assert cancel(d, "stringy") == ""  # no task hash there
    assert snapshot(r) == before


def test_dead_is_trimmed_by_count_and_by_age(r: redis.Redis) -> None:
    d = driver_of(r)
    seconds, micros = r.time()
    recent = seconds * 1000 + micros // 1000 - 60_000  # a minute ago: kept
    r.zadd(K.dead, {"ancient": 1, "recent": recent})  # ancient: older than failed_job_ttl
    put(d, "t0")
    assert cancel(d, "t0") == "cancelled"
    assert r.zrange(K.dead, 0, -1) == [b"recent", b"t0"]  # by age
    r.zrem(K.dead, "recent")
    for task_id in ("t1", "t2"):
        put(d, task_id)
        assert cancel(d, task_id, dead_max=2) == "cancelled"
    assert r.zrange(K.dead, 0, -1) == [b"t1", b"t2"]  # by count: the oldest went first


def test_a_cancelled_periodic_task_is_recorded_dead(r: redis.Redis) -> None:
    d = driver_of(r)
    tick = queue_keys("culex", "tick")
    scheduled = enqueuing.schedule(
        tick,
        "TickJob",
        "TickJob:1000",
        slot_ms=1000,
        next_slot_ms=2000,
        overlap=False,
        run_new=True,
        max_retries=0,
    )
    assert d.run(scheduled).outcome == "enqueued"
    assert b"last_outcome" not in r.hgetall(tick.periodic("TickJob"))
    call = interventions.cancel(tick, "TickJob:1000", "", dead_ttl_ms=DAY_MS, dead_max=10)
    assert d.run(call) == "cancelled"
    record = r.hgetall(tick.periodic("TickJob"))
    assert record[b"last_outcome"] == b"dead"
    assert record[b"last_finished_at"] == r.hget(tick.task("TickJob:1000"), "finished_at")
    assert r.zrange(tick.dead, 0, -1) == [b"TickJob:1000"]


# -- the Python API ------------------------------------------------------------------------------


def test_task_cancel_ends_a_task_that_has_not_started_and_asks_for_a_running_one(
    r: redis.Redis,
) -> None:
    d = driver_of(r)
    busy = CalledOffJob().enqueue()
    [claimed] = claim(d)  # a runner is running it
    task = CalledOffJob().enqueue()
    later = CalledOffJob().enqueue(delay=60)
    assert busy.cancel() is True  # requested: its runner ends it
    assert busy.state() is culex.TaskState.PENDING
    assert busy.info()["cancel_requested"] == "cancelled"
    assert task.cancel() is True
    assert later.cancel("  not needed  ") is True  # the reason is stripped
    assert task.cancel() is False  # dead already
    assert culex.Task("no-such-id", K.name).cancel() is False
    assert task.state() is later.state() is culex.TaskState.DEAD
    assert later.info()["last_error"] == "cancelled: not needed"
    with pytest.raises(culex.TaskFailed, match="cancelled") as failed:
        task.result(timeout=10)
    assert failed.value.reason == "cancelled" and failed.value.task_id == task.id
    listed = {t.id: t.error for t in culex.dead_tasks(K.name)}  # `culex dead` lists them
    assert listed == {task.id: "cancelled", later.id: "cancelled: not needed"}
    # (this runner never learned of the request: its success stands)
    assert d.run(reports.complete(K, [(busy.id, claimed.attempt, "1", 60_000)])) == []
    assert busy.cancel() is False  # succeeded


async def test_acancel_is_the_async_twin(r: redis.Redis) -> None:
    task = await CalledOffJob().aenqueue()
    assert await task.acancel("no longer wanted") is True
    assert await task.acancel() is False
    assert await culex.Task("no-such-id", K.name).acancel() is False
    with pytest.raises(culex.TaskFailed) as failed:
        await task.aresult(timeout=10)
    assert failed.value.reason == "cancelled: no longer wanted"


def test_bad_arguments_are_clear_errors_and_send_nothing(r: redis.Redis) -> None:
    task = CalledOffJob().enqueue()
    with pytest.raises(TypeError, match="cancel reason must be a str, got int"):
        task.cancel(7)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="cancel reason must be a str, got NoneType"):
        task.cancel(None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="at most 500 characters, got 501"):
        task.cancel("x" * 501)
    with pytest.raises(ValueError, match="braces, spaces"):
        culex.Task(task.id, "a queue").cancel()
    with pytest.raises(ValueError, match="task id must be 1 to"):
        culex.Task("a b", K.name).cancel()
    with pytest.raises(TypeError, match="task id must be a str, got int"):
        culex.Task(7, K.name).cancel()  # type: ignore[arg-type]
    assert task.state() is culex.TaskState.WAITING
    assert task.cancel("x" * 500) is True  # the longest reason allowed


# -- with a runner -----------------------------------------------------------------------------


async def test_a_runner_never_runs_a_cancelled_task(r: redis.Redis) -> None:
    CalledOffJob.ran = []
    called_off = await CalledOffJob().aenqueue()  # first in line
    kept = await CalledOffJob().aenqueue()
    assert await called_off.acancel() is True
    async with running(culex.Runner(run_from=[K.name])):
        assert await kept.aresult(timeout=10) == f"ran {kept.id}"
    assert CalledOffJob.ran == [kept.id]
    info = await called_off.ainfo()
    assert info["state"] == "dead" and info["attempt"] == "0"  # never claimed


async def test_a_cancelled_task_can_be_retried_from_dead_and_then_runs(r: redis.Redis) -> None:
    CalledOffJob.ran = []
    task = await CalledOffJob().aenqueue(delay=3600)
    assert await task.acancel("wrong customer") is True
    assert await task.aretry() is True  # back in waiting, ready now
    assert await task.astate() is culex.TaskState.WAITING
    async with running(culex.Runner(run_from=[K.name])):
        assert await task.aresult(timeout=10) == f"ran {task.id}"
    assert CalledOffJob.ran == [task.id]
    assert (await task.ainfo())["last_error"] == "cancelled: wrong customer"  # history kept


# -- the command line ------------------------------------------------------------------------------


def culex_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "culex", *args], capture_output=True, text=True, timeout=60
    )


def test_culex_cancel_says_what_happened_to_each_id(r: redis.Redis, url: str) -> None:
    d = driver_of(r)
    known(d)
    put(d, "busy")
    claim(d)  # a runner is running it
    for task_id in ("ready", "ready2", "ready3"):
        put(d, task_id)
    put(d, "later", delay_ms=60_000)

    done = culex_command(
        "cancel", K.name, "ready", "later", "busy", "ghost", "ready", "--reason", "duplicate"
    )
    assert done.returncode == 1, done.stderr
    assert done.stdout.splitlines() == [
        "ready: cancelled",
        "later: cancelled",
        "busy: cancelling, it is running: its runner stops it",
        "ghost: not cancelled, not found",
    ]  # each id once
    assert r.hget(K.task("later"), "last_error") == b"cancelled: duplicate"

    all_cancelled = culex_command("cancel", K.name, "ready2", "ready3", "--redis-url", url)
    assert all_cancelled.returncode == 0, all_cancelled.stderr
    assert all_cancelled.stdout == "ready2: cancelled\nready3: cancelled\n"
    assert r.hget(K.task("ready2"), "last_error") == b"cancelled"

    listed = culex_command("dead", K.name)
    assert listed.stdout.count("cancelled") == 4


def test_culex_cancel_usage_errors_change_nothing(r: redis.Redis) -> None:
    d = driver_of(r)
    known(d)
    put(d, "t")
    for args, message in (
        (("cancel", K.name), "the following arguments are required: ID"),
        (("cancel", "a{b}", "t"), "braces, spaces"),
        (("cancel", K.name, "t", "a\tb"), "task id must be 1 to"),  # t is not cancelled first
        (("cancel", K.name, "t", "--reason", "x" * 501), "at most 500 characters"),
    ):
        done = culex_command(*args)
        assert done.returncode == 2 and message in done.stderr, done.stderr
    assert r.hget(K.task("t"), "state") == b"waiting"


def test_culex_cancel_sends_every_id_in_one_round_trip(
    r: redis.Redis, url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    d = driver_of(r)
    known(d)
    ids = [f"many{i}" for i in range(50)]
    for task_id in ids:
        put(d, task_id)
    r.script_load(scripts.CANCEL.source)  # (a server that lost it costs one more trip)
    exchanges = count_exchanges(monkeypatch, SyncConnection)
    monkeypatch.setattr(logs, "configure", lambda *args: None)  # the test's logging
    assert cli.main(["cancel", K.name, *ids, "ghost", "--redis-url", url]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"{i}: cancelled" for i in ids] + ["ghost: not cancelled, not found"]
    assert exchanges == [1, 51]  # (the queue looked for in the registry, then every id)
    assert all(r.hget(K.task(i), "state") == b"dead" for i in ids)


def test_culex_cancel_goes_on_past_an_id_the_server_refuses(
    r: redis.Redis, url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    d = driver_of(r)
    known(d)
    for task_id in ("before", "odd", "after"):
        put(d, task_id)
    # "odd" is a periodic job's task whose record key holds a string: its HSET fails
    r.hset(K.task("odd"), mapping={"periodic": "1", "type": "OddJob"})
    r.set(K.periodic("OddJob"), "not a record")
    monkeypatch.setattr(logs, "configure", lambda *args: None)
    assert cli.main(["cancel", K.name, "before", "odd", "after", "--redis-url", url]) == 1
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "before: cancelled" and lines[2] == "after: cancelled"
    assert lines[1].startswith("odd: not cancelled, the Redis server") and "WRONGTYPE" in lines[1]
    assert r.hget(K.task("after"), "state") == b"dead"
    assert r.hget(K.task("odd"), "state") == b"waiting"  # its failed script changed nothing
    assert r.zscore(K.waiting, "odd") is not None


def test_together_returns_or_raises_what_the_server_refused(r: redis.Redis, url: str) -> None:
    r.hset("a-hash", "f", "v")

    def incr(key: str) -> Procedure[int]:
        value: int = yield Call((), ("INCR", key), int)
        return value

    procedures = [incr("counter"), incr("a-hash"), incr("counter")]
    values = run_sync(together(procedures, refused="return"), url)
    assert values[0] == 1 and values[2] == 2
    assert isinstance(values[1], ServerError) and "WRONGTYPE" in str(values[1])
    with pytest.raises(ServerError, match="WRONGTYPE"):
        run_sync(together([incr("counter"), incr("a-hash")]), url)
    assert r.get("counter") == b"3"  # (the server ran the rest of the batch)


def test_together_refuses_a_flow_of_more_than_one_call() -> None:
    def two_calls() -> Procedure[None]:
        yield Call((), ("PING",), str)
        yield Call((), ("PING",), str)

    procedure = together([two_calls()])
    with pytest.raises(TypeError, match="single call"):
        procedure.send(None)
        procedure.send(["PONG"])
