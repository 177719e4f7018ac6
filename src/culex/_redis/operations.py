"""Every operation on queue state, described as data: no I/O here.

A :class:`Call` names a script (or a plain command), its keys and arguments, and how to
parse the reply. The sync and async drivers in ``drivers.py`` only differ in how they send
it, so no operation is written twice.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Generic, NamedTuple, TypeVar

from . import scripts
from .keys import QueueKeys, runner_key, runners_key
from .scripts import Script

T = TypeVar("T")
Arg = str | int | float | bytes


class Call(NamedTuple, Generic[T]):
    """One round trip's worth of work: a script (or a command), keys, args, a parser.

    A named tuple, not a frozen dataclass: as immutable, and made faster (a frozen
    dataclass sets each field through ``object.__setattr__``; docs/fast.md); one is made
    for every enqueue.

    ``blocks``: the seconds a blocking command may hold its reply on purpose (BLPOP's
    timeout, say); a driver waits that long plus ``socket_timeout`` before it gives up.
    """

    keys: tuple[str, ...]
    args: tuple[Arg, ...]
    parse: Callable[[Any], T]
    script: Script | None = None
    blocks: float = 0.0


def text(value: bytes | str | None) -> str:
    """Decode a reply value; bytes that are not UTF-8 survive as surrogates."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return value.decode("utf-8", "surrogateescape")


def shown(value: bytes | str | None) -> str:
    """A reply value decoded for reading (a page, a listing, a scrape): bytes that are not
    UTF-8 become U+FFFD, as does a surrogate :func:`text` kept for them, so the text
    encodes anywhere. Not for ids or names sent back to Redis: those keep their bytes."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:  # (a surrogate that no byte made: made in Python)
            return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in value)
    return value


def number(value: bytes | str | int | None, default: int = 0) -> int:
    """An integer field of a reply, or ``default`` when it is missing or garbage."""
    if isinstance(value, int):
        return value
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        return default


# -- enqueue ------------------------------------------------------------------------


class Enqueued(NamedTuple):
    """What enqueue did: ``state`` is "waiting" or "scheduled"; ``existed``: the id was taken;
    ``deduped``: nothing was stored, ``task_id`` is the live task that holds the dedupe key."""

    task_id: str
    state: str
    existed: bool
    deduped: bool = False


def _parse_enqueue(reply: list[bytes]) -> Enqueued:
    state = text(reply[0])
    if state == "exists":
        return Enqueued(text(reply[1]), "", True)
    if state == "deduped":
        return Enqueued(text(reply[1]), "", False, True)
    return Enqueued(text(reply[1]), state, False)


def enqueue(
    keys: QueueKeys,
    task_id: str,
    job_type: str,
    params_json: str,
    *,
    due_ms: int | None,
    delay_ms: int,
    max_retries: int,
    trace: str = "",
    priority: int = 0,
    dedupe_key: str = "",
    group: str = "",
) -> Call[Enqueued]:
    """``trace``: the producer's trace context (tracing.py), "" for none; ``priority``: higher
    runs first (checked by the caller); ``dedupe_key``, ``group``: "" for none."""
    return Call(
        (
            keys.task(task_id),
            keys.waiting,
            keys.scheduled,
            keys.signal,
            keys.dedupe,
            keys.task_prefix,
            keys.groups_prefix,
            keys.dead,
        ),
        (
            task_id,
            job_type,
            keys.name,
            params_json,
            "" if due_ms is None else due_ms,
            delay_ms,
            max_retries,
            trace,
            priority,
            dedupe_key,
            group,
        ),
        _parse_enqueue,
        scripts.ENQUEUE,
    )


# -- claim --------------------------------------------------------------------------


class Claimed:
    """A task handed to a runner by claim, with the attempt that fences its reports."""

    __slots__ = (
        "attempt",
        "enqueue_time",
        "id",
        "max_retries",
        "params",
        "queue",
        "retry_count",
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


@dataclass(frozen=True, slots=True)
class ClaimReply:
    """Claimed tasks, the server time, and when the next scheduled task is due (or None)."""

    now_us: int
    next_due_ms: int | None
    tasks: list[Claimed]
    held_until_ms: int | None = None  # the queue's rate limit holds ready tasks back till then

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
) -> Call[ClaimReply]:
    """Claim up to ``limit`` tasks, within the queue's pause and limits: ``rate`` (at most
    N starts in any window of M ms) and ``concurrency`` are what the queue's job classes
    declare; limits set at run time (:func:`control`) replace them."""
    count, window_ms = rate or (0, 0)
    group_count, group_window_ms = group_rate or (0, 0)
    claim_keys, parse = _claim_parts(keys)
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
        ),
        parse,
        scripts.CLAIM,
    )


@functools.lru_cache(maxsize=1024)
def _claim_parts(keys: QueueKeys) -> tuple[tuple[str, ...], Callable[[list[Any]], ClaimReply]]:
    """A queue's claim KEYS and reply parser, made once (a runner claims many times)."""
    queue = keys.name

    def parse(reply: list[Any]) -> ClaimReply:
        nxt = reply[1]
        rows = reply[2:]
        held = rows.pop() if rows and isinstance(rows[-1], int) else None
        return ClaimReply(
            reply[0], None if nxt < 0 else nxt, [Claimed(queue, row) for row in rows], held
        )

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
    )
    return claim_keys, parse


# -- reports from a runner: complete, fail, release, heartbeat ------------------------


def _parse_ids(reply: list[bytes]) -> list[str]:
    return [text(x) for x in reply]


def _accepted(reply: int) -> bool:
    return reply == 1


def _parse_refused(reply: list[bytes]) -> list[tuple[str, int]]:
    return [(text(reply[i]), int(reply[i + 1])) for i in range(0, len(reply), 2)]


def complete(
    keys: QueueKeys, done: Sequence[tuple[str, int, str, int]]
) -> Call[list[tuple[str, int]]]:
    """Store results of (id, attempt, result JSON, ms to keep the hash); the reply lists
    the refused reports (stale) as (id, attempt): a batch may hold two attempts of one
    task."""
    args: list[Arg] = []
    for quadruple in done:
        args += quadruple
    return Call(
        (
            keys.pending,
            keys.task_prefix,
            keys.periodic_prefix,
            keys.done_prefix,
            keys.stats_prefix,
            keys.control,
            keys.signal,
            keys.dedupe,
            keys.groups_prefix,
            keys.cancels,
        ),
        tuple(args),
        _parse_refused,
        scripts.COMPLETE,
    )


def _parse_fail(reply: bytes | int) -> str | None:
    return None if reply == 0 else text(reply)  # type: ignore[arg-type]


def fail(
    keys: QueueKeys,
    task_id: str,
    attempt: int,
    error: str,
    *,
    retry_delay_ms: int | None,
    dead_ttl_ms: int,
    dead_max: int,
    traceback: str | None = None,
    errors_kept: int = 5,
) -> Call[str | None]:
    """ "scheduled" or "dead"; None when refused (stale attempt). No delay: dead; and dead
    with the request's reason when the task's cancel was requested (cancel). With a
    ``traceback`` ("" for none), the attempt joins the task's ``errors``, which keeps the
    newest ``errors_kept`` (culex.failures)."""
    return Call(
        (
            keys.task(task_id),
            keys.pending,
            keys.scheduled,
            keys.dead,
            keys.periodic_prefix,
            keys.done(task_id),
            keys.stats_prefix,
            keys.control,
            keys.signal,
            keys.dedupe,
            keys.groups_prefix,
            keys.cancels,
        ),
        (
            task_id,
            attempt,
            error,
            -1 if retry_delay_ms is None else retry_delay_ms,
            dead_ttl_ms,
            dead_max,
            *(() if traceback is None else (traceback, errors_kept)),
        ),
        _parse_fail,
        scripts.FAIL,
    )


def release(keys: QueueKeys, task_id: str, attempt: int) -> Call[bool]:
    """Hand a pending task back to waiting without counting a failure."""
    return Call(
        (keys.task(task_id), keys.pending, keys.waiting, keys.signal, keys.groups_prefix),
        (task_id, attempt),
        _accepted,
        scripts.RELEASE,
    )


def retry_later(
    keys: QueueKeys,
    task_id: str,
    attempt: int,
    delay_ms: int,
    *,
    dead_ttl_ms: int,
    dead_max: int,
) -> Call[bool]:
    """Put a pending task in scheduled, due after ``delay_ms``, without counting a failed
    attempt (culex.RetryLater); one whose cancel was requested goes to dead instead, as
    fail sends it (``dead_ttl_ms``, ``dead_max``). False when refused (stale attempt, or
    not pending)."""
    return Call(
        (
            keys.task(task_id),
            keys.pending,
            keys.scheduled,
            keys.control,
            keys.signal,
            keys.groups_prefix,
            keys.dead,
            keys.done(task_id),
            keys.periodic_prefix,
            keys.stats_prefix,
            keys.dedupe,
            keys.cancels,
        ),
        (task_id, attempt, delay_ms, dead_ttl_ms, dead_max),
        lambda reply: reply in (b"scheduled", "scheduled", b"dead", "dead"),
        scripts.RETRY_LATER,
    )


def progress(
    keys: QueueKeys, task_id: str, attempt: int, fraction: float, message: str
) -> Call[bool]:
    """Store a running attempt's progress on its task; False when refused (the attempt
    no longer holds the task: its lease was lost, or it has ended)."""
    return Call(
        (keys.task(task_id),), (attempt, repr(fraction), message), _accepted, scripts.PROGRESS
    )


def heartbeat(keys: QueueKeys, lease_ms: int, held: Sequence[tuple[str, int]]) -> Call[list[str]]:
    """Renew leases; the reply lists the ids that were lost."""
    args: list[Arg] = [lease_ms]
    for task_id, attempt in held:
        args += (task_id, attempt)
    return Call((keys.pending, keys.task_prefix), tuple(args), _parse_ids, scripts.HEARTBEAT)


def beat(prefix: str, runner_id: str, ttl_ms: int, fields: dict[str, str]) -> Call[int]:
    """Record a runner in the registry for ``ttl_ms`` (0: remove it); the reply is the
    server's time in ms."""
    args: list[Arg] = [runner_id, ttl_ms]
    for name, value in fields.items():
        args += (name, value)
    return Call(
        (runners_key(prefix), runner_key(prefix, runner_id)), tuple(args), int, scripts.BEAT
    )


def _parse_pairs(reply: list[bytes]) -> list[tuple[str, str]]:
    return [(text(reply[i]), text(reply[i + 1])) for i in range(0, len(reply), 2)]


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
        _parse_pairs(pairs),
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
) -> Call[Reclaimed]:
    """Expired leases are stalls, counted apart from retries: (id, "waiting", "scheduled"
    or "dead"); dead past ``max_stalls`` (the setting's default, 3, is reclaim.lua's), or
    past its job type's own bound in ``own_stalls``. With ``heal_ms``, at most once per
    that many ms per queue the counts admission trusts are made true (each group's running
    count, the blocked mark): ``healed`` lists the group counts that were wrong. Dead is
    trimmed by age on every call."""
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
        ),
        (limit, dead_ttl_ms, dead_max, "" if heal_ms is None else heal_ms, max_stalls, *bounds),
        _parse_reclaimed,
        scripts.RECLAIM,
    )


# -- flow control: pause, resume, limits --------------------------------------------


def _parse_control(reply: list[bytes]) -> dict[str, str]:
    return dict(_parse_pairs(reply))


def control(keys: QueueKeys, changes: dict[str, str]) -> Call[dict[str, str]]:
    """Set (or, with "", remove) fields of a queue's control hash: paused, rate and
    rate_ms, concurrency. The reply is the hash after the change."""
    args: list[Arg] = []
    for field, value in changes.items():
        args += (field, value)
    return Call((keys.control, keys.signal), tuple(args), _parse_control, scripts.CONTROL)


# -- periodic jobs ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Scheduled:
    """What schedule did: "enqueued", "done", "new", "overlap" or "early" (see schedule.lua)."""

    outcome: str
    task_id: str


def schedule(
    keys: QueueKeys,
    job_type: str,
    task_id: str,
    *,
    slot_ms: int | None,
    next_slot_ms: int | None,
    overlap: bool,
    run_new: bool,
    max_retries: int,
    record: Sequence[tuple[str, str]] = (),
) -> Call[Scheduled]:
    """Enqueue one slot of a periodic job once across runners; ``slot_ms=None``: a trigger
    (with ``run_new`` False, refused as "unknown" when the job has no record). ``record``:
    fields written on the job's record (its schedule, for readers without the class)."""
    described: list[Arg] = []
    for name, value in record:
        described += (name, value)
    return Call(
        (keys.periodic(job_type), keys.task(task_id), keys.waiting, keys.signal, keys.task_prefix),
        (
            task_id,
            job_type,
            keys.name,
            "" if slot_ms is None else slot_ms,
            "" if next_slot_ms is None else next_slot_ms,
            int(overlap),
            int(run_new),
            max_retries,
            *described,
        ),
        lambda reply: Scheduled(text(reply[0]), text(reply[1])),
        scripts.SCHEDULE,
    )


class PeriodicRead(NamedTuple):
    """A periodic job's record ({} when it has expired) and its last task's state ("")."""

    record: dict[str, str]
    last_state: str


def _parse_periodic_read(reply: list[Any]) -> PeriodicRead:
    fields = reply[0]
    record = {text(fields[i]): shown(fields[i + 1]) for i in range(0, len(fields), 2)}
    return PeriodicRead(record, shown(reply[1]))


def read_periodic(keys: QueueKeys, job_type: str) -> Call[PeriodicRead]:
    """A periodic job's record with the state of its last task: one call, no class needed."""
    return Call(
        (keys.periodic(job_type), keys.task_prefix),
        (),
        _parse_periodic_read,
        scripts.READ_PERIODIC,
    )


def read_queues(bases: Sequence[str]) -> Call[list[Any]]:
    """What a scrape reads of each queue whose keys start with one of ``bases``
    (keys.queue_base), in one call: the flat reply of read_queues.lua, as it is (its reader,
    culex.metrics, walks it without a list per queue). On a Cluster, one base a call."""
    return Call(tuple(bases), (), _as_read, scripts.READ_QUEUES)


def _as_read(reply: list[Any]) -> list[Any]:
    return reply


# -- tests: make scheduled tasks due now ---------------------------------------------------


def hasten(keys: QueueKeys, *, limit: int) -> Call[int]:
    """Make up to ``limit`` scheduled tasks due now (culex.testing's drain); the reply is
    how many went to waiting."""
    return Call(
        (keys.scheduled, keys.waiting, keys.signal, keys.task_prefix, keys.groups_prefix),
        (limit,),
        int,
        scripts.HASTEN,
    )


def run_now(keys: QueueKeys, task_id: str) -> Call[str]:
    """Make one scheduled task ready now (the dashboard's "run now"); the reply is
    "waiting" when it moved, else the state that refused it ("" when it has no record)."""
    return Call(
        (keys.task(task_id), keys.scheduled, keys.waiting, keys.signal, keys.groups_prefix),
        (task_id,),
        text,
        scripts.RUN_NOW,
    )


# -- dead tasks: list them, put them back -------------------------------------------------


@dataclass(frozen=True, slots=True)
class RetryReply:
    """What retry_dead did: the ids put back in waiting, and the ids it skipped."""

    retried: list[str]
    skipped: list[str]


def _parse_retry(reply: list[list[bytes]]) -> RetryReply:
    return RetryReply(_parse_ids(reply[0]), _parse_ids(reply[1]))


def retry_dead(keys: QueueKeys, ids: Sequence[str]) -> Call[RetryReply]:
    """Put these dead tasks back in waiting; ids that are not dead are skipped."""
    if not ids:  # no ids would mean "the oldest in dead" to the script
        raise ValueError("retry_dead needs at least one id (see retry_oldest_dead)")
    return Call(
        (keys.dead, keys.waiting, keys.signal, keys.task_prefix, keys.groups_prefix),
        (len(ids), *ids),
        _parse_retry,
        scripts.RETRY_DEAD,
    )


def retry_oldest_dead(keys: QueueKeys, limit: int) -> Call[RetryReply]:
    """Put the oldest ``limit`` dead tasks back in waiting."""
    return Call(
        (keys.dead, keys.waiting, keys.signal, keys.task_prefix, keys.groups_prefix),
        (limit,),
        _parse_retry,
        scripts.RETRY_DEAD,
    )


# -- cancel: call off a task, or ask the runner of a running one to stop it ---------------------

CANCELLED = "cancelled"
"""cancel's reply when the task went to dead."""
CANCELLING = "cancelling"
"""cancel's reply when the task is running and its cancel was requested; any other reply
is the state that refused it."""


def cancel(
    keys: QueueKeys,
    task_id: str,
    reason: str,
    *,
    dead_ttl_ms: int,
    dead_max: int,
    running: bool = True,
) -> Call[str]:
    """Move a waiting or scheduled task to dead ("cancelled"); with ``running``, request the
    cancel of a running (pending) one ("cancelling": its runner ends it). Else nothing
    changes and the reply is the state it is in ("pending", "succeeded", "dead"), or ""
    when it has no hash."""
    running_keys = (keys.pending, keys.cancels, keys.task_prefix) if running else ()
    return Call(
        (
            keys.task(task_id),
            keys.waiting,
            keys.scheduled,
            keys.dead,
            keys.periodic_prefix,
            keys.done(task_id),
            keys.dedupe,
            keys.groups_prefix,
            *running_keys,
        ),
        (task_id, reason, dead_ttl_ms, dead_max),
        text,
        scripts.CANCEL,
    )


# -- waiting for a task's end: no polling ---------------------------------------------------


class End(NamedTuple):
    """What wait read: the task's state ("" when it has no hash) and the fields of its end."""

    state: str
    result: str | None
    last_error: str
    type: str

    @property
    def finished(self) -> bool:
        """Succeeded, dead, or no record: nothing more to wait for."""
        return self.state in ("succeeded", "dead", "")


def _parse_end(reply: list[bytes | None]) -> End:
    state, result, last_error, job_type = reply
    return End(
        text(state), None if result is None else text(result), text(last_error), text(job_type)
    )


def wait(keys: QueueKeys, task_id: str) -> Call[End]:
    """Read a task's end; while it has none, mark the task waited so that its end wakes
    the done list (see ``block_until_done``)."""
    return Call((keys.task(task_id), keys.done(task_id)), (), _parse_end, scripts.WAIT)


# -- browsing a state's tasks, and deleting tasks -------------------------------------------


class BrowsedRow(NamedTuple):
    """A task as browse.lua reads it: fields as stored, last_error and params cut."""

    id: str
    score: str
    type: str
    enqueue_time: str
    retry_count: str
    last_error: str
    params: str
    priority: str = ""  # (a reply of browse.lua before priorities has none)
    group: str = ""  # (nor one before groups)


class BrowseReply(NamedTuple):
    """One page: the set's size, how many ids it looked at, the cursor (score, id) to go on
    from (None: the set holds no more), the rows."""

    total: int
    looked: int
    cursor: tuple[str, str] | None
    rows: list[BrowsedRow]


def _parse_browse(reply: list[Any]) -> BrowseReply:
    score, last = text(reply[2]), text(reply[3])
    # (the id as stored, an address; the fields as read: not UTF-8 as U+FFFD)
    rows = [BrowsedRow(text(row[0]), *(shown(v) for v in row[1:])) for row in reply[4:]]
    return BrowseReply(int(reply[0]), int(reply[1]), (score, last) if last else None, rows)


def browse(
    keys: QueueKeys,
    state_set: str,
    *,
    ascending: bool,
    after: tuple[str, str] | None,
    limit: int,
    examine: int,
    job: str,
    cut: int,
    search: str = "",
    kind: str = "",
) -> Call[BrowseReply]:
    """A page of ``state_set`` (one of ``keys``' four sets) from the cursor ``after``; with
    ``job``, only its tasks, with ``search`` only those whose id begins with it or whose
    type, params or last_error holds it, with ``kind`` ("retrying" or "delayed") only
    those that failed or stalled before (or not), looking at ``examine`` ids at most.
    Writes nothing."""
    score, last = after if after is not None else ("", "")
    tail = (search, kind) if search or kind else ()  # (optional: a call as before them)
    return Call(
        (state_set, keys.task_prefix),
        ("asc" if ascending else "desc", score, last, limit, examine, job, cut, *tail),
        _parse_browse,
        scripts.BROWSE,
    )


class DeleteReply(NamedTuple):
    """What delete did: the ids deleted, and the ids it skipped (pending, unknown...)."""

    deleted: list[str]
    skipped: list[str]


def delete(keys: QueueKeys, ids: Sequence[str], *, only: str | None = None) -> Call[DeleteReply]:
    """Delete these waiting, scheduled or dead tasks: out of their set, hash deleted. ``only``
    (the set of one of those states, e.g. ``keys.dead``): only the tasks whose hash says
    that state."""
    return Call(
        (
            keys.waiting,
            keys.scheduled,
            keys.dead,
            keys.task_prefix,
            keys.done_prefix,
            keys.dedupe,
            keys.groups_prefix,
            *(() if only is None else (only,)),
        ),
        tuple(ids),
        lambda reply: DeleteReply(_parse_ids(reply[0]), _parse_ids(reply[1])),
        scripts.DELETE,
    )
