"""Dead tasks: retry_dead.lua (state before -> call -> state after), listing, retrying from
Python (culex.retry_dead, Task.retry) and from the command line."""

from __future__ import annotations

import re
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from typing import ClassVar

import pytest
import redis

import culex
from culex._redis import claims, commands, enqueuing, interventions, reports
from culex._redis.drivers import SyncDriverProtocol
from culex._redis.keys import queue_keys, queues_key
from culex.operations import dead, inspection

from ..conftest import driver_of, running, score, snapshot

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)

DAY_MS = 86_400_000


class RevivedJob(culex.QueuedJob):
    """Reports which attempt ran it."""

    queue = "revived"

    async def perform(self) -> int:
        return self.attempt


K = queue_keys("culex", RevivedJob.queue)


def put(d: SyncDriverProtocol, task_id: str, *, max_retries: int = 4) -> None:
    d.run(
        enqueuing.enqueue(
            K, task_id, "RevivedJob", "{}", due_ms=None, delay_ms=0, max_retries=max_retries
        )
    )


def known(d: SyncDriverProtocol) -> None:
    """The queue in the registry of queue names, as enqueue() puts it (the culex commands
    refuse a queue culex never saw)."""
    d.run(commands.register_queue(queues_key("culex"), K.name))


def claim(d: SyncDriverProtocol, limit: int = 10) -> list[claims.Claimed]:
    return d.run(
        claims.claim(K, limit=limit, lease_ms=30_000, promote_limit=100, dead_ttl_ms=DAY_MS)
    ).tasks


def kill(d: SyncDriverProtocol, *ids: str, error: str = "boom") -> None:
    """Enqueue these tasks, run one attempt of each and let it fail without a retry."""
    for task_id in ids:
        put(d, task_id)
    for t in claim(d, limit=len(ids)):
        out = d.run(
            reports.fail(
                K, t.id, t.attempt, error, retry_delay_ms=None, dead_ttl_ms=DAY_MS, dead_max=100
            )
        )
        assert out == "dead"


# -- the script ----------------------------------------------------------------------------


async def test_a_dead_task_goes_back_to_waiting_and_runs(r: redis.Redis) -> None:
    d = driver_of(r)
    kill(d, "t", error="ValueError: bad input")
    before = r.hgetall(K.task("t"))
    assert before[b"state"] == b"dead" and before[b"retry_count"] == b"1"
    assert r.zscore(K.dead, "t") is not None and 0 < r.pttl(K.task("t")) <= DAY_MS
    r.delete(K.signal)

    assert d.run(interventions.retry_dead(K, ["t"])) == interventions.RetryReply(["t"], [])

    after = r.hgetall(K.task("t"))
    assert r.zscore(K.dead, "t") is None
    assert r.pttl(K.task("t")) == -1  # persisted: it no longer expires
    assert after[b"state"] == b"waiting" and after[b"retry_count"] == b"0"
    assert after[b"attempt"] == before[b"attempt"] == b"1"  # attempts only grow
    assert after[b"last_error"] == b"ValueError: bad input"  # history is kept
    assert after[b"failed_at"] == before[b"failed_at"] and b"finished_at" not in after
    now = int(after[b"retried_at"])
    assert now >= int(before[b"finished_at"]) and after[b"due_at"] == after[b"retried_at"]
    assert r.zscore(K.waiting, "t") == now  # the back of the line
    assert r.lrange(K.signal, 0, -1) == [b"1"]  # one wake-up token, as enqueue pushes

    async with running(culex.Runner(run_from=[RevivedJob.queue])):
        assert await culex.Task("t", RevivedJob.queue).aresult(timeout=10) == 2


def test_a_retried_task_waits_behind_the_tasks_already_waiting(r: redis.Redis) -> None:
    d = driver_of(r)
    kill(d, "b-retried")
    put(d, "a-waiting")  # (named so that a tie in ms sorts the same way)
    assert r.llen(K.signal) == 1  # a token is there already: no second one
    assert d.run(interventions.retry_dead(K, ["b-retried"])).retried == ["b-retried"]
    assert score(r, K.waiting, "b-retried") >= score(r, K.waiting, "a-waiting")
    assert r.llen(K.signal) == 1
    assert [t.id for t in claim(d)] == ["a-waiting", "b-retried"]


def test_ids_that_are_not_dead_are_skipped_and_change_nothing(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "running")
    claim(d)
    put(d, "waiting")
    before = snapshot(r)
    reply = d.run(interventions.retry_dead(K, ["waiting", "running", "unknown"]))
    assert reply == interventions.RetryReply([], ["waiting", "running", "unknown"])
    assert snapshot(r) == before


def test_a_dead_id_whose_record_expired_is_dropped_from_dead(r: redis.Redis) -> None:
    d = driver_of(r)
    kill(d, "expired", "alive")
    r.delete(K.task("expired"))  # as its PEXPIRE would
    expected = snapshot(r)
    members, expires = expected[K.dead.encode()]
    expected[K.dead.encode()] = ([m for m in members if m[0] != b"expired"], expires)
    reply = d.run(interventions.retry_dead(K, ["expired"]))
    assert reply == interventions.RetryReply([], ["expired"])
    assert snapshot(r) == expected  # it could never run: only the stale id left dead
    assert r.zrange(K.dead, 0, -1) == [b"alive"]


def test_a_dead_id_whose_record_is_a_new_task_is_skipped(r: redis.Redis) -> None:
    d = driver_of(r)
    kill(d, "reused")
    r.delete(K.task("reused"))  # the record expired and the id was enqueued again
    put(d, "reused")
    before = snapshot(r)
    assert d.run(interventions.retry_dead(K, ["reused"])).skipped == ["reused"]
    assert snapshot(r) == before


def test_with_no_ids_the_oldest_limit_are_retried(r: redis.Redis) -> None:
    d = driver_of(r)
    kill(d, *(f"t{i}" for i in range(5)))
    r.zadd(K.dead, {f"t{i}": 1_000 + i for i in range(5)})  # distinct times of death
    assert d.run(interventions.retry_oldest_dead(K, 2)) == interventions.RetryReply(
        ["t0", "t1"], []
    )
    assert r.zrange(K.dead, 0, -1) == [b"t2", b"t3", b"t4"]
    assert culex.retry_dead(RevivedJob.queue, limit=1) == ["t2"]
    assert culex.retry_dead(RevivedJob.queue) == ["t3", "t4"]
    assert culex.retry_dead(RevivedJob.queue) == []
    assert r.zcard(K.dead) == 0 and r.zcard(K.waiting) == 5


def test_a_long_retry_is_cut_into_chunks(r: redis.Redis, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dead, "CHUNK", 2)
    d = driver_of(r)
    kill(d, *(f"t{i}" for i in range(7)))
    r.zadd(K.dead, {f"t{i}": 1_000 + i for i in range(7)})
    r.delete(K.task("t1"))  # expired
    # given ids: each once, two per script, all scripts in one round trip
    outcome = dead.retry(K.name, ["t5", "t1", "t6", "nope", "t5"], None)
    assert outcome == interventions.RetryReply(["t5", "t6"], ["t1", "nope"])
    assert r.zrange(K.dead, 0, -1) == [b"t0", b"t2", b"t3", b"t4"]
    # the oldest: as many rounds as it takes
    assert culex.retry_dead(K.name, limit=3) == ["t0", "t2", "t3"]
    assert dead.retry(K.name, None, None) == interventions.RetryReply(["t4"], [])  # every one
    assert r.zcard(K.dead) == 0 and r.zcard(K.waiting) == 6


# -- retries and fencing after a retry -------------------------------------------------------


class SecondLifeJob(culex.QueuedJob):
    """Dies on its first attempt; after a retry it needs every one of its max_retries."""

    queue = "second_life"
    max_retries = 2
    runs: ClassVar[list[int]] = []

    async def perform(self) -> str:
        SecondLifeJob.runs.append(self.attempt)
        if self.attempt == 1:
            self.fail("not yet", retry=False)
        if self.attempt < 4:
            raise RuntimeError(f"attempt {self.attempt}")
        return "alive"

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(milliseconds=retry_count)


async def test_a_retried_task_has_all_its_retries_again(r: redis.Redis) -> None:
    SecondLifeJob.runs = []
    task = await SecondLifeJob().aenqueue()
    async with running(culex.Runner(run_from=[SecondLifeJob.queue])):
        with pytest.raises(culex.TaskFailed, match="not yet"):
            await task.aresult(timeout=10)
        assert (await task.ainfo())["retry_count"] == "1"
        assert await task.aretry()
        # Without the reset, retry_count 1 + two failures would exceed max_retries 2.
        assert await task.aresult(timeout=10) == "alive"
    assert SecondLifeJob.runs == [1, 2, 3, 4]
    info = await task.ainfo()
    assert info["retry_count"] == "2" and info["attempt"] == "4"
    assert info["last_error"] == "RuntimeError: attempt 3"


def test_dead_is_trimmed_by_age_on_every_reclaim_pass_not_only_at_a_death(
    r: redis.Redis,
) -> None:
    """An id whose hash expired leaves dead at the reclaimer's next pass, so dead's count
    and listing are true though no task died since."""
    d = driver_of(r)
    put(d, "t", max_retries=0)
    [t] = claim(d)
    fail = reports.fail(K, "t", t.attempt, "boom", retry_delay_ms=None, dead_ttl_ms=1000,
                        dead_max=10)  # fmt: skip
    assert d.run(fail) == "dead"
    died = score(r, K.dead, "t")
    r.delete(K.task("t"))  # (its hash expired after dead_ttl_ms)
    r.zadd(K.dead, {"t": died - 1001})  # (and that long ago it died)
    counts = inspection.queue_counts(queues=[K.name])
    assert counts[K.name]["dead"] == 1  # nothing died since: still counted
    assert d.run(claims.reclaim(K, limit=10, dead_ttl_ms=1000, dead_max=10)) == []
    assert r.zcard(K.dead) == 0
    assert inspection.queue_counts(queues=[K.name])[K.name]["dead"] == 0


def test_a_report_from_before_the_retry_is_refused(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "t", max_retries=0)
    [lost] = claim(d)
    r.zadd(K.pending, {"t": 1})  # its lease ran out while the runner still worked
    reclaim = claims.reclaim(K, limit=10, dead_ttl_ms=DAY_MS, dead_max=10, max_stalls=0)
    assert d.run(reclaim) == [("t", "dead")]
    assert culex.Task("t", K.name).retry()
    late = [("t", lost.attempt, '"late"', 5000)]
    assert d.run(reports.complete(K, late)) == [("t", lost.attempt)]  # refused while waiting
    [again] = claim(d)
    assert again.attempt == lost.attempt + 1
    before = r.hgetall(K.task("t"))
    assert d.run(reports.complete(K, late)) == [("t", lost.attempt)]  # and while it runs again
    stale_fail = reports.fail(
        K, "t", lost.attempt, "late", retry_delay_ms=None, dead_ttl_ms=DAY_MS, dead_max=10
    )
    assert d.run(stale_fail) is None
    assert d.run(claims.heartbeat(K, 60_000, [("t", lost.attempt)])) == ["t"]
    assert r.hgetall(K.task("t")) == before
    assert d.run(reports.complete(K, [("t", again.attempt, '"on time"', 5000)])) == []
    assert r.hget(K.task("t"), "result") == b'"on time"'


# -- the Python API ----------------------------------------------------------------------------


def test_task_retry_goes_back_only_from_dead(r: redis.Redis) -> None:
    d = driver_of(r)
    kill(d, "t")
    task = culex.Task("t", K.name)
    assert task.retry() is True
    assert task.state() is culex.TaskState.WAITING
    assert task.retry() is False  # not dead any more
    assert culex.Task("never", K.name).retry() is False
    assert r.zrange(K.waiting, 0, -1) == [b"t"]


async def test_task_aretry_and_the_async_twins(r: redis.Redis) -> None:
    d = driver_of(r)
    kill(d, "a", "b", "c")
    assert await culex.Task("a", K.name).aretry() is True
    assert await culex.Task("a", K.name).aretry() is False
    assert [t.id for t in await culex.adead_tasks(K.name)] == ["c", "b"]
    assert sorted(await culex.aretry_dead(K.name, ["b", "c", "a"])) == ["b", "c"]
    assert await culex.adead_tasks(K.name) == []


def test_dead_tasks_lists_the_newest_first(r: redis.Redis) -> None:
    d = driver_of(r)
    kill(d, "t0", "t1", "t2", "gone", error="OSError: disk full")
    r.zadd(K.dead, {"t0": 1_000, "t1": 3_000, "t2": 2_000, "gone": 4_000})
    r.delete(K.task("gone"))  # expired: not listed
    listed = culex.dead_tasks(K.name)
    assert [t.id for t in listed] == ["t1", "t2", "t0"]
    first = listed[0]
    assert first == culex.DeadTask(
        id="t1",
        queue=K.name,
        type="RevivedJob",
        error="OSError: disk full",
        died_at=datetime(1970, 1, 1, 0, 0, 3, tzinfo=UTC),
        retry_count=1,
        attempt=1,
    )
    assert [t.id for t in culex.dead_tasks(K.name, limit=2)] == ["t1"]  # "gone" took a place
    assert [t.id for t in culex.dead_tasks(K.name, limit=2, offset=2)] == ["t2", "t0"]
    assert culex.dead_tasks("nothing_died_here") == []


def test_bad_arguments_are_clear_errors(r: redis.Redis) -> None:
    with pytest.raises(TypeError, match="queue name must be a str"):
        culex.dead_tasks(7)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="braces, spaces"):
        culex.retry_dead("a queue")
    with pytest.raises(ValueError, match="limit must be > 0, got 0"):
        culex.dead_tasks("q", limit=0)
    with pytest.raises(TypeError, match="limit must be an int, got bool"):
        culex.retry_dead("q", limit=True)
    with pytest.raises(TypeError, match="limit must be an int, got NoneType"):
        culex.retry_dead("q", limit=None)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="limit must be an int, got str"):
        culex.dead_tasks("q", limit="5")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="offset must be >= 0, got -1"):
        culex.dead_tasks("q", offset=-1)
    with pytest.raises(TypeError, match="ids must be a list of task ids, got str"):
        culex.retry_dead("q", ids="abc")
    with pytest.raises(TypeError, match="task id must be a str, got int"):
        culex.retry_dead("q", ids=[1])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="task id must be 1 to"):
        culex.retry_dead("q", ids=["a b"])
    with pytest.raises(ValueError, match="at least one id"):
        interventions.retry_dead(K, [])
    assert culex.retry_dead("q", ids=[]) == []  # nothing asked, nothing sent


# -- the command line ---------------------------------------------------------------------------


def culex_command(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "culex", *args], capture_output=True, text=True, timeout=60
    )


def test_culex_dead_lists_and_retries(r: redis.Redis, url: str) -> None:
    d = driver_of(r)
    known(d)
    kill(d, "short", error="card declined")
    kill(d, "long", error="Traceback (most recent call last):\n  File x\nValueError: " + "x" * 200)
    r.zadd(K.dead, {"short": 2_000_000_000_000, "long": 1_000_000_000_000})

    listed = culex_command("dead", K.name)
    assert listed.returncode == 0, listed.stderr
    *table, total = listed.stdout.splitlines()
    assert total == f"2 of 2 dead task(s) of {K.name}, newest first"
    header, *rows = (re.split(r"\s{2,}", line) for line in table)
    assert header == ["id", "type", "died at", "attempts", "reason"]
    assert [row[0] for row in rows] == ["short", "long"]  # newest first
    assert rows[0][1] == "RevivedJob" and rows[0][3:] == ["1", "card declined"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", rows[0][2])
    assert rows[1][4] == "Traceback (most recent call last): ..."  # one line
    first = culex_command("dead", K.name, "--limit", "1").stdout.splitlines()
    assert len(first) == 3 and first[1].startswith("short")
    assert first[2] == (
        f"1 of 2 dead task(s) of {K.name}, newest first; more: culex dead {K.name} --offset 1 "
        "[--limit N]"
    )
    second = culex_command("dead", K.name, "--offset", "1").stdout.splitlines()
    assert (
        second[1].startswith("long")
        and second[2] == f"2 to 2 of 2 dead task(s) of {K.name}, newest first"
    )

    retried = culex_command("dead", "retry", K.name, "short", "ghost", "--redis-url", url)
    assert retried.returncode == 1, retried.stderr  # (an id was skipped: as culex cancel)
    assert retried.stdout.splitlines() == [
        f"put 1 dead task(s) of {K.name} back in waiting",
        "skipped (not dead, or its record expired): ghost",
    ]
    assert r.zrange(K.waiting, 0, -1) == [b"short"]
    every = culex_command("dead", "retry", K.name, "--all")
    assert every.stdout == f"put 1 dead task(s) of {K.name} back in waiting\n"
    assert culex_command("dead", K.name).stdout == f"no dead tasks in {K.name}\n"


def test_culex_dead_usage_errors(r: redis.Redis) -> None:
    for args in (("retry", "q"), ("retry", "q", "id", "--all"), ("q", "id")):
        done = culex_command("dead", *args)
        assert done.returncode == 2
        assert (
            "usage: culex dead QUEUE [--limit N] [--offset N], or culex dead retry" in done.stderr
        )
    bad = culex_command("dead", "q", "--limit", "0")
    assert bad.returncode == 2 and "limit must be > 0" in bad.stderr


def test_culex_dead_retry_all_of_a_job_shows_its_progress(r: redis.Redis) -> None:
    d = driver_of(r)
    known(d)
    kill(d, "a", "b", "c")
    r.hset(K.task("b"), "type", "OtherJob")
    done = culex_command("dead", "retry", K.name, "--all", "--job", "RevivedJob")
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"put 2 dead task(s) of {K.name} back in waiting\n"
    # stderr is not a terminal here: the bar is one line, at the end
    assert done.stderr.splitlines()[-1] == "retrying [" + "#" * 30 + "] 3/3 (100%)"
    assert sorted(r.zrange(K.waiting, 0, -1)) == [b"a", b"c"] and r.zrange(K.dead, 0, -1) == [b"b"]


def test_culex_dead_purge_asks_first_unless_yes(r: redis.Redis) -> None:
    d = driver_of(r)
    known(d)
    kill(d, "a", "b", "c")
    r.hset(K.task("b"), "type", "OtherJob")
    refused = culex_command("dead", "purge", K.name)  # stdin is no terminal: nobody to ask
    assert refused.returncode == 2 and "add --yes" in refused.stderr
    assert r.zcard(K.dead) == 3
    some = culex_command("dead", "purge", K.name, "--job", "OtherJob", "--yes")
    assert some.returncode == 0, some.stderr
    assert some.stdout == f"deleted 1 dead task(s) of {K.name}\n"
    assert not r.exists(K.task("b")) and r.zcard(K.dead) == 2
    every = culex_command("dead", "purge", K.name, "--yes")
    assert every.stdout == f"deleted 2 dead task(s) of {K.name}\n"
    assert "deleting [" in every.stderr and r.zcard(K.dead) == 0


def test_culex_dead_job_goes_only_with_purge_or_retry_all(r: redis.Redis) -> None:
    wrong = [
        ("q", "--job", "J"),
        ("retry", "q", "id", "--job", "J"),
        ("retry", "q", "--all", "--job", "J", "--limit", "3"),
        ("purge", "q", "id"),
    ]
    for args in wrong:
        done = culex_command("dead", *args)
        assert done.returncode == 2 and "usage: culex dead QUEUE" in done.stderr, args
