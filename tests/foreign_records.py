"""Records as a foreign producer, an older version or a foreign runner may have left them,
written by hand with raw commands: bytes that are not UTF-8 in a job type, params, an
error, a queue name and the counters; scores of -inf and +inf; runner records with fields
missing or of the wrong kind; a periodic entry scored +inf; limits that are no numbers;
params nested 1,500 deep.

Every page, CLI listing and scrape must show them as stored, never fail (the tests of the
dashboard and of the CLI plant them with :func:`plant`)."""

from __future__ import annotations

import time

import redis

QUEUE = "foreign"
BAD_QUEUE = b"bad\xffname"  # a queue name that is not UTF-8
SHOWN_BAD_QUEUE = "bad\ufffdname"  # as the pages show it
BAD_TYPE = b"Job\xff"  # a job type that is not UTF-8
SHOWN_BAD_TYPE = "Job\ufffd"
# Each task by id: (its state's set, its score; None: in no set).
IDS = {
    "t-bytes": ("waiting", "now"),
    "t-deep": ("waiting", "now"),
    "t-low": ("waiting", "-inf"),
    "t-high": ("waiting", "+inf"),
    "t-due-low": ("scheduled", "-inf"),
    "t-due-high": ("scheduled", "+inf"),
    "t-lease": ("pending", "+inf"),
    "t-dead": ("dead", "now"),
    "t-dead-high": ("dead", "+inf"),
}
DEEP = "[" * 1500 + "]" * 1500  # 3 KB of JSON that json.loads cannot nest so deep


def plant(r: redis.Redis) -> None:
    """Write every odd record under the prefix culex (the test server is empty)."""
    now_ms = int(time.time() * 1000)
    base = f"culex:{{{QUEUE}}}"
    for task_id, (state, score) in IDS.items():
        r.hset(
            f"{base}:task:{task_id}",
            mapping={
                "id": task_id,
                "queue": QUEUE,
                "type": BAD_TYPE,
                "params": DEEP if task_id == "t-deep" else b'{"note": "\xff\xfe"}',
                "state": state,
                "enqueue_time": now_ms if task_id == "t-bytes" else "inf",
                "due_at": "nan",
                "retry_count": "x",
                "attempt": "1",
                "last_error": b"boom \xc3(",
                "group": b"g\xff",
                "priority": "high",
                "dedupe_key": b"\xfe",
            },
        )
        r.zadd(f"{base}:{state}", {task_id: now_ms if score == "now" else float(score)})
    r.sadd("culex:queues", QUEUE, BAD_QUEUE)
    # Limits set at run time as no culex writes them.
    r.hset(f"{base}:control", mapping={"rate": "fast", "rate_ms": "1000", "concurrency": "-3"})
    bad_base = b"culex:{" + BAD_QUEUE + b"}"
    r.hset(
        bad_base + b":task:t-1", mapping={"type": BAD_TYPE, "params": b"\xff", "state": "waiting"}
    )
    r.zadd(bad_base + b":waiting", {"t-1": now_ms})
    r.hset(bad_base + b":task:t-\xff", mapping={"type": BAD_TYPE, "state": "dead"})
    r.zadd(bad_base + b":dead", {b"t-\xff": now_ms})
    # The counters of a buried task whose job type is not UTF-8 (never expiring totals).
    minute = now_ms // 60_000 * 60
    for queue_base in (base.encode(), bad_base):
        r.hset(queue_base + b":stats:total", mapping={BAD_TYPE + b"|d": 1, b"minute": minute})
        r.hset(queue_base + b":stats:m:%d" % minute, mapping={BAD_TYPE + b"|d": 1})
    # Runner records: a guessed one (host and pid only), tasks=[1], started as a string, one
    # not UTF-8.
    runners = {
        "r-guessed": {"host": "elsewhere", "pid": "1"},
        "r-tasks": {
            "id": "r-tasks",
            "host": "h",
            "pid": "2",
            "tasks": '[1, null, {"id": 3}]',
            "started": str(now_ms),
            "beat": str(now_ms),
        },
        "r-started": {
            "id": "r-started",
            "host": "h",
            "pid": "x",
            "started": "soon",
            "beat": "later",
            "concurrency": "many",
            "tasks": "{",
        },
        "r-bytes": {
            "id": "r-bytes",
            "host": b"h\xff",
            "queues": BAD_QUEUE + b",foreign",
            "version": b"\xff",
            "started": str(now_ms),
            "tasks": b'[{"queue": "foreign", "id": "t-bytes", "job": "J\xff", '
            b'"attempt": "one", "started": "x"}]',
        },
    }
    for runner_id, record in runners.items():
        r.hset(f"culex:{{runners}}:runner:{runner_id}", mapping=record)  # type: ignore[arg-type]
        r.zadd("culex:{runners}", {runner_id: now_ms + 3_600_000})
    # Periodic entries: one scored +inf; records with fields of the wrong kind.
    r.zadd("culex:periodic", {f"{QUEUE} Tick".encode(): float("inf")})
    r.zadd("culex:periodic", {b"foreign Tock\xff": now_ms + 3_600_000})
    r.hset(
        f"{base}:periodic:Tick",
        mapping={"schedule": b"every \xff", "next_slot": "soon", "last_enqueued_at": "1e400",
                 "last_task": "t-bytes", "last_outcome": b"\xff", "timezone": "No/Such_Zone"},
    )  # fmt: skip
    r.hset(
        base.encode() + b":periodic:Tock\xff",
        mapping={
            "schedule": "every 1m",
            "next_slot": str(now_ms),
            "last_enqueued_at": "1" + "0" * 20,  # (the year 3 billion)
            "timezone": b"\xff",
        },
    )
