"""Pause, resume and limits: the user's API, its checks, queue_control.lua, the claim's admission
and what it tells a runner, the command line, and a cluster."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
import redis

import culex
from culex import config
from culex._redis import calls, claims, interventions
from culex._redis.keys import QueueKeys, queue_keys
from culex.cli import main
from culex.errors import ConfigurationError, ServerError
from culex.jobs import enqueue
from culex.jobs.limits import Rate, rate
from culex.operations.queue_control import controls
from culex.runner.claimer import Claimer

from ..conftest import driver_of, running, server_ms, snapshot
from ..topology import Cluster

K = queue_keys("culex", "steered")
DAY_MS = 86_400_000


class SteeredJob(culex.QueuedJob):
    queue = "steered"
    ran: list[int] = []  # noqa: RUF012

    n: int = 0

    async def perform(self) -> None:
        SteeredJob.ran.append(self.n)


@pytest.fixture(autouse=True)
def _clean() -> Iterator[None]:
    SteeredJob.ran.clear()
    yield


def claim(
    r: redis.Redis,
    limit: int = 10,
    *,
    rate: tuple[int, int] | None = None,
    concurrency: int | None = None,
) -> claims.ClaimReply:
    call = claims.claim(
        K, limit=limit, lease_ms=30_000, promote_limit=100, dead_ttl_ms=DAY_MS, rate=rate,
        concurrency=concurrency,
    )  # fmt: skip
    return driver_of(r).run(call)


# -- rates and declarations ------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "count", "ms"),
    [("100/s", 100, 1000), ("10/m", 10, 60_000), ("1000/h", 1000, 3_600_000),
     ("5/10s", 5, 10_000), ("3 / 500ms", 3, 500)],
)  # fmt: skip
def test_a_rate_reads_as_people_write_it(text: str, count: int, ms: int) -> None:
    assert (rate(text).count, rate(text).window_ms) == (count, ms)
    assert rate(Rate(count, per=timedelta(milliseconds=ms))) == rate(text)


@pytest.mark.parametrize("bad", ["100", "0/s", "-1/s", "10/d", "ten/s", 100, None, "1/0s"])
def test_a_rate_that_is_not_one_is_a_clear_error(bad: object) -> None:
    with pytest.raises(ConfigurationError, match=r"rate|count|window"):
        rate(bad)


def test_a_job_class_declares_limits_that_are_checked_when_it_is_defined() -> None:
    with pytest.raises(ConfigurationError, match=r"BadRateJob\.rate_limit"):

        class BadRateJob(culex.QueuedJob):
            rate_limit = "fast"

    with pytest.raises(ConfigurationError, match=r"BadCapJob\.concurrency_limit"):

        class BadCapJob(culex.QueuedJob):
            concurrency_limit = 0

    class CappedJob(culex.QueuedJob):
        queue = "capped"
        concurrency_limit = 3
        rate_limit = "10/s"

    class AlsoCappedJob(culex.QueuedJob):  # the same limits, or none: fine
        queue = "capped"
        concurrency_limit = 3

    with pytest.raises(TypeError, match="limits belong to the queue"):

        class OtherCapJob(culex.QueuedJob):
            queue = "capped"
            concurrency_limit = 4

    limits = culex.registry.queue_limits("capped")
    assert (limits.rate, limits.concurrency) == (Rate(10), 3)
    for job in (CappedJob, AlsoCappedJob):
        culex.registry.remove(job)


# -- queue_control.lua: pause, resume, limits at run time ------------------------------------


def test_pause_and_resume_are_kept_in_the_queue_and_say_its_state(r: redis.Redis) -> None:
    assert culex.pause("steered").paused
    assert r.hgetall(K.control) == {b"paused": b"1"}
    assert controls(queues=["steered"])["steered"].paused
    state = culex.resume("steered")
    assert not state.paused and (state.rate, state.concurrency) == (None, None)
    assert r.exists(K.control) == 0
    assert r.llen(K.signal) == 1  # resuming wakes a runner


async def test_the_async_twins(r: redis.Redis) -> None:
    assert (await culex.apause("steered")).paused
    assert (await culex.alimit("steered", concurrency=2)).concurrency == 2
    assert not (await culex.aresume("steered")).paused


async def test_a_runner_says_which_of_its_queues_are_paused_as_it_starts(
    r: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    await culex.apause("steered")
    r.set("culex:{other}:control", "not a hash")  # (skipped, as the claim skips it)
    with caplog.at_level("WARNING", logger="culex"):
        async with running(culex.Runner(run_from=["steered", "other", "free"])):
            pass
    said = [m for m in caplog.messages if m.startswith("Paused")]
    assert said == ["Paused: steered (their tasks wait until resumed: culex resume QUEUE)"]
    await culex.aresume("steered")
    caplog.clear()
    with caplog.at_level("WARNING", logger="culex"):
        async with running(culex.Runner(run_from=["steered"])):
            pass
    assert not [m for m in caplog.messages if m.startswith("Paused")]


def test_limits_set_at_run_time_replace_lift_and_reset(r: redis.Redis) -> None:
    state = culex.limit("steered", rate="50/s", concurrency=3)
    assert (state.rate, state.concurrency) == (Rate(50), 3)
    state = culex.limit("steered", rate=None)  # lifted; concurrency stays
    assert (state.rate, state.concurrency) == ("none", 3)
    assert r.hgetall(K.control) == {b"rate": b"0", b"rate_ms": b"0", b"concurrency": b"3"}
    state = culex.limit("steered", reset=True)
    assert (state.rate, state.concurrency) == (None, None)


@pytest.mark.parametrize(
    "kwargs",
    [{}, {"rate": "lots"}, {"concurrency": 0}, {"concurrency": True}, {"concurrency": "2"},
     {"reset": True, "rate": "1/s"}, {"reset": "yes"}],
)  # fmt: skip
def test_bad_limits_are_refused_before_anything_is_written(
    r: redis.Redis, kwargs: dict[str, object]
) -> None:
    with pytest.raises(ConfigurationError):
        culex.limit("steered", **kwargs)  # type: ignore[arg-type]
    assert r.exists(K.control) == 0


@pytest.mark.parametrize(
    "args",
    [["paused", "2"], ["speed", "1"], ["rate", "5"], ["rate", "5", "rate_ms", "0"],
     ["concurrency", "-1"], ["concurrency"]],
)  # fmt: skip
def test_control_refuses_a_bad_change_before_any_write(r: redis.Redis, args: list[str]) -> None:
    before = snapshot(r)
    with pytest.raises(ServerError, match="control"):
        driver_of(r).run(interventions.control(K, {})._replace(args=tuple(args)))
    assert snapshot(r) == before


# -- the claim's admission --------------------------------------------------------------


def test_a_paused_queue_claims_nothing_but_still_promotes_due_tasks(r: redis.Redis) -> None:
    SteeredJob(n=1).enqueue()
    SteeredJob(n=2).enqueue(delay=0.001)
    culex.pause("steered")
    r.delete(K.signal)
    asyncio.run(asyncio.sleep(0.01))
    reply = claim(r)
    assert reply.tasks == [] and r.zcard(K.waiting) == 2 and r.zcard(K.scheduled) == 0
    culex.resume("steered")
    assert len(claim(r).tasks) == 2


def test_the_concurrency_limit_counts_the_queues_pending_set(r: redis.Redis) -> None:
    for n in range(5):
        SteeredJob(n=n).enqueue()
    assert len(claim(r, concurrency=2).tasks) == 2
    assert claim(r, concurrency=2).tasks == []
    assert r.hget(K.control, "blocked") == b"1"  # the end of a running one wakes a runner
    culex.limit("steered", concurrency=3)  # replaces the declared 2
    assert len(claim(r, concurrency=2).tasks) == 1


def test_the_rate_limit_counts_starts_and_says_when_the_next_is_allowed(r: redis.Redis) -> None:
    for n in range(5):
        SteeredJob(n=n).enqueue()
    first = claim(r, rate=(3, 60_000))
    assert len(first.tasks) == 3
    started = server_ms(r)
    later = claim(r, rate=(3, 60_000))
    assert later.tasks == []
    # the oldest start leaves the window a minute after it was made: the runner's next claim
    assert started - 60 <= later.next_due_ms - 60_000 <= started  # type: ignore[operator]
    assert r.zcard(K.starts) == 3 and 0 < r.pttl(K.starts) <= 60_000  # the window ends


async def test_a_runner_waits_for_the_rate_window_then_runs_the_rest(r: redis.Redis) -> None:
    culex.limit("steered", rate=Rate(2, per=timedelta(milliseconds=300)))
    tasks = [SteeredJob(n=n).enqueue() for n in range(6)]
    async with running(culex.Runner(run_from=["steered"])):
        for task in tasks:
            await task.aresult(timeout=10)
    starts = sorted(int(r.hget(K.task(t.id), "started_at") or 0) for t in tasks)
    assert all(b - a >= 300 for a, b in zip(starts, starts[2:], strict=False))  # 2 in any 300 ms
    assert sorted(SteeredJob.ran) == list(range(6))


async def test_a_runner_held_by_the_rate_limit_claims_again_only_when_a_start_is_allowed(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    claims: list[int] = []
    original = Claimer._claim_call

    def counted(self: Claimer, keys: QueueKeys, limit: int) -> calls.Call[Any]:
        if keys.name == "steered":
            claims.append(limit)
        return original(self, keys, limit)

    monkeypatch.setattr(Claimer, "_claim_call", counted)
    culex.limit("steered", rate=Rate(1, per=timedelta(seconds=2)))
    first, second = SteeredJob(n=1).enqueue(), SteeredJob(n=2).enqueue()
    async with running(culex.Runner(run_from=["steered"])):
        await first.aresult(timeout=10)
        before = len(claims)
        await second.aresult(timeout=10)
    # Polling would claim at each wake-up (every idle_wait, 0.1 s: some 20 claims in the
    # 2 s the rate holds the second task back); held, the runner claims the queue when the
    # reply said a start is allowed, and not before.
    assert len(claims) - before <= 3, claims


def test_an_old_claim_without_the_control_keys_ignores_flow_control(r: redis.Redis) -> None:
    SteeredJob(n=1).enqueue()
    culex.pause("steered")
    call = claims.claim(K, limit=1, lease_ms=30_000, promote_limit=1, dead_ttl_ms=DAY_MS)
    old = call._replace(keys=call.keys[:7], args=call.args[:4])  # a runner of before
    assert len(driver_of(r).run(old).tasks) == 1


# -- the command line -------------------------------------------------------------------


def test_the_command_line_pauses_limits_and_resumes(
    r: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    r.sadd("culex:queues", "steered")  # (a queue culex has seen: culex pause refuses others)
    assert main(["pause", "steered"]) == 0
    assert capsys.readouterr().out == "steered: paused\n"
    unknown = "not known: no runner runs this queue"  # (no runner: nothing declared known)
    assert main(["limit", "steered", "--rate", "50/s", "--concurrency", "3"]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "steered: paused",
        "  rate               50/s  set at run time",
        "  concurrency        3     set at run time",
        f"  group rate         none  {unknown}",
        f"  group concurrency  none  {unknown}",
    ]
    assert main(["limit", "steered", "--rate", "none"]) == 0
    assert capsys.readouterr().out.splitlines()[1] == "  rate               none  set at run time"
    assert main(["resume", "steered"]) == 0
    assert capsys.readouterr().out == "steered: running; rate none; concurrency 3\n"
    assert main(["limit", "steered", "--reset"]) == 0
    assert capsys.readouterr().out.splitlines()[1:3] == [
        f"  rate               none  {unknown}",
        f"  concurrency        none  {unknown}",
    ]
    assert main(["limit", "steered", "--concurrency", "many"]) == 2
    assert "concurrency must be a whole number" in capsys.readouterr().err
    enqueue._registered.clear()  # (this process named the queue before the test's flush)
    SteeredJob().enqueue()
    culex.pause("steered")
    assert main(["queues"]) == 0
    assert capsys.readouterr().out.splitlines()[1].endswith("s  paused")
    culex.limit("steered", rate="50/s", group_concurrency=2)
    assert main(["queues"]) == 0
    assert (
        capsys.readouterr()
        .out.splitlines()[1]
        .endswith("s  paused; rate 50/s; group concurrency 2")
    )
    culex.resume("steered")
    culex.limit("steered", reset=True)
    assert main(["queues"]) == 0
    assert capsys.readouterr().out.splitlines()[1].endswith("s")  # (the latency: nothing more)


# -- a cluster: every key of the claim in the queue's slot --------------------------------


async def test_pause_and_limits_on_a_cluster(
    cluster: Cluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CULEX_REDIS_URL", cluster.url)
    config.reset()
    try:
        await culex.apause("steered")
        await culex.alimit("steered", concurrency=1, rate="100/s")
        tasks = [await SteeredJob(n=n).aenqueue() for n in range(4)]
        async with running(culex.Runner(run_from=["steered"])):
            await culex.aresume("steered")
            for task in tasks:
                await task.aresult(timeout=10)
        assert sorted(SteeredJob.ran) == [0, 1, 2, 3]
    finally:
        monkeypatch.undo()
        config.reset()
