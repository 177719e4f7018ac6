"""The recent successes of a queue (issue 31): complete.lua keeps the newest 1,000 ids in
<queue>:succeeded; `culex tasks --state succeeded` and inspection.tasks list them newest
first; an id whose record expired is listed with its id and end alone (and leaves the set
by its count); the set is kept a day, whatever the records' TTL."""

from __future__ import annotations

from typing import cast

import pytest
import redis

import culex
from culex import cli, logs
from culex._redis import claims, reports
from culex._redis.keys import queue_keys
from culex.operations import inspection
from culex.testing import drain

from ..conftest import driver_of

K = queue_keys("culex", "history")


class HistoryJob(culex.QueuedJob):
    queue = "history"
    n: int = 0

    def perform(self) -> int:
        return self.n


def _succeed(r: redis.Redis, count: int) -> list[str]:
    """Enqueue ``count`` tasks and report them all succeeded in one batch (as a runner)."""
    ids = [t.id for t in culex.enqueue_many([HistoryJob(n=i) for i in range(count)])]
    d = driver_of(r)
    claimed = d.run(
        claims.claim(K, limit=count, lease_ms=60_000, promote_limit=0, dead_ttl_ms=60_000)
    )
    d.run(reports.complete(K, [(t.id, t.attempt, "1", 3_600_000) for t in claimed.tasks]))
    return ids


def test_culex_tasks_lists_the_successes_newest_first(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(logs, "configure", lambda *args, **kwargs: None)
    first = HistoryJob(n=1).enqueue()
    drain("history")
    second = HistoryJob(n=2).enqueue()
    drain("history")
    HistoryJob(n=3).enqueue()  # (waiting: not a success)
    page = inspection.tasks("history", "succeeded")
    assert [row.id for row in page.rows] == [second.id, first.id]
    assert {row.state for row in page.rows} == {"succeeded"} and page.total == 2
    assert page.rows[0].at * 1000 == int(r.hget(K.task(second.id), "finished_at") or 0)
    oldest = inspection.tasks("history", "succeeded", newest_first=False, limit=1)
    assert [row.id for row in oldest.rows] == [first.id] and oldest.next_cursor is not None
    assert cli.main(["tasks", "history", "--state", "succeeded", "--redis-url", url]) == 0
    out = capsys.readouterr().out
    assert out.index(second.id) < out.index(first.id)
    assert "succeeded" in out.splitlines()[0] and "succeeded holds 2" in out


def test_the_history_keeps_the_newest_1000(r: redis.Redis) -> None:
    ids = _succeed(r, 1003)
    assert r.zcard(K.succeeded) == 1000
    assert 43_200_000 < r.pttl(K.succeeded) <= 86_400_000  # (a day, past its hashes)
    kept = {m.decode() for m in cast(list[bytes], r.zrange(K.succeeded, 0, -1))}
    assert kept <= set(ids) and len(set(ids) - kept) == 3


def test_an_expired_record_is_listed_by_its_id_and_a_reused_id_is_skipped(r: redis.Redis) -> None:
    old, gone, new = _succeed(r, 3)
    r.zadd(K.succeeded, {old: 1, gone: 2})  # (oldest first, so that the prune reaches them)
    r.delete(K.task(gone))  # its hash expired
    r.hset(K.task(old), "state", "waiting")  # its id used again by a new task
    page = inspection.tasks("history", "succeeded")
    assert [row.id for row in page.rows] == [new, gone]
    expired = page.rows[1]
    assert (expired.job, expired.state, expired.at, expired.params) == ("", "succeeded", 0.002, "")
    assert page.total == 3  # (the set's size: the stale ids are still in it)
    # A job or a kind asks what the record said: an expired one is no row then.
    assert [row.id for row in inspection.tasks("history", "succeeded", job="HistoryJob").rows] == [
        new
    ]
    assert inspection.tasks("history", "succeeded", search=gone[:4]).rows[-1].id == gone


class ReturnsNoneJob(culex.QueuedJob):
    queue = "history"

    def perform(self) -> None:
        pass


def test_successes_that_returned_none_stay_listed_after_their_records_expired(
    r: redis.Redis,
) -> None:
    tasks = [ReturnsNoneJob().enqueue() for _ in range(3)]
    drain("history")
    ttl = r.pttl(K.task(tasks[0].id))
    assert 0 < ttl <= 1000  # (successful_job_ttl: 1 s)
    # The history outlives them by far: a day.
    assert r.pttl(K.succeeded) > 43_200_000
    for task in tasks:
        r.delete(K.task(task.id))  # (as their records expire)
    page = inspection.tasks("history", "succeeded")
    assert sorted(row.id for row in page.rows) == sorted(t.id for t in tasks)
    assert {row.state for row in page.rows} == {"succeeded"} and page.total == 3


def test_a_bad_state_is_refused_before_any_io(r: redis.Redis) -> None:
    with pytest.raises(ValueError, match="succeeded"):
        inspection.tasks("history", "finished")
    assert r.dbsize() == 0
