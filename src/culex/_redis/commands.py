"""The plain commands culex sends (no script): reads, bookkeeping, server checks and the
blocking waits, each described as a :class:`~culex._redis.calls.Call`. No I/O here.

Every read is bounded (a key, or a range with a LIMIT): nothing here scans the keyspace.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from .calls import Call, number, shown, text
from .keys import QueueKeys, runner_key, runners_key
from .priority import ready_ms

# What a listing of dead tasks reads of each.
DEAD_FIELDS = ("type", "last_error", "retry_count", "attempt", "finished_at")


def parse_hash(reply: list[bytes]) -> dict[str, str]:
    """A hash's fields (their names as stored: two never become one) and values as read
    (:func:`~culex._redis.calls.shown`: bytes that are not UTF-8 as U+FFFD)."""
    return {text(reply[i]): shown(reply[i + 1]) for i in range(0, len(reply), 2)}


def read_task(keys: QueueKeys, task_id: str) -> Call[dict[str, str]]:
    """All fields of a task's hash ({} when it has expired or never existed)."""
    return Call((), ("HGETALL", keys.task(task_id)), parse_hash)


COUNTED = ("waiting", "pending", "scheduled", "dead")


def count(keys: QueueKeys) -> list[Call[int]]:
    """The sizes of a queue's sets, run together with ``run_many``; :func:`sizes` reads the
    replies as a count per state (waiting holds the tasks of groups too)."""
    return [
        Call((), ("ZCARD", key), int)
        for key in (keys.waiting, keys.pending, keys.scheduled, keys.dead, keys.grouped_ready)
    ]


COUNT_CALLS = 5  # how many calls count() makes for one queue


def sizes(replies: Sequence[int]) -> dict[str, int]:
    """The replies of :func:`count` as {state: how many tasks}."""
    waiting, pending, scheduled, dead, grouped = replies
    return {"waiting": waiting + grouped, "pending": pending, "scheduled": scheduled, "dead": dead}


def read_control(keys: QueueKeys) -> Call[dict[str, str]]:
    """A queue's control hash: paused, the limits set at run time, blocked (claim.lua)."""
    return Call((), ("HGETALL", keys.control), parse_hash)


def oldest_waiting(keys: QueueKeys) -> list[Call[int | None]]:
    """When the task that runs next became ready (ms; None: none is ready), as two calls
    (:func:`earliest` reads their replies): the first in ``waiting`` (the highest priority,
    then the earliest ready), and the first of the groups' ready tasks. A score of -inf or
    +inf (stored by a foreign producer) holds no time: None, as for none."""

    def parse(reply: list[bytes]) -> int | None:
        return ready_ms(float(reply[1])) if reply and math.isfinite(float(reply[1])) else None

    return [
        Call((), ("ZRANGE", key, 0, 0, "WITHSCORES"), parse)
        for key in (keys.waiting, keys.grouped_ready)
    ]


def earliest(replies: Sequence[int | None]) -> int | None:
    """The replies of :func:`oldest_waiting` as one time (ms), or None."""
    found = [ready for ready in replies if ready is not None]
    return min(found) if found else None


def register_queue(registry_key: str, *queues: str) -> Call[int]:
    return Call((), ("SADD", registry_key, *queues), int)


def known_queues(registry_key: str) -> Call[list[str]]:
    return Call((), ("SMEMBERS", registry_key), lambda r: sorted(text(x) for x in r))


def wait_signal(signal_keys: Sequence[str], timeout: float) -> Call[bool]:
    """Block until a queue is signalled (True) or the timeout passes (False)."""
    wait = round(timeout, 3)
    return Call((), ("BLPOP", *signal_keys, wait), lambda r: r is not None, blocks=wait)


def ping() -> Call[bool]:
    return Call((), ("PING",), lambda reply: reply == b"PONG")


def server_info() -> Call[dict[str, str]]:
    """The ``field:value`` lines of ``INFO server`` (version, process id, executable...)."""

    def parse(reply: bytes) -> dict[str, str]:
        fields: dict[str, str] = {}
        for line in text(reply).splitlines():
            name, sep, value = line.partition(":")
            if sep and not line.startswith("#"):
                fields[name] = value
        return fields

    return Call((), ("INFO", "server"), parse)


def shutdown() -> Call[None]:
    """Stop the server, flushing its AOF (a server that obeys closes the connection)."""
    return Call((), ("SHUTDOWN",), lambda reply: None)


def config_get(name: str) -> Call[str | None]:
    """One server setting (CONFIG GET), or None when the server does not have it."""

    def parse(reply: list[bytes]) -> str | None:
        return text(reply[1]) if len(reply) > 1 else None

    return Call((), ("CONFIG", "GET", name), parse)


def has_command(name: str) -> Call[bool]:
    """Whether the server knows the command (COMMAND INFO; e.g. WAITAOF, since Redis 7.2)."""
    return Call((), ("COMMAND", "INFO", name), lambda reply: bool(reply) and reply[0] is not None)


def has_wait_fsync() -> Call[bool]:
    """Whether the server can run :func:`wait_fsync` (WAITAOF: Redis 7.2+ and Valkey)."""
    return has_command("WAITAOF")


def connected_replicas() -> Call[int]:
    """How many replicas are connected to the server now (INFO replication)."""

    def parse(reply: bytes) -> int:
        for line in text(reply).splitlines():
            if line.startswith("connected_slaves:"):
                return number(line.partition(":")[2])
        return 0

    return Call((), ("INFO", "replication"), parse)


def wait_fsync(timeout_ms: int) -> Call[bool]:
    """WAITAOF 1 0: True once the server has fsynced every write of this connection so far
    to its append-only file, False when the timeout passed first."""
    return Call(
        (),
        ("WAITAOF", 1, 0, timeout_ms),
        lambda r: number(r[0]) >= 1,
        blocks=timeout_ms / 1000,
        confirms=True,
    )


def wait_replica(timeout_ms: int) -> Call[bool]:
    """WAIT 1: True once a replica has acknowledged every write of this connection so far."""
    return Call(
        (),
        ("WAIT", 1, timeout_ms),
        lambda r: number(r) >= 1,
        blocks=timeout_ms / 1000,
        confirms=True,
    )


def read_periodic(keys: QueueKeys, job_type: str) -> Call[dict[str, str]]:
    """A periodic job's record ({} when no runner has scheduled it yet)."""
    return Call((), ("HGETALL", keys.periodic(job_type)), parse_hash)


def register_periodic(registry_key: str, entries: Sequence[tuple[str, int]]) -> Call[int]:
    """Record periodic jobs in the registry: (``<queue> <job type>``, when its entry lapses
    in ms) each. Sent with :func:`drop_lapsed` and :func:`expire_at` in the same batch."""
    args: list[str | int] = []
    for member, until_ms in entries:
        args += (until_ms, member)
    return Call((), ("ZADD", registry_key, *args), int)


def drop_lapsed(registry_key: str, now_ms: int) -> Call[int]:
    """Remove the members of a sorted set scored by expiry whose time has passed."""
    return Call((), ("ZREMRANGEBYSCORE", registry_key, "-inf", f"({now_ms}"), int)


def expire_at(key: str, at_ms: int) -> Call[int]:
    """Let ``key`` expire at ``at_ms`` (ms since the epoch, server clock)."""
    return Call((), ("PEXPIREAT", key, at_ms), int)


MAX_PERIODIC_JOBS = 1000  # the most periodic jobs a listing reads


def periodic_entries(registry_key: str) -> Call[list[tuple[str, float]]]:
    """(``<queue> <job type>``, when its entry lapses in ms) of the registered periodic jobs
    (a lapsed one may still be listed: compare with the server's clock; +inf: never)."""

    def parse(reply: list[bytes]) -> list[tuple[str, float]]:
        return [(text(reply[i]), float(reply[i + 1])) for i in range(0, len(reply), 2)]

    return Call((), ("ZRANGE", registry_key, 0, MAX_PERIODIC_JOBS - 1, "WITHSCORES"), parse)


def server_time() -> Call[int]:
    """The server's clock in ms: the one clock periodic slots are computed from."""
    return Call((), ("TIME",), lambda reply: int(reply[0]) * 1000 + int(reply[1]) // 1000)


def dead_ids(keys: QueueKeys, *, limit: int, offset: int = 0) -> Call[list[tuple[str, float]]]:
    """(id, time of death in ms, as stored: -inf or +inf from a foreign producer) of dead
    tasks, newest first, from ``offset`` on."""

    def parse(reply: list[bytes]) -> list[tuple[str, float]]:
        return [(text(reply[i]), float(reply[i + 1])) for i in range(0, len(reply), 2)]

    return Call((), ("ZRANGE", keys.dead, offset, offset + limit - 1, "REV", "WITHSCORES"), parse)


def read_dead(keys: QueueKeys, task_id: str) -> Call[dict[str, str]]:
    """The fields of a dead task that a listing shows ({} when its hash has expired).

    Send one per id with ``run_many``: a page of the dead set in one round trip."""

    def parse(reply: list[bytes | None]) -> dict[str, str]:
        return {name: shown(v) for name, v in zip(DEAD_FIELDS, reply, strict=True) if v is not None}

    return Call((), ("HMGET", keys.task(task_id), *DEAD_FIELDS), parse)


def dead_count(keys: QueueKeys) -> Call[int]:
    """How many ids the dead set holds."""
    return Call((), ("ZCARD", keys.dead), int)


def block_until_done(keys: QueueKeys, task_id: str, timeout: float) -> Call[Any]:
    """Block until the script that ends the task pushes to its done list, or ``timeout``
    (s) passes. The element goes back onto the list, so every waiter wakes."""
    return block_on(keys.done(task_id), timeout)


def block_on(done: str, timeout: float) -> Call[Any]:
    """Block until the list ``done`` holds an element, or ``timeout`` (s) passes; the
    element goes back onto the list (BLMOVE from the list to itself), so every waiter
    wakes: a task's end, a workflow run's end."""
    # Whole ms, rounded up: a wait that ended early would cost one more; 0 would be forever.
    seconds = max(1, math.ceil(timeout * 1000)) / 1000
    return Call((), ("BLMOVE", done, done, "LEFT", "RIGHT", seconds), _same, blocks=seconds)


def _same(reply: Any) -> Any:
    return reply


def cluster_enabled() -> Call[bool]:
    """Whether the server is a node of a cluster (INFO cluster: ``cluster_enabled:1``)."""

    def parse(reply: bytes) -> bool:
        return "cluster_enabled:1" in text(reply)

    return Call((), ("INFO", "cluster"), parse)


MAX_RUNNERS = 1000  # the most runners a listing reads


def runner_ids(prefix: str) -> Call[list[str]]:
    """The ids in the runner registry (a record that expired since may still be listed:
    read each with :func:`read_runner`, which finds it gone)."""
    return Call(
        (),
        ("ZRANGE", runners_key(prefix), 0, MAX_RUNNERS - 1),
        lambda reply: [text(x) for x in reply],
    )


def count_runners(prefix: str, now_ms: int) -> Call[int]:
    """How many runners have a record that lives past ``now_ms`` (server clock): the
    registry's scores are the records' expiry times."""
    return Call((), ("ZCOUNT", runners_key(prefix), f"({now_ms}", "+inf"), int)


def read_runner(prefix: str, runner_id: str) -> Call[dict[str, str]]:
    """One runner's record ({} when it stopped beating and its record expired)."""
    return Call((), ("HGETALL", runner_key(prefix, runner_id)), parse_hash)


def runner_fields(prefix: str, runner_id: str, fields: tuple[str, ...]) -> Call[dict[str, str]]:
    """Those ``fields`` of one runner's record that it has ({} when it expired)."""

    def parse(reply: list[Any]) -> dict[str, str]:
        return {name: text(v) for name, v in zip(fields, reply, strict=True) if v is not None}

    return Call((), ("HMGET", runner_key(prefix, runner_id), *fields), parse)


# What find_task reads of a task's hash.
ROW_FIELDS = (
    "type", "state", "enqueue_time", "retry_count", "last_error", "params", "finished_at",
    "priority", "group",
)  # fmt: skip


def read_row(keys: QueueKeys, task_id: str) -> Call[dict[str, str]]:
    """The fields of a task that a row shows ({} when it has no hash)."""

    def parse(reply: list[bytes | None]) -> dict[str, str]:
        return {name: shown(v) for name, v in zip(ROW_FIELDS, reply, strict=True) if v is not None}

    return Call((), ("HMGET", keys.task(task_id), *ROW_FIELDS), parse)


def set_score(key: str, task_id: str) -> Call[float | None]:
    """An id's score in one of a queue's sets (None: not there)."""
    return Call((), ("ZSCORE", key, task_id), lambda reply: None if reply is None else float(reply))


def set_size(key: str) -> Call[int]:
    """How many ids one of a queue's sets holds."""
    return Call((), ("ZCARD", key), int)


def first_ids(key: str, limit: int) -> Call[list[str]]:
    """The first ``limit`` members of a sorted set of task ids, lowest score first."""
    return Call((), ("ZRANGE", key, 0, limit - 1), lambda reply: [text(x) for x in reply])


def read_fields(keys: QueueKeys, task_id: str, names: Sequence[str]) -> Call[list[str | None]]:
    """Some fields of a task's hash, in order (None for a field it lacks)."""
    return Call(
        (),
        ("HMGET", keys.task(task_id), *names),
        lambda reply: [None if v is None else shown(v) for v in reply],
    )


def flush_all() -> Call[bool]:
    """Empty every database of the server (culex.testing's server, between two tests)."""
    return Call((), ("FLUSHALL",), lambda reply: reply in (b"OK", "OK"))


def read_counters(keys: QueueKeys, step: str, start: int) -> Call[dict[str, str]]:
    """A queue's counters of one minute or hour bucket (``step``), that starts at ``start``
    (epoch seconds): ``{"<job>|<field>": value}``, {} when nothing ended then (or expired)."""
    key = keys.stats_minute(start) if step == "minute" else keys.stats_hour(start)
    return Call((), ("HGETALL", key), parse_hash)


def read_counter_totals(keys: QueueKeys) -> Call[dict[str, str]]:
    """A queue's counters since counting began (they never expire)."""
    return Call((), ("HGETALL", keys.stats_total), parse_hash)


def unfolded_minute(keys: QueueKeys) -> Call[int | None]:
    """The start of a queue's minute bucket that is not yet added to its hour bucket and to
    the totals (the field ``minute`` of the totals; None: no minute was counted yet)."""

    def parse(reply: bytes | None) -> int | None:
        return number(reply, -1) if reply is not None and number(reply, -1) >= 0 else None

    return Call((), ("HGET", keys.stats_total, "minute"), parse)


MAX_CANCEL_REQUESTS = 1000  # read per queue and check; more wait for the next check


def cancel_requests(keys: QueueKeys) -> Call[list[str]]:
    """The ids of the running tasks of a queue whose cancel was requested (cancel.lua),
    oldest first."""
    return first_ids(keys.cancels, MAX_CANCEL_REQUESTS)


def exists(key: str) -> Call[bool]:
    """Whether ``key`` exists (``culex task ID``: which known queue holds a task)."""
    return Call((key,), ("EXISTS", key), lambda r: bool(r))
