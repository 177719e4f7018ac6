"""The order a runner asks its queues in: weights, strict order, and the plain rotation.

Proportions are counted over the tasks that ran, in the order they started; nothing is
timed."""

from __future__ import annotations

from collections import Counter

import pytest
import redis

import culex
from culex._redis.keys import queue_keys
from culex.runner.queue_order import Weighted

from ..conftest import await_until, running

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)

started: list[str] = []  # the queue of each task, in the order the tasks started


class CriticalJob(culex.QueuedJob):
    queue = "w_critical"

    async def perform(self) -> None:
        started.append("critical")


class DefaultJob(culex.QueuedJob):
    queue = "w_default"

    async def perform(self) -> None:
        started.append("default")


class LowJob(culex.QueuedJob):
    queue = "w_low"

    async def perform(self) -> None:
        started.append("low")


WEIGHTED = ["w_critical:6", "w_default:3", "w_low:1"]


async def backlog(each: int) -> None:
    """``each`` tasks waiting in every queue, enqueued before any runner starts."""
    started.clear()
    jobs: list[culex.QueuedJob] = []
    for job in (CriticalJob, DefaultJob, LowJob):
        jobs += [job() for _ in range(each)]
    await culex.aenqueue_many(jobs)


async def first_started(runner: culex.Runner, count: int) -> Counter[str]:
    """How many of the first ``count`` tasks to start came from each queue."""
    async with running(runner):
        await await_until(lambda: len(started) >= count, what=f"{count} tasks to start")
    return Counter(started[:count])


@pytest.mark.parametrize("concurrency", [1, 10])
async def test_weighted_queues_are_taken_in_their_proportions(
    r: redis.Redis, concurrency: int
) -> None:
    await backlog(100)  # none runs dry within the first 100
    counts = await first_started(culex.Runner(run_from=WEIGHTED, concurrency=concurrency), 100)
    assert counts["critical"] > counts["default"] > counts["low"] > 0, counts
    assert 50 <= counts["critical"] <= 70, counts
    assert 22 <= counts["default"] <= 38, counts
    assert 5 <= counts["low"] <= 15, counts


async def test_weights_given_as_a_dict_in_code(r: redis.Redis) -> None:
    await backlog(40)
    weights = {"w_critical": 1, "w_default": 1, "w_low": 2}
    counts = await first_started(culex.Runner(run_from=weights, concurrency=1), 40)
    assert counts["low"] == 20 and counts["critical"] == counts["default"] == 10, counts


async def test_a_weighted_runner_takes_all_there_is_when_the_heavy_queues_are_empty(
    r: redis.Redis,
) -> None:
    started.clear()
    await culex.aenqueue_many(LowJob() for _ in range(30))
    counts = await first_started(culex.Runner(run_from=WEIGHTED, concurrency=10), 30)
    assert counts == {"low": 30}


async def test_strict_queues_run_every_critical_task_before_any_default_one(
    r: redis.Redis,
) -> None:
    await backlog(20)
    culex.configure(strict_queues=True)
    runner = culex.Runner(run_from=WEIGHTED, concurrency=4)  # strict: the weights are ignored
    async with running(runner):
        await await_until(lambda: len(started) == 60, what="every task to start")
    assert started == ["critical"] * 20 + ["default"] * 20 + ["low"] * 20


async def test_plain_names_take_the_queues_in_turns(r: redis.Redis) -> None:
    await backlog(20)
    plain = ["w_critical", "w_default", "w_low"]
    counts = await first_started(culex.Runner(run_from=plain, concurrency=1), 30)
    assert counts == {"critical": 10, "default": 10, "low": 10}


def test_smooth_weighted_round_robin_spreads_the_picks_and_splits_a_turn() -> None:
    keys = [queue_keys("culex", q) for q in ("c", "d", "l")]
    order = Weighted(keys, [6, 3, 1])
    picks = "".join(order.plan(1)[0][0].name for _ in range(10))
    assert picks == "cdccdclcdc"  # every 10 picks: 6, 3, 1, never six c in a row
    queues, shares = order.plan(10)  # a turn of 10 free slots: the whole cycle at once
    assert ([k.name for k in queues], list(shares)) == (["c", "d", "l"], [6, 3, 1])
    queues, shares = order.plan(1003)
    assert sum(shares) == 1003 and shares[0] >= 600 and shares[2] >= 100
