"""The runner against a real server: order, scheduling, retries, dead, hooks, results."""

from __future__ import annotations

import asyncio
import logging
import os
import threading
import time
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
import redis

import culex
from culex._redis.calls import Call
from culex._redis.claims import Claimed, ClaimReply
from culex._redis.drivers import AsyncDriver
from culex._redis.keys import queue_keys
from culex.jobs import failures
from culex.server import configured

from ..conftest import await_until, nested_params, running, server_ms

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)

seen: list[str] = []


class OrderJob(culex.QueuedJob):
    queue = "order"
    n: int

    async def perform(self) -> int:
        seen.append(f"order:{self.n}")
        return self.n


async def test_fifo_order(r: redis.Redis) -> None:
    seen.clear()
    tasks = [await OrderJob(n=i).aenqueue() for i in range(30)]
    async with running(culex.Runner(run_from=["order"], concurrency=1)):
        assert [await t.aresult(timeout=10) for t in tasks] == list(range(30))
    assert seen == [f"order:{i}" for i in range(30)]


async def test_a_runner_warns_of_a_queue_none_of_its_job_classes_runs_on(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level("WARNING", logger="culex"):
        async with running(culex.Runner(run_from=["order", "ordr"])):  # (a typo)
            pass
    said = [m for m in caplog.messages if m.startswith("No job class")]
    assert said == [
        "No job class this runner knows runs on ordr: a task found there goes to dead as one "
        "of an unknown job type (check the queues and the module given to it)"
    ]


class ClockJob(culex.QueuedJob):
    queue = "clock"

    async def perform(self) -> float:
        return datetime.now(UTC).timestamp()


async def test_delay_and_at_run_no_earlier_than_asked(r: redis.Redis) -> None:
    start = datetime.now(UTC)
    delayed = await ClockJob().aenqueue(delay=timedelta(milliseconds=400))
    at = await ClockJob().aenqueue(at=start + timedelta(milliseconds=700))
    now = await ClockJob().aenqueue()
    assert await delayed.astate() is culex.TaskState.SCHEDULED
    assert await now.astate() is culex.TaskState.WAITING
    async with running(culex.Runner(run_from=["clock"])):
        ran_now = await now.aresult(timeout=10)
        ran_delayed = await delayed.aresult(timeout=10)
        ran_at = await at.aresult(timeout=10)
    assert ran_now < ran_delayed < ran_at
    assert ran_delayed >= start.timestamp() + 0.4 - 0.01
    assert ran_at >= start.timestamp() + 0.7 - 0.01


def test_default_backoff_is_two_seconds_times_retry_count_squared() -> None:
    job = OrderJob(n=1)
    assert [job.retry_delay_ms(n) for n in range(1, 6)] == [2000, 8000, 18000, 32000, None]


class AlwaysFailsJob(culex.QueuedJob):
    queue = "fails"
    max_retries = 3
    runs: ClassVar[list[int]] = []

    async def perform(self) -> None:
        AlwaysFailsJob.runs.append(self.attempt)
        raise ValueError(f"attempt {self.attempt} broke")

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(milliseconds=50 * retry_count**2)


async def test_retries_follow_the_interval_then_dead(r: redis.Redis) -> None:
    AlwaysFailsJob.runs = []
    task = await AlwaysFailsJob().aenqueue()
    keys = queue_keys("culex", "fails")
    async with running(culex.Runner(run_from=["fails"])):
        with pytest.raises(culex.TaskFailed, match="attempt 4 broke"):
            await task.aresult(timeout=20)
    assert AlwaysFailsJob.runs == [1, 2, 3, 4]  # max_retries 3: four attempts
    info = await task.ainfo()
    assert info["state"] == "dead" and info["retry_count"] == "4"
    assert r.zscore(keys.dead, task.id) is not None
    assert 0 < r.pttl(keys.task(task.id)) <= 86_400_000


async def test_the_task_s_own_max_retries_decides_as_its_hash_holds_it(r: redis.Redis) -> None:
    # Another producer (or a deploy since) stored another max_retries than the class's: the
    # runner follows the hash, as reclaim.lua does for a lost lease (docs/wire-format.md).
    AlwaysFailsJob.runs = []
    keys = queue_keys("culex", "fails")
    fewer = await AlwaysFailsJob().aenqueue()
    r.hset(keys.task(fewer.id), "max_retries", "1")
    async with running(culex.Runner(run_from=["fails"])):
        with pytest.raises(culex.TaskFailed, match="attempt 2 broke"):
            await fewer.aresult(timeout=20)
    assert AlwaysFailsJob.runs == [1, 2]  # max_retries 1 in the hash: two attempts, not four
    AlwaysFailsJob.runs = []
    unset = await AlwaysFailsJob().aenqueue()
    r.hdel(keys.task(unset.id), "max_retries")  # none in the hash: the class's (3)
    async with running(culex.Runner(run_from=["fails"])):
        with pytest.raises(culex.TaskFailed, match="attempt 4 broke"):
            await unset.aresult(timeout=20)
    assert AlwaysFailsJob.runs == [1, 2, 3, 4]


async def test_retry_is_scheduled_exactly_after_reschedule_interval(r: redis.Redis) -> None:
    class SlowRetryJob(culex.QueuedJob):
        queue = "slow_retry"

        async def perform(self) -> None:
            raise RuntimeError("nope")

    task = await SlowRetryJob().aenqueue()
    async with running(culex.Runner(run_from=["slow_retry"])):

        async def scheduled() -> bool:
            return await task.astate() is culex.TaskState.SCHEDULED

        await await_until(scheduled, what="the retry to be scheduled")
    info = await task.ainfo()
    assert info["state"] == "scheduled" and info["retry_count"] == "1"
    assert int(info["due_at"]) - int(info["failed_at"]) == 2000  # the real formula: 2 s x 1²
    assert "RuntimeError: nope" in info["last_error"]


class NoRetryJob(culex.QueuedJob):
    queue = "no_retry"
    runs = 0

    def perform(self) -> None:
        NoRetryJob.runs += 1
        self.fail("card declined", retry=False)


async def test_fail_without_retry_goes_to_dead_at_once(r: redis.Redis) -> None:
    NoRetryJob.runs = 0
    task = await NoRetryJob().aenqueue()
    async with running(culex.Runner(run_from=["no_retry"])):
        with pytest.raises(culex.TaskFailed, match="card declined"):
            await task.aresult(timeout=10)
    assert NoRetryJob.runs == 1


class NotRescheduleableJob(culex.QueuedJob):
    queue = "not_rescheduleable"
    rescheduleable = False

    def perform(self) -> None:
        raise OSError("disk full")


class RescheduleOnceJob(culex.QueuedJob):
    queue = "reschedule_once"
    runs = 0

    def rescheduleable(self, retry_count: int) -> bool:  # type: ignore[override]
        return retry_count < 2

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(0)

    def perform(self) -> None:
        RescheduleOnceJob.runs += 1
        self.fail("again")


async def test_rescheduleable_attribute_and_method(r: redis.Redis) -> None:
    RescheduleOnceJob.runs = 0
    a = await NotRescheduleableJob().aenqueue()
    b = await RescheduleOnceJob().aenqueue()
    async with running(culex.Runner(run_from=["not_rescheduleable", "reschedule_once"])):
        with pytest.raises(culex.TaskFailed, match="OSError: disk full"):
            await a.aresult(timeout=10)
        with pytest.raises(culex.TaskFailed):
            await b.aresult(timeout=10)
    assert (await a.ainfo())["retry_count"] == "1"
    assert RescheduleOnceJob.runs == 2


class CenturyJob(culex.QueuedJob):
    queue = "century"

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(days=365 * 200)

    def perform(self) -> None:
        raise OSError("remote down")


async def test_a_retry_later_than_a_score_can_hold_ends_the_task_in_dead_with_why(
    r: redis.Redis,
) -> None:
    task = await CenturyJob().aenqueue()
    async with running(culex.Runner(run_from=["century"])):
        with pytest.raises(culex.TaskFailed, match="OSError: remote down"):
            await task.aresult(timeout=10)
    info = await task.ainfo()
    assert (
        info["state"] == "dead"
        and "reschedule_interval() must make a task ready between 1970 and 2109-05-15 07:35 UTC"
        in info["last_error"]
    )


class HookJob(culex.QueuedJob):
    queue = "hooks"
    max_retries = 1
    fail_before: bool
    calls: ClassVar[list[str]] = []

    def before_perform(self) -> None:
        HookJob.calls.append("before")
        if self.fail_before:
            raise RuntimeError("not ready")

    def perform(self) -> str:
        HookJob.calls.append("perform")
        return "done"

    def after_perform(self) -> None:
        HookJob.calls.append("after")

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(0)


async def test_hooks_run_around_perform_and_before_can_fail_the_attempt(r: redis.Redis) -> None:
    HookJob.calls = []
    async with running(culex.Runner(run_from=["hooks"])):
        assert await (await HookJob(fail_before=False).aenqueue()).aresult(timeout=10) == "done"
        assert HookJob.calls == ["before", "perform", "after"]
        HookJob.calls = []
        with pytest.raises(culex.TaskFailed, match="not ready"):
            await (await HookJob(fail_before=True).aenqueue()).aresult(timeout=10)
    # two attempts (max_retries 1), perform never ran, after ran each time
    assert HookJob.calls == ["before", "after", "before", "after"]


class CountingHooks(culex.QueuedJob, abstract=True):
    """A hook inherited from a base of the job's: it runs as one of its own would."""

    calls: ClassVar[list[str]] = []

    def before_perform(self) -> None:
        CountingHooks.calls.append("before")


class AsyncHookJob(CountingHooks):
    queue = "hooks"

    async def perform(self) -> None:
        CountingHooks.calls.append("perform")

    def after_perform(self) -> None:
        CountingHooks.calls.append("after")


class AfterOnlyJob(culex.QueuedJob):
    queue = "hooks"

    def perform(self) -> None:
        CountingHooks.calls.append("perform")

    def after_perform(self) -> None:
        CountingHooks.calls.append("after")


async def test_inherited_hooks_run_around_an_async_perform_and_a_hook_left_as_job_s_is_skipped(
    r: redis.Redis,
) -> None:
    CountingHooks.calls = []
    async with running(culex.Runner(run_from=["hooks"])):
        await (await AsyncHookJob().aenqueue()).aresult(timeout=10)
        assert CountingHooks.calls == ["before", "perform", "after"]
        CountingHooks.calls = []
        await (await AfterOnlyJob().aenqueue()).aresult(timeout=10)
        assert CountingHooks.calls == ["perform", "after"]


class ThreadJob(culex.QueuedJob):
    queue = "threads"

    def perform(self) -> str:
        return threading.current_thread().name


class LoopJob(culex.QueuedJob):
    queue = "threads"

    async def perform(self) -> str:
        return threading.current_thread().name


def test_sync_enqueue_and_sync_and_async_perform(r: redis.Redis) -> None:
    sync_task = ThreadJob().enqueue()
    async_task = LoopJob().enqueue()

    async def run() -> tuple[str, str]:
        async with running(culex.Runner(run_from=["threads"])):
            return await sync_task.aresult(timeout=10), await async_task.aresult(timeout=10)

    in_thread, on_loop = asyncio.run(run())
    assert in_thread.startswith("culex")  # the runner's thread pool
    assert on_loop == threading.current_thread().name
    assert sync_task.state() is culex.TaskState.SUCCEEDED


class ResultJob(culex.QueuedJob):
    queue = "results"
    value: dict[str, list[int]]

    def perform(self) -> dict[str, list[int]]:
        return self.value


async def test_result_round_trip_and_timeout(r: redis.Redis) -> None:
    task = await ResultJob(value={"a": [1, 2]}).aenqueue()
    with pytest.raises(TimeoutError):
        await task.aresult(timeout=0.05)
    async with running(culex.Runner(run_from=["results"])):
        assert await task.aresult(timeout=10) == {"a": [1, 2]}
    assert task.result(timeout=1) == {"a": [1, 2]}


async def test_a_hand_made_task_with_a_bad_id_or_queue_is_a_clear_error_before_any_io() -> None:
    nowhere = "redis://127.0.0.1:1/0"  # nothing listens: any I/O would be ServerUnavailable
    for task, error, message in (
        (culex.Task("a b", "results", nowhere), ValueError, "task id must be 1 to"),
        (culex.Task(7, "results", nowhere), TypeError, "task id must be a str"),  # type: ignore[arg-type]
        (culex.Task("t1", "a{b}", nowhere), ValueError, "braces, spaces"),
        (culex.Task("t1", None, nowhere), TypeError, "queue name must be a str"),  # type: ignore[arg-type]
    ):
        for call in (task.state, task.info, task.result, task.retry, task.cancel):
            with pytest.raises(error, match=message):
                call()
        for acall in (task.astate, task.ainfo, task.aresult, task.aretry, task.acancel):
            with pytest.raises(error, match=message):
                await acall()
    with pytest.raises(culex.ConfigurationError, match="timeout must be a timedelta"):
        culex.Task("t1", "results", nowhere).result(timeout="soon")  # type: ignore[arg-type]


class StrictJob(culex.QueuedJob):
    queue = "broken"
    n: int

    def perform(self) -> int:
        return self.n


async def test_broken_tasks_go_to_dead_and_the_runner_goes_on(r: redis.Redis) -> None:
    keys = queue_keys("culex", "broken")
    garbage = await StrictJob(n=1).aenqueue()
    r.hset(keys.task(garbage.id), "params", b"\xff\xfe{not json")
    unknown = await StrictJob(n=2).aenqueue()
    r.hset(keys.task(unknown.id), "type", "NoSuchJob")
    missing = await StrictJob(n=3).aenqueue()
    r.hset(keys.task(missing.id), "params", "{}")
    wrong = await StrictJob(n=4).aenqueue()
    r.hset(keys.task(wrong.id), "params", '{"n": "four"}')
    good = await StrictJob(n=5).aenqueue()
    async with running(culex.Runner(run_from=["broken"])):
        assert await good.aresult(timeout=10) == 5
        reasons = {}
        for task in (garbage, unknown, missing, wrong):
            with pytest.raises(culex.TaskFailed) as failed:
                await task.aresult(timeout=10)
            reasons[task.id] = failed.value.reason
    assert "not valid JSON" in reasons[garbage.id]
    assert "unknown job type 'NoSuchJob'" in reasons[unknown.id]
    assert "required param 'n'" in reasons[missing.id]
    assert "StrictJob.n" in reasons[wrong.id]
    assert r.zcard(keys.dead) == 4
    attempts = [(await t.ainfo())["attempt"] for t in (garbage, unknown, missing, wrong)]
    assert attempts == ["1", "1", "1", "1"]


NUMBERS = {"one": 1}


class RenamedParamJob(culex.QueuedJob):
    """Reads what its older version stored (``number``, a word) through a from_params of
    its own."""

    queue = "prepared"
    n: int

    @classmethod
    def from_params(cls, raw: object) -> culex.Job:
        if isinstance(raw, dict) and "number" in raw:
            raw = {"n": NUMBERS[raw["number"]]}  # a KeyError for a word it does not know
        lease = raw.pop("lease", None) if isinstance(raw, dict) else None
        job = super().from_params(raw)
        if lease is not None:  # (a lease of the task's own: the runner reads it after this)
            setattr(job, "lease", lease)  # noqa: B010
        return job

    def perform(self) -> int:
        return self.n


async def test_a_task_whose_preparation_raises_anything_is_dead_and_no_longer_held(
    r: redis.Redis,
) -> None:
    """A RecursionError (params nested too deep) or a KeyError from the job's own
    from_params is no ValueError, and a lease that is no duration is refused once the job
    object is made: each still makes the task broken, the runner goes on, and it renews
    no lease of them."""
    keys = queue_keys("culex", "prepared")
    deep = await RenamedParamJob(n=1).aenqueue()
    r.hset(keys.task(deep.id), "params", nested_params(1500))
    unknown = await RenamedParamJob(n=1).aenqueue()
    r.hset(keys.task(unknown.id), "params", '{"number": "seven"}')
    no_lease = await RenamedParamJob(n=1).aenqueue()
    r.hset(keys.task(no_lease.id), "params", '{"n": 1, "lease": "soon"}')
    old = await RenamedParamJob(n=1).aenqueue()
    r.hset(keys.task(old.id), "params", '{"number": "one"}')
    runner = culex.Runner(run_from=["prepared"], concurrency=1)
    async with running(runner):
        reasons = {}
        for task in (deep, unknown, no_lease):
            with pytest.raises(culex.TaskFailed) as failed:
                await task.aresult(timeout=10)
            reasons[task.id] = failed.value.reason
        assert await old.aresult(timeout=10) == 1
        keeper = runner._keeper
        assert keeper is not None
        await await_until(lambda: not keeper._held, what="the runner to hold no task")
    assert reasons[deep.id].startswith("broken task: params cannot be read: RecursionError")
    assert reasons[unknown.id] == "broken task: KeyError: 'seven'"
    assert reasons[no_lease.id] == (
        "broken task: ConfigurationError: lease must be a timedelta or a number of seconds, "
        "got 'soon'"
    )
    assert [(await t.ainfo())["attempt"] for t in (deep, unknown, no_lease)] == ["1"] * 3
    [kept] = failures.attempt_errors((await unknown.ainfo())["errors"])
    assert 'raw = {"n": NUMBERS[raw["number"]]}' in kept.traceback  # (the job's own line)


async def test_a_stale_completion_changes_nothing(r: redis.Redis) -> None:
    """A runner whose lease was lost reports late: the report is refused."""
    from culex._redis import claims, reports
    from culex.server import configured

    keys = queue_keys("culex", "order")
    task = await OrderJob(n=1).aenqueue()
    driver = await configured.async_driver()
    first = await driver.run(
        claims.claim(keys, limit=1, lease_ms=1, promote_limit=0, dead_ttl_ms=1000)
    )
    lease_end = r.zscore(keys.pending, task.id) or 0
    await await_until(lambda: server_ms(r) > lease_end, what="the 1 ms lease to end")
    await driver.run(claims.reclaim(keys, limit=10, dead_ttl_ms=1000, dead_max=10))
    r.zadd(keys.scheduled, {task.id: 0})
    second = await driver.run(
        claims.claim(keys, limit=1, lease_ms=60_000, promote_limit=10, dead_ttl_ms=1000)
    )
    assert second.tasks[0].attempt == first.tasks[0].attempt + 1
    before = r.hgetall(keys.task(task.id))
    stale = reports.complete(keys, [(task.id, first.tasks[0].attempt, "-1", 1000)])
    assert await driver.run(stale) == [(task.id, first.tasks[0].attempt)]
    assert r.hgetall(keys.task(task.id)) == before
    fresh = reports.complete(keys, [(task.id, second.tasks[0].attempt, "2", 1000)])
    assert await driver.run(fresh) == []
    assert await task.aresult(timeout=1) == 2


async def test_a_batch_with_two_attempts_of_one_task_says_only_the_stale_one_refused(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    """Attempt 1 lost its lease and attempt 2 ran: both successes in one complete call.
    Only attempt 1 is refused, and only it is logged so (the refusal names the attempt)."""
    from culex import config
    from culex._redis import claims, reports
    from culex.runner.lease import LeaseKeeper
    from culex.runner.outbox import Outbox
    from culex.runner.outcome import Outcome
    from culex.runner.reporter import Reporter

    keys = queue_keys("culex", "order")
    task = await OrderJob(n=1).aenqueue()
    driver = await configured.async_driver()
    first = await driver.run(
        claims.claim(keys, limit=1, lease_ms=60_000, promote_limit=0, dead_ttl_ms=1000)
    )
    r.zadd(keys.pending, {task.id: 0})  # its lease ran out
    await driver.run(claims.reclaim(keys, limit=10, dead_ttl_ms=1000, dead_max=10))
    second = await driver.run(
        claims.claim(keys, limit=1, lease_ms=60_000, promote_limit=0, dead_ttl_ms=1000)
    )
    old, new = first.tasks[0], second.tasks[0]
    assert (old.id, new.id) == (task.id, task.id) and new.attempt == old.attempt + 1
    both = [(task.id, old.attempt, "1", 1000), (task.id, new.attempt, "2", 1000)]
    assert await driver.run(reports.complete(keys, both)) == [(task.id, old.attempt)]

    third = await OrderJob(n=3).aenqueue()  # the same through the runner's reporter
    one = await driver.run(
        claims.claim(keys, limit=1, lease_ms=60_000, promote_limit=0, dead_ttl_ms=1000)
    )
    r.zadd(keys.pending, {third.id: 0})
    await driver.run(claims.reclaim(keys, limit=10, dead_ttl_ms=1000, dead_max=10))
    two = await driver.run(
        claims.claim(keys, limit=1, lease_ms=60_000, promote_limit=0, dead_ttl_ms=1000)
    )
    settings = config.settings()
    keeper = LeaseKeeper(settings, settings.redis_url or "")
    outbox = [Outcome(one.tasks[0], "3"), Outcome(two.tasks[0], "3")]
    with caplog.at_level(logging.WARNING, logger="culex"):
        await Reporter(settings, driver, keeper, Outbox(outbox)).flush()
    refused = [m for m in caplog.messages if "refused" in m]
    assert len(refused) == 1 and f"(attempt {one.tasks[0].attempt})" in refused[0]
    assert await third.aresult(timeout=1) == 3


async def test_idle_runner_wakes_on_new_work_without_waiting_idle_wait(r: redis.Redis) -> None:
    culex.configure(idle_wait=30)  # a missed wake-up would make this test time out
    async with running(culex.Runner(run_from=["order"])):
        await await_until(lambda: blocked_clients(r) == 1, what="the runner's wait for a signal")
        task = await OrderJob(n=7).aenqueue()
        assert await task.aresult(timeout=5) == 7


async def test_an_idle_runner_claims_in_the_same_round_trip_as_its_wake_up(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The claim rides behind the blocking wait: the server runs it as the wait ends."""
    exchanges: list[tuple[list[str], list[object]]] = []  # what was sent, what came back

    class Recording(AsyncDriver):
        async def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
            replies: list[Any] = []
            exchanges.append(
                ([c.script.name if c.script else str(c.args[0]) for c in calls], replies)
            )
            replies += await super().run_many(calls)
            return replies

    async def recording(
        url: str, socket_timeout: float, retry_for: float = 0, busy_poll: float = 0.0
    ) -> Recording:
        return Recording(url, socket_timeout=socket_timeout)

    monkeypatch.setattr(configured, "new_async_driver", recording)
    culex.configure(idle_wait=30)
    async with running(culex.Runner(run_from=["order"])):
        await await_until(  # the runner waits once it found the queue empty
            lambda: any(words[0] == "BLPOP" for words, _ in exchanges), what="the wait for work"
        )
        task = await OrderJob(n=8).aenqueue()
        assert await task.aresult(timeout=5) == 8
    took = [
        words
        for words, replies in exchanges
        if any(isinstance(x, ClaimReply) and any(t.id == task.id for t in x.tasks) for x in replies)
    ]
    assert took == [["BLPOP", "claim"]]


async def test_a_task_claimed_behind_the_wait_starts_before_the_wait_is_done(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It starts in the loop step that reads the reply, not in a done callback of the
    wait one step later (each step is a select and a cold cache after idling)."""
    starts: dict[str, bool] = {}  # task id -> the wait was still in flight when it started
    start = culex.Runner._start

    def recording(runner: culex.Runner, claimed: Claimed) -> None:
        waiters = runner._claimer.waiters.values() if runner._claimer else []
        starts[claimed.id] = any(not waiter.done() for waiter in waiters)
        start(runner, claimed)

    monkeypatch.setattr(culex.Runner, "_start", recording)
    culex.configure(idle_wait=30)
    runner = culex.Runner(run_from=["order"])
    async with running(runner):
        await await_until(  # the runner waits once it found the queue empty
            lambda: runner._claimer is not None and bool(runner._claimer.waiters),
            what="the wait for work",
        )
        task = await OrderJob(n=9).aenqueue()
        assert await task.aresult(timeout=5) == 9
    assert starts == {task.id: True}


async def test_graceful_stop_hands_running_tasks_back(r: redis.Redis) -> None:
    started = asyncio.Event()

    class SleepyJob(culex.QueuedJob):
        queue = "sleepy"

        async def perform(self) -> None:
            started.set()
            await asyncio.sleep(60)

    culex.configure(grace_period=0.1)
    task = await SleepyJob().aenqueue()
    async with running(culex.Runner(run_from=["sleepy"])):
        await asyncio.wait_for(started.wait(), 10)
    keys = queue_keys("culex", "sleepy")
    assert await task.astate() is culex.TaskState.WAITING
    assert r.zcard(keys.pending) == 0
    assert (await task.ainfo())["retry_count"] == "0"


async def test_a_named_job_goes_by_its_name_on_the_wire_at_claim_and_in_logs(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    class RenamedJob(culex.QueuedJob):
        name = "billing.Renamed"
        queue = "renamed"
        n: int

        def perform(self) -> int:
            self.log("ran")
            return self.n

    task = await RenamedJob(n=3).aenqueue()
    assert r.hget(queue_keys("culex", "renamed").task(task.id), "type") == b"billing.Renamed"
    with caplog.at_level(logging.INFO, logger="culex"):
        async with running(culex.Runner(run_from=["renamed"])):
            assert await task.aresult(timeout=10) == 3
    assert "[billing.Renamed] ran" in caplog.messages
    culex.registry.remove(RenamedJob)


class _Said(logging.Handler):
    """Sets ``event`` (from any thread) when a culex log line contains ``words``."""

    def __init__(self, words: str, event: asyncio.Event) -> None:
        super().__init__()
        self.words, self.event = words, event
        self.loop = asyncio.get_running_loop()

    def emit(self, record: logging.LogRecord) -> None:
        if self.words in record.getMessage():
            self.loop.call_soon_threadsafe(self.event.set)


async def test_arun_keeps_a_sync_task_that_outlives_the_grace_period_and_waits_for_it(
    r: redis.Redis,
) -> None:
    """On an application's own loop the runner cannot end the thread (nor the process), so
    it does not hand the task back beside its running thread: it waits for perform."""
    started, finish = threading.Event(), threading.Event()

    class ThreadBoundJob(culex.QueuedJob):
        queue = "thread_bound"

        def perform(self) -> int:
            started.set()
            finish.wait(30)
            return 7

    culex.configure(grace_period=0.1)
    task = await ThreadBoundJob().aenqueue()
    kept = asyncio.Event()
    handler = _Said("runs on in a thread after the grace period", kept)
    logging.getLogger("culex").addHandler(handler)
    runner = culex.Runner(run_from=["thread_bound"])
    running = asyncio.create_task(runner.arun())
    try:
        await asyncio.get_running_loop().run_in_executor(None, started.wait, 10)
        runner.stop()
        await asyncio.wait_for(kept.wait(), 10)  # the grace period is over
        assert await task.astate() is culex.TaskState.PENDING and not running.done()
        finish.set()
        await asyncio.wait_for(running, 30)
    finally:
        finish.set()
        logging.getLogger("culex").removeHandler(handler)
    assert await task.aresult(timeout=5) == 7
    assert (await task.ainfo())["attempt"] == "1"


async def test_a_process_child_is_killed_before_its_task_is_handed_back(
    r: redis.Redis, tmp_path: Path
) -> None:
    pid_file = tmp_path / "child.pid"

    class ChildJob(culex.QueuedJob):
        queue = "child_stop"
        isolation = "process"

        def perform(self) -> None:
            pid_file.write_text(str(os.getpid()))
            time.sleep(60)

    culex.configure(grace_period=0.1)
    task = await ChildJob().aenqueue()
    async with running(culex.Runner(run_from=["child_stop"])):
        await await_until(
            lambda: pid_file.exists() and pid_file.read_text(), what="the child to start"
        )
    assert await task.astate() is culex.TaskState.WAITING
    with pytest.raises(ProcessLookupError):
        os.kill(int(pid_file.read_text()), 0)


async def test_thousands_of_concurrent_async_enqueues_share_a_bounded_set_of_connections(
    r: redis.Redis,
) -> None:
    from culex._redis.drivers import MAX_CONNECTIONS

    before = len(r.client_list())
    tasks = await asyncio.gather(*(OrderJob(n=n).aenqueue() for n in range(1500)))
    assert len({t.id for t in tasks}) == 1500
    assert r.zcard(queue_keys("culex", "order").waiting) == 1500
    assert len(r.client_list()) - before <= MAX_CONNECTIONS


def blocked_clients(r: redis.Redis) -> int:
    """Clients the server holds in a blocking command (the runner's wait for a signal)."""
    return int(r.info("clients")["blocked_clients"])


class SpoilsItsOwnKeyJob(culex.QueuedJob):
    """Fails after its task key was overwritten with a string: its report is refused by
    the server (WRONGTYPE) every time it is sent."""

    queue = "spoilt"
    max_retries = 0
    url: str = ""

    def perform(self) -> None:
        client = redis.Redis.from_url(self.url)
        key = queue_keys("culex", "spoilt").task(self.task_id)
        client.delete(key)
        client.set(key, "not a hash")
        raise ValueError("and then it fails")


class SetsABadResultTtlJob(culex.QueuedJob):
    queue = "spoilt"

    def perform(self) -> str:
        # (set on the object while it runs, past the class's checks and the type checker's)
        self.__dict__["result_ttl"] = -1
        return "done"


async def test_a_report_the_server_refuses_for_good_is_dropped_and_its_task_reclaimed(
    r: redis.Redis, url: str, caplog: pytest.LogCaptureFixture
) -> None:
    culex.configure(lease=1)  # (the reclaimer takes the dropped task within about a lease)
    spoilt = await SpoilsItsOwnKeyJob(url=url).aenqueue()
    odd_ttl = await SetsABadResultTtlJob().aenqueue()
    keys = queue_keys("culex", "spoilt")
    with caplog.at_level(logging.WARNING, logger="culex"):
        async with running(culex.Runner(run_from=["spoilt"])):
            assert await odd_ttl.aresult(timeout=20) == "done"  # (kept for the setting's)

            def buried() -> bool:
                return r.exists(keys.task(spoilt.id) + ":wrongtype") == 1

            # (while its report was resent, its lease was renewed: the reclaimer took it
            # only once the report was dropped with its lease)
            await await_until(buried, 60, what="the refused task to be reclaimed as broken")
    assert "refused 5 times, dropped" in caplog.text
    assert r.zscore(keys.dead, spoilt.id) is not None
    assert r.zscore(keys.pending, spoilt.id) is None
