"""The runner's hold on tasks: claim them (each with a lease and an attempt number), renew
the leases (heartbeat) along with the runner's own record (beat), and take back the tasks
whose lease expired (reclaim). Each builds a :class:`~culex._redis.calls.Call`; no I/O here.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from . import scripts
from .calls import Arg, Call, number, text, text_pairs, texts
from .keys import QueueKeys, runner_key, runners_key

BURIED_FIELDS = 3  # a task the claim buried, in its reply: id, type, last_error


class Claimed:
    """A task handed to a runner by claim, with the attempt that fences its reports."""

    __slots__ = (
        "attempt",
        "enqueue_time",
        "headers",
        "id",
        "max_retries",
        "params",
        "queue",
        "retry_count",
        "run",
        "trace",
        "type",
    )

    def __init__(self, queue: str, row: Sequence[Any]) -> None:
        self.queue = queue
        self.id = text(row[0])
        self.attempt: int = row[1]
        self.type = text(row[2])
        self.params: bytes = row[3]
        self.retry_count = number(row[4])
        self.max_retries = number(row[5], -1)
        self.enqueue_time = number(row[6])
        self.trace: bytes = row[7] if len(row) > 7 else b""  # the producer's, for tracing.py
        self.run: str = text(row[8]) if len(row) > 8 else ""  # a workflow node's run, "" for none
        self.headers: bytes = row[9] if len(row) > 9 else b""  # JSON (middleware), b"" for none


@dataclass(frozen=True, slots=True)
class ClaimReply:
    """Claimed tasks, the server time, and when the next scheduled task is due (or None)."""

    now_us: int
    next_due_ms: int | None
    tasks: list[Claimed]
    held_until_ms: int | None = None  # the queue's rate limit holds ready tasks back till then
    # The tasks this claim buried (broken, cancelled, expired): (id, job type, last_error).
    dead: tuple[tuple[str, str, str], ...] = ()

    @property
    def now_ms(self) -> int:
        return self.now_us // 1000

    @property
    def held_for(self) -> float | None:
        """Seconds until the queue's rate limit allows a start again, when it held ready
        tasks back (None: it did not)."""
        if self.held_until_ms is None:
            return None
        return max(0.0, (self.held_until_ms * 1000 - self.now_us) / 1e6)

    @property
    def next_due_in(self) -> float | None:
        """Seconds from the server's now to the next due task (None: none is scheduled)."""
        if self.next_due_ms is None:
            return None
        return max(0.0, (self.next_due_ms * 1000 - self.now_us) / 1e6)


def claim(
    keys: QueueKeys,
    *,
    limit: int,
    lease_ms: int,
    promote_limit: int,
    dead_ttl_ms: int,
    rate: tuple[int, int] | None = None,
    concurrency: int | None = None,
    group_rate: tuple[int, int] | None = None,
    group_concurrency: int | None = None,
    events: bool = False,
) -> Call[ClaimReply]:
    """Claim up to ``limit`` tasks, within the queue's pause and limits: ``rate`` (at most
    N starts in any window of M ms) and ``concurrency`` are what the queue's job classes
    declare; limits set at run time (interventions.control) replace them. ``events``: the
    tasks' started (and dead) events go to the queue's stream."""
    count, window_ms = rate or (0, 0)
    group_count, group_window_ms = group_rate or (0, 0)
    claim_keys, parse = _claim_parts(keys, events)
    return Call(
        claim_keys,
        (
            limit,
            lease_ms,
            promote_limit,
            dead_ttl_ms,
            count,
            window_ms,
            concurrency or 0,
            group_concurrency or 0,
            group_count,
            group_window_ms,
            1,  # say when the rate limit holds ready tasks back (ClaimReply.held_until_ms)
            1,  # name the tasks buried (ClaimReply.dead)
        ),
        parse,
        scripts.CLAIM,
    )


@functools.lru_cache(maxsize=1024)
def _claim_parts(
    keys: QueueKeys, events: bool
) -> tuple[tuple[str, ...], Callable[[list[Any]], ClaimReply]]:
    """A queue's claim KEYS and reply parser, made once (a runner claims many times)."""
    queue = keys.name

    def parse(reply: list[Any]) -> ClaimReply:
        nxt = reply[1]
        rows = reply[2:]
        held = rows.pop() if rows and isinstance(rows[-1], int) else None
        tasks = [Claimed(queue, row) for row in rows if len(row) != BURIED_FIELDS]
        if len(tasks) == len(rows):
            return ClaimReply(reply[0], None if nxt < 0 else nxt, tasks, held)
        dead = tuple(
            (text(row[0]), text(row[1]), text(row[2])) for row in rows if len(row) == BURIED_FIELDS
        )
        return ClaimReply(reply[0], None if nxt < 0 else nxt, tasks, held, dead)

    claim_keys = (
        keys.waiting,
        keys.pending,
        keys.scheduled,
        keys.dead,
        keys.task_prefix,
        keys.done_prefix,
        keys.stats_prefix,
        keys.control,
        keys.starts,
        keys.dedupe,
        keys.groups_prefix,
        keys.cancels,
        keys.periodic_prefix,
        *keys.events_if(events),
    )
    return claim_keys, parse


# -- leases kept: heartbeat, the runner's record ---------------------------------------


def heartbeat(keys: QueueKeys, lease_ms: int, held: Sequence[tuple[str, int]]) -> Call[list[str]]:
    """Renew leases; the reply lists the ids that were lost."""
    args: list[Arg] = [lease_ms]
    for task_id, attempt in held:
        args += (task_id, attempt)
    return Call((keys.pending, keys.task_prefix), tuple(args), texts, scripts.HEARTBEAT)


def beat(prefix: str, runner_id: str, ttl_ms: int, fields: dict[str, str]) -> Call[int]:
    """Record a runner in the registry for ``ttl_ms`` (0: remove it); the reply is the
    server's time in ms."""
    args: list[Arg] = [runner_id, ttl_ms]
    for name, value in fields.items():
        args += (name, value)
    return Call(
        (runners_key(prefix), runner_key(prefix, runner_id)), tuple(args), int, scripts.BEAT
    )


# -- leases lost: reclaim --------------------------------------------------------------


class Reclaimed(list[tuple[str, str]]):
    """What reclaim did: (id, "waiting", "scheduled" or "dead") for each expired lease, and
    ``healed``: (group, the running count it said, the count now) for each group count it
    set right (reclaim.lua's ARGV[4])."""

    healed: list[tuple[str, int, int]]

    def __init__(self, pairs: list[tuple[str, str]], healed: list[tuple[str, int, int]]):
        super().__init__(pairs)
        self.healed = healed


def _parse_reclaimed(reply: list[Any]) -> Reclaimed:
    if len(reply) == 2 and isinstance(reply[0], list):  # (nested: sent with heal_ms)
        pairs, healed = reply
    else:
        pairs, healed = reply, []
    return Reclaimed(
        text_pairs(pairs),
        [(text(healed[i]), healed[i + 1], healed[i + 2]) for i in range(0, len(healed), 3)],
    )


def reclaim(
    keys: QueueKeys,
    *,
    limit: int,
    dead_ttl_ms: int,
    dead_max: int,
    heal_ms: int | None = None,
    max_stalls: int = 3,
    own_stalls: Mapping[str, int] | None = None,
    events: bool = False,
) -> Call[Reclaimed]:
    """Expired leases are stalls, counted apart from retries: (id, "waiting", "scheduled"
    or "dead"); dead past ``max_stalls`` (the setting's default, 3, is reclaim.lua's), or
    past its job type's own bound in ``own_stalls``. With ``heal_ms``, at most once per
    that many ms per queue the counts admission trusts are made true (each group's running
    count, the blocked mark): ``healed`` lists the group counts that were wrong. Dead is
    trimmed by age on every call. ``events``: each stalled task's event goes to the
    queue's stream."""
    bounds: list[Arg] = [x for pair in (own_stalls or {}).items() for x in pair]
    return Call(
        (
            keys.pending,
            keys.scheduled,
            keys.dead,
            keys.task_prefix,
            keys.waiting,
            keys.signal,
            keys.periodic_prefix,
            keys.done_prefix,
            keys.stats_prefix,
            keys.control,
            keys.dedupe,
            keys.groups_prefix,
            keys.cancels,
            *keys.events_if(events),
        ),
        (limit, dead_ttl_ms, dead_max, "" if heal_ms is None else heal_ms, max_stalls, *bounds),
        _parse_reclaimed,
        scripts.RECLAIM,
    )
