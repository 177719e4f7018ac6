"""The retry policy beyond max_retries: retry_on (which exceptions retry), retry_jitter (a
delay drawn from half of it to all of it) and max_retry_delay (a cap), run by real runners;
self.fail() is the job's own decision, which retry_on does not overrule."""

from __future__ import annotations

from datetime import timedelta
from typing import ClassVar

import pytest
import redis

import culex
from culex.errors import ConfigurationError
from culex.jobs import retry_policy
from culex.jobs.task import TaskState

from ..conftest import await_until, running

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)


class PickyRetryJob(culex.QueuedJob):
    """Retries a ConnectionError only; its retries wait an hour, capped at 40 s, jittered."""

    queue = "picky_retry"
    retry_on: ClassVar[tuple[type[BaseException], ...] | None] = (ConnectionError,)
    retry_jitter = True
    max_retry_delay = timedelta(seconds=40)
    kind: str

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(hours=1)

    def perform(self) -> None:
        if self.kind == "connection":
            raise ConnectionRefusedError("down")  # (a subclass of ConnectionError)
        if self.kind == "fail":
            self.fail("told to fail")  # retry=True: the job's own decision
        raise ValueError("bad input")


class PickyChildRetryJob(PickyRetryJob):
    queue = "picky_retry_child"
    isolation = "process"


class CappedRetryJob(culex.QueuedJob):
    """No jitter: the capped delay is exactly max_retry_delay."""

    queue = "capped_retry"
    max_retry_delay = 7

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(days=2)

    def perform(self) -> None:
        raise RuntimeError("again")


async def scheduled(task: culex.Task) -> dict[str, str]:
    async def info() -> dict[str, str] | None:
        found = await task.ainfo()
        return found if found.get("state") == "scheduled" else None

    return await await_until(info, what="the retry to be scheduled")


def delay_of(info: dict[str, str]) -> int:
    """The retry's delay: fail.lua writes due_at and failed_at from one clock reading."""
    return int(info["due_at"]) - int(info["failed_at"])


@pytest.mark.parametrize("job", [PickyRetryJob, PickyChildRetryJob], ids=["thread", "process"])
async def test_retry_on_sends_an_exception_it_does_not_list_to_dead_at_once(
    r: redis.Redis, job: type[PickyRetryJob]
) -> None:
    unlisted = await job(kind="value").aenqueue()
    listed = await job(kind="connection").aenqueue()
    failed = await job(kind="fail").aenqueue()
    async with running(culex.Runner(run_from=[job.queue])):
        with pytest.raises(culex.TaskFailed) as dead:
            await unlisted.aresult(timeout=20)
        assert dead.value.reason == "ValueError: bad input"
        for task in (listed, failed):
            info = await scheduled(task)
            assert info["retry_count"] == "1"
            assert 20_000 <= delay_of(info) <= 40_000  # capped at 40 s, then jittered
    info = await unlisted.ainfo()
    assert (info["state"], info["retry_count"], info["attempt"]) == ("dead", "1", "1")
    assert (await failed.ainfo())["last_error"] == "told to fail"


async def test_max_retry_delay_caps_the_backoff(r: redis.Redis) -> None:
    task = await CappedRetryJob().aenqueue()
    async with running(culex.Runner(run_from=[CappedRetryJob.queue])):
        info = await scheduled(task)
    assert delay_of(info) == 7_000
    assert await task.astate() == TaskState.SCHEDULED


def test_jitter_draws_from_half_the_delay_to_all_of_it() -> None:
    job = PickyRetryJob(kind="value")
    drawn = {retry_policy.shaped_delay_ms(job, 10_000) for _ in range(300)}
    assert min(drawn) >= 5_000 and max(drawn) <= 10_000 and len(drawn) > 1
    capped = {retry_policy.shaped_delay_ms(job, 3_600_000) for _ in range(300)}
    assert min(capped) >= 20_000 and max(capped) <= 40_000
    plain = CappedRetryJob()
    assert retry_policy.shaped_delay_ms(plain, 5_000) == 5_000  # below the cap, no jitter
    assert retry_policy.shaped_delay_ms(plain, 8_000) == 7_000


def test_every_exception_retries_without_retry_on_and_none_with_an_empty_tuple() -> None:
    assert retry_policy.retries(CappedRetryJob, ValueError("x"))
    assert retry_policy.retries(PickyRetryJob, ConnectionResetError("x"))
    assert not retry_policy.retries(PickyRetryJob, KeyError("x"))
    assert retry_policy.retries(PickyRetryJob, culex.JobFailure("x"))

    class NeverRetryJob(culex.QueuedJob):
        retry_on = ()

        def perform(self) -> None:
            pass

    try:
        assert not retry_policy.retries(NeverRetryJob, ConnectionError("x"))
    finally:
        culex.registry.remove(NeverRetryJob)


@pytest.mark.parametrize(
    ("attribute", "value", "error", "message"),
    [
        ("retry_on", ConnectionError, TypeError, "must be a tuple of exception classes"),
        ("retry_on", ("ConnectionError",), TypeError, "must be a tuple of exception classes"),
        ("retry_on", [ConnectionError], TypeError, "must be a tuple of exception classes"),
        ("retry_jitter", 1, TypeError, "retry_jitter must be True or False"),
        ("max_retry_delay", "1h", ConfigurationError, "max_retry_delay must be a timedelta"),
        ("max_retry_delay", -5, ConfigurationError, "max_retry_delay must be a finite"),
    ],
)
def test_a_retry_policy_a_runner_could_not_use_is_refused_at_class_definition(
    attribute: str, value: object, error: type[Exception], message: str
) -> None:
    with pytest.raises(error, match=message):
        type("BadPolicyJob", (culex.QueuedJob,), {attribute: value, "perform": lambda self: None})
    assert culex.registry.get("BadPolicyJob") is None
