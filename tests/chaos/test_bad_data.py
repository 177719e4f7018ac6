"""Scenario 6: bad data put into Redis by hand, as a buggy foreign producer or an operator
might. The runner keeps serving every other task and queue; each bad task ends in dead with
a reason; a queue whose key has the wrong type is reported unhealthy and retried with
back-off, and its key is never deleted.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator

import pytest
import redis

from culex._redis.keys import queue_keys

from .chaos_jobs import QUEUE, ChaosJob, OtherChaosJob
from .fleet import Fleet
from .ledger import DEAD, FINAL, SUCCEEDED, Ledger, text
from .ledger import key_bytes as key
from .workload import Producer, drain, publish

WRONG_QUEUE = "chaos_wrong"
GOOD_PER_QUEUE = 200
HUGE = 10 * 1024 * 1024
OBSERVE = 8.0  # seconds the wrong-type queue is watched (at least)
NON_UTF8_ID = b"bad-\xff\xfe-id"


Fields = dict[str | bytes, bytes | str | int]


def _task(task_id: bytes, **fields: bytes | str | int) -> tuple[bytes, Fields]:
    task: Fields = {
        "id": task_id,
        "type": "ChaosJob",
        "queue": QUEUE,
        "params": '{"ms": 10}',
        "enqueue_time": int(time.time() * 1000),
        "retry_count": 0,
        "attempt": 0,
        "max_retries": 4,
        "state": "waiting",
    }
    for name, value in fields.items():
        task[name] = value
    return task_id, task


# What each bad task is, and what it must end as.
BAD: dict[str, tuple[str, Callable[[], tuple[bytes, Fields] | None]]] = {
    "garbage params": (DEAD, lambda: _task(b"bad-params", params=b"\x00\xff\xfegarbage{")),
    "garbage counters": (
        DEAD,
        lambda: _task(b"bad-counters", attempt=b"\xff\xfe", retry_count=b"x", max_retries=b"?"),
    ),
    "garbage hash": (
        DEAD,
        lambda: (b"bad-hash", {b"\x00\x01\xff": b"\xff" * 16, b"\xfe\x80": b"\x00garbage\x81"}),
    ),
    "id with no hash": (DEAD, lambda: None),
    "10 MB params": (
        DEAD,
        lambda: _task(b"bad-huge", params='{"ms": 10}' + " " * HUGE),  # valid JSON, too big
    ),
    "non-UTF-8 params": (DEAD, lambda: _task(b"bad-utf8-params", params=b'{"ms": "\xff\xfe"}')),
    "non-UTF-8 type": (DEAD, lambda: _task(b"bad-utf8-type", type=b"Chaos\xffJob")),
    # The content is fine: running it or burying it are both right, losing it is not.
    "non-UTF-8 id": (FINAL, lambda: _task(NON_UTF8_ID)),
}
NO_HASH_ID = b"bad-no-hash"


@pytest.fixture
def raw(r: redis.Redis, url: str) -> Iterator[redis.Redis]:
    """A client of its own (r is flushed first); keys that are not UTF-8 are sent as bytes."""
    client = redis.Redis.from_url(url)
    try:
        yield client
    finally:
        client.close()


def _plant(raw: redis.Redis, ledger: Ledger) -> dict[str, str]:
    """Write the bad data; returns the id (as text) of each bad task by its name."""
    keys = queue_keys("culex", QUEUE)
    ids: dict[str, str] = {}
    for name, (expect, make) in BAD.items():
        made = make()
        task_id, fields = made if made is not None else (NO_HASH_ID, {})
        written = text(task_id)
        if fields:
            raw.hset(key(keys.task(written)), mapping=fields)  # type: ignore[arg-type]
        raw.zadd(keys.waiting, {task_id: int(time.time() * 1000)})
        ledger.sending(written, QUEUE, expect)
        ledger.acknowledged(written)  # a write that succeeded is as good as acknowledged
        ids[name] = written
    raw.set(queue_keys("culex", WRONG_QUEUE).waiting, "x")
    return ids


def test_bad_data_by_hand(
    raw: redis.Redis, url: str, ledger: Ledger, fleets: Callable[..., Fleet]
) -> None:
    bad = _plant(raw, ledger)
    fleet = fleets(
        url, concurrency=8, queues=[QUEUE, "chaos_other", WRONG_QUEUE], env={"CULEX_LEASE": "5"}
    )
    seen = _wrongtype_count(raw)
    runner = fleet.start()
    began = time.monotonic()
    work = [(f"good-{n:04d}", ChaosJob(ms=10), SUCCEEDED) for n in range(GOOD_PER_QUEUE)]
    work += [(f"other-{n:04d}", OtherChaosJob(ms=10), SUCCEEDED) for n in range(GOOD_PER_QUEUE)]
    producer = Producer(ledger, work[::2] + work[1::2], rate=100)
    producer.start()
    wrongtype: list[float] = []  # when the server refused a command with WRONGTYPE
    while producer.is_alive() or time.monotonic() - began < OBSERVE:
        count = _wrongtype_count(raw)
        wrongtype += [time.monotonic() - began] * (count - seen)
        seen = count
        time.sleep(0.02)
    drain_s = drain(raw, ledger, timeout=20)
    verdict = ledger.check(raw)
    keys = queue_keys("culex", QUEUE)
    ends = {name: raw.hmget(key(keys.task(i)), "state", "last_error") for name, i in bad.items()}
    in_dead = {name: raw.zscore(keys.dead, key(i)) is not None for name, i in bad.items()}
    executed = {e.id for e in verdict.executions}
    wrong_key = queue_keys("culex", WRONG_QUEUE).waiting
    unhealthy = [
        line
        for line in runner.log_text().splitlines()
        if WRONG_QUEUE in line and "unhealthy" in line
    ]
    gaps = [round(b - a, 2) for a, b in itertools.pairwise(wrongtype)]
    publish(
        "bad-data",
        {
            "good_tasks": 2 * GOOD_PER_QUEUE,
            "bad_tasks": {
                name: {
                    "state": _show(state),
                    "last_error": _show(error)[:120],
                    "in_dead": in_dead[name],
                    "executed": bad[name] in executed,
                }
                for name, (state, error) in ends.items()
            },
            "wrongtype_refusals": len(wrongtype),
            "wrongtype_retry_gaps_s": gaps,
            "unhealthy_reports_in_log": len(unhealthy),
            "wrong_type_key_kept": raw.type(wrong_key) == b"string",
            "runner_alive": runner.alive(),
            "drain_s": round(drain_s, 1),
            **verdict.figures(),
        },
    )
    assert runner.alive(), runner.log_text()[-3000:]
    assert verdict.ok, verdict.problems()
    for name, (expect, _) in BAD.items():
        if expect == DEAD:
            assert in_dead[name], f"{name}: not in dead"
            assert bad[name] not in executed, f"{name}: a bad task was run"
    assert raw.type(wrong_key) == b"string" and raw.get(wrong_key) == b"x", "the key was changed"
    assert len(unhealthy) >= 2, f"queue {WRONG_QUEUE} not reported unhealthy (and retried)"
    assert len(wrongtype) >= 3, f"the wrong-type queue was not retried: {wrongtype}"
    assert gaps[-1] >= 2 * gaps[0], f"retries of the wrong-type queue do not back off: {gaps}"


def _wrongtype_count(r: redis.Redis) -> int:
    stats = r.info("errorstats")
    return int(stats.get("errorstat_WRONGTYPE", {}).get("count", 0))


def _show(value: object) -> str:
    return "" if value is None else text(value)
