"""A handle on one enqueued task: its id, state and result."""

from __future__ import annotations

import contextlib
import enum
import itertools
import random
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any, ClassVar, Protocol

from .. import config
from .._redis import commands, interventions, reads
from .._redis.keys import QueueKeys, check_queue_name, queue_keys, queues_key
from ..errors import CulexError, TaskFailed, short
from ..server import serving
from ..server.procedures import Procedure, one_call, run_async, run_sync
from . import events, task_logs
from .codecs import Codec
from .progress import Progress, read_procedure
from .registry import registry
from .serialization import decode_result
from .signals import SignalReply, signal_procedure
from .task_logs import LogLine


class ResultTyped(Protocol):
    """What a task reads of its job class (a ``Job`` subclass): the codec of its perform's
    return annotation (None: plain JSON), and its name."""

    result_codec_: ClassVar[Codec | None]


class TaskState(enum.StrEnum):
    """Where a task is. The same words as the Redis sets, the CLI and the docs."""

    WAITING = "waiting"
    SCHEDULED = "scheduled"
    PENDING = "pending"
    SUCCEEDED = "succeeded"
    DEAD = "dead"
    BLOCKED = "blocked"  # a workflow node whose upstreams have not all ended


class TaskNotFound(CulexError, LookupError):
    """No record of the task: it never existed, or it finished and its hash expired."""


_sequence = itertools.count()
_random_bits = random.getrandbits
MAX_ID_LENGTH = 200
MAX_CANCEL_REASON = 500


def new_id() -> str:
    """A unique task id that sorts by creation time (ties in waiting keep FIFO order).

    Milliseconds, a counter of this process, and 48 random bits. The bits come from
    ``random``, not ``os.urandom`` (a system call, a quarter of the id's cost): it is
    seeded from the OS, and again in a forked child, so a child that shares its parent's
    counter and clock still draws other bits (and a taken id is drawn again: enqueue.py).
    """
    # ('%' formatting: f-string format specs cost a third more, 2026-12-02)
    return "%012x%04x%012x" % (  # noqa: UP031
        time.time_ns() // 1_000_000,
        next(_sequence) & 0xFFFF,
        _random_bits(48),
    )


def check_id(task_id: object) -> str:
    """Return a client-made task id if it is usable, else raise a clear error."""
    if not isinstance(task_id, str):
        raise TypeError(f"a task id must be a str, got {type(task_id).__name__}")
    if not task_id or len(task_id) > MAX_ID_LENGTH or not task_id.isprintable() or " " in task_id:
        raise ValueError(
            f"a task id must be 1 to {MAX_ID_LENGTH} printable characters without spaces: "
            f"{short(task_id)}"
        )
    return task_id


# A wait for a result blocks on the server in chunks of at most this many seconds: a
# wake-up lost (a failover) costs one chunk at most, and no call blocks for longer.
WAIT_CHUNK = 1.0


def task_name(queue: str, task_id: str) -> str:
    """How culex names a task wherever it shows one (logs, the CLI, errors):
    ``emails<019a5c...>``, its queue and its id. ``culex task`` takes it back as written."""
    return f"{queue}<{task_id}>"


def split_task_name(text: str) -> tuple[str, str] | None:
    """The queue and id of a name as :func:`task_name` writes it (None: not of that form)."""
    queue, bracket, rest = text.partition("<")
    if not bracket or not queue or not rest.endswith(">") or len(rest) < 2:
        return None
    return queue, rest[:-1]


def queues_holding(task_id: str, settings: config.Settings | None = None) -> list[str]:
    """The queues culex knows (``<prefix>:queues``) that hold a task of this id: one
    EXISTS per queue, all in one round trip (``culex task ID``)."""
    settings = settings or config.settings()
    return run_sync(_holding(check_id(task_id), settings), settings.redis_url)


def _holding(task_id: str, settings: config.Settings) -> Procedure[list[str]]:
    names = yield commands.known_queues(queues_key(settings.prefix))
    queues = []
    for name in names:  # (a name no producer of culex wrote is no queue to look in)
        with contextlib.suppress(TypeError, ValueError):
            queues.append(check_queue_name(name))
    if not queues:
        return []
    found = yield [commands.exists(queue_keys(settings.prefix, q).task(task_id)) for q in queues]
    return [queue for queue, there in zip(queues, found, strict=True) if there]


def _state_of(fields: dict[str, str]) -> TaskState | None:
    state = fields.get("state", "")
    return TaskState(state) if state in TaskState._value2member_map_ else None


class Task:
    """An enqueued task. ``state()`` and ``result()`` ask the server; ``a*`` twins are async.

    ``job``: its job class, whose ``perform`` return annotation types the result. A task
    made by hand without it finds the class in ``culex.registry`` by the task's ``type``
    (plain JSON when none is registered).

    ``deduped``: True when an enqueue with a ``dedupe_key`` stored nothing, because a live
    task (waiting, scheduled or pending) already held the key: this handle is that task.
    """

    __slots__ = ("deduped", "id", "job", "prefix", "queue", "url")

    def __init__(
        self,
        task_id: str,
        queue: str,
        url: str | None = None,
        job: type[ResultTyped] | None = None,
        prefix: str | None = None,
        deduped: bool = False,
    ) -> None:
        self.id = task_id
        self.deduped = deduped
        self.queue = queue
        self.url = url
        self.job = job
        self.prefix = prefix  # None: the configured prefix

    def __repr__(self) -> str:
        return f"<Task {task_name(self.queue, self.id)}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Task) and (other.id, other.queue) == (self.id, self.queue)

    def __hash__(self) -> int:
        return hash((self.id, self.queue))

    def _keys(self) -> QueueKeys:
        """Its queue's keys, once its queue and id are known to be usable: a Task can be
        built by hand (``Task(id, queue)``), so a bad one is a clear error before any I/O."""
        check_id(self.id)
        prefix = self.prefix if self.prefix is not None else config.settings().prefix
        return queue_keys(prefix, check_queue_name(self.queue))

    # Each *_procedure checks its arguments when it is called, before any I/O.

    def _state_procedure(self) -> Procedure[TaskState | None]:
        return one_call(commands.read_task(self._keys(), self.id), _state_of)

    def _info_procedure(self) -> Procedure[dict[str, str]]:
        return one_call(commands.read_task(self._keys(), self.id))

    def _result_procedure(self, timeout: float | None) -> Procedure[Any]:
        keys = self._keys()
        if timeout is not None:
            timeout = config.seconds(timeout, "timeout")
        return self._wait(keys, timeout)

    def _wait(self, keys: QueueKeys, timeout: float | None) -> Procedure[Any]:
        """Read the task's end; until it has one, block on its done list (wait.lua), with
        the next read sent right behind each block: one round trip per wake-up or chunk.
        After ``serving.WARN_AFTER`` s, once, and in a TimeoutError: whether a runner
        serves the task's queue (culex.server.serving), read then and only then."""
        started = time.monotonic()
        deadline = None if timeout is None else started + timeout
        prefix = self.prefix if self.prefix is not None else config.settings().prefix
        read = reads.wait(keys, self.id)
        end: reads.End = yield read
        looked = False
        while not end.finished:
            now = time.monotonic()
            left = WAIT_CHUNK if deadline is None else deadline - now
            if left <= 0:
                said = f"task {task_name(self.queue, self.id)} is still {end.state}"
                lines = yield from serving.unserved(prefix, [self.queue])
                raise TimeoutError("; ".join([said, *lines]))
            if not looked and now - started >= serving.WARN_AFTER:
                looked = True
                lines = yield from serving.unserved(prefix, [self.queue])
                serving.warn(lines, f"task {task_name(self.queue, self.id)}")
            block = commands.block_until_done(keys, self.id, min(left, WAIT_CHUNK))
            replies = yield [block, read]
            for reply in replies:
                if isinstance(reply, Exception):
                    raise reply
            end = replies[1]
        if end.state == "succeeded":
            return self._decode(end)
        if end.state == "dead":
            raise TaskFailed(self.id, end.last_error)
        raise TaskNotFound(
            f"task {task_name(self.queue, self.id)} not found: it never existed, or it finished "
            "and its record expired (see result_ttl and successful_job_ttl)"
        )

    def _decode(self, end: reads.End) -> Any:
        """The result, typed by its job class's ``perform`` annotation when it is known."""
        job = self.job
        if job is None:
            job = registry.get(end.type)
        if job is None:
            return decode_result(end.result)
        where = f"the result of {job.__name__}.perform()"
        return decode_result(end.result, job.result_codec_, where)

    def _retry_procedure(self) -> Procedure[bool]:
        return one_call(
            interventions.retry_dead(self._keys(), [self.id]), lambda reply: bool(reply.retried)
        )

    def cancel_procedure(self, reason: str) -> Procedure[str]:
        """The procedure of cancel and acancel (and of ``culex cancel``). Its value is the
        script's reply: "cancelled", "cancelling" (running: its runner was asked to stop
        it), the state that refused it, or "" (no record)."""
        if not isinstance(reason, str):
            raise TypeError(f"a cancel reason must be a str, got {type(reason).__name__}")
        if len(reason) > MAX_CANCEL_REASON:
            raise ValueError(
                f"a cancel reason must have at most {MAX_CANCEL_REASON} characters, "
                f"got {len(reason)}"
            )
        settings = config.settings()
        call = interventions.cancel(
            self._keys(),
            self.id,
            reason.strip(),
            dead_ttl_ms=settings.failed_job_ttl_ms,
            dead_max=settings.dead_max,
            events=settings.events,
        )
        return one_call(call)

    def state(self) -> TaskState | None:
        """The task's state now; None when it has no record (expired or never existed)."""
        return run_sync(self._state_procedure(), self.url)

    async def astate(self) -> TaskState | None:
        return await run_async(self._state_procedure(), self.url)

    def info(self) -> dict[str, str]:
        """Every field of the task's hash ({} when it has no record)."""
        return run_sync(self._info_procedure(), self.url)

    async def ainfo(self) -> dict[str, str]:
        return await run_async(self._info_procedure(), self.url)

    def progress(self) -> Progress | None:
        """The last progress its job reported, ``(fraction, message)`` (message None when
        it gave none), kept after the task ends; None when none was reported (or the task
        has no record)."""
        return run_sync(read_procedure(self._keys(), self.id), self.url)

    async def aprogress(self) -> Progress | None:
        return await run_async(read_procedure(self._keys(), self.id), self.url)

    def logs(self) -> list[LogLine]:
        """The lines its job wrote with ``self.log(...)``, oldest first, each with its
        attempt and time: the newest 100 of every attempt, kept while its record is
        (culex.jobs.task_logs says which lines a killed runner loses)."""
        return run_sync(task_logs.read_procedure(self._keys(), self.id), self.url)

    async def alogs(self) -> list[LogLine]:
        return await run_async(task_logs.read_procedure(self._keys(), self.id), self.url)

    def result(self, timeout: float | None = None) -> Any:
        """Wait for perform's return value. Raises TaskFailed (dead) or TimeoutError."""
        return run_sync(self._result_procedure(timeout), self.url)

    async def aresult(self, timeout: float | None = None) -> Any:
        return await run_async(self._result_procedure(timeout), self.url)

    def retry(self) -> bool:
        """Put the task back in waiting if it is dead, with its retries restored (it runs
        after the tasks already waiting). False: it was not dead, or its record expired."""
        return run_sync(self._retry_procedure(), self.url)

    async def aretry(self) -> bool:
        return await run_async(self._retry_procedure(), self.url)

    def run_now(self) -> bool:
        """Make the task ready now if it is scheduled (delayed, or waiting out a retry's
        back-off): it goes to waiting, after the tasks already ready at its priority.
        False: it was not scheduled (it ran, was cancelled or moved meanwhile), or its
        record expired; nothing changes."""
        return run_sync(self._run_now_procedure(), self.url)

    async def arun_now(self) -> bool:
        return await run_async(self._run_now_procedure(), self.url)

    def _run_now_procedure(self) -> Procedure[bool]:
        return one_call(
            interventions.run_now(self._keys(), self.id), lambda reply: reply == "waiting"
        )

    def cancel(self, reason: str = "") -> bool:
        """Call off the task. True when it is called off; False when it has already ended
        (succeeded or dead) or has no record: nothing changes.

        A waiting or scheduled task (delayed, or due for a retry) goes to dead at once with
        last_error "cancelled" (or "cancelled: <reason>"), as a task that failed for good:
        ``result()`` raises TaskFailed, ``culex dead`` lists it and ``retry()`` can put it
        back.

        A running (pending) task's cancel is requested, and True means only that: it is
        still pending when this returns. Its runner learns it within about a second and
        stops the attempt (an async perform is cancelled, a perform with ``isolation =
        "process"`` is killed, a sync perform in a thread sees ``self.cancelled`` become
        True and should return early: Python cannot stop a thread), then it goes to dead
        with that last_error and is never retried; when its runner is gone, the end of its
        lease does the same. ``result()`` (raising TaskFailed) or ``state()`` becoming dead
        tells when it has ended. An attempt that ended before its runner learned of the
        request ends as it did: a success stands, since its work was done."""
        outcome = run_sync(self.cancel_procedure(reason), self.url)
        return outcome in (interventions.CANCELLED, interventions.CANCELLING)

    async def acancel(self, reason: str = "") -> bool:
        outcome = await run_async(self.cancel_procedure(reason), self.url)
        return outcome in (interventions.CANCELLED, interventions.CANCELLING)

    def _watching(self, timeout: float | None) -> Any:
        prefix = self.prefix if self.prefix is not None else config.settings().prefix
        keys = self._keys()
        return events.task_events(prefix, keys.name, self.id, timeout, self.url)

    def watch(self, timeout: float | None = 30.0) -> Iterator[events.Event]:
        """This task's events (docs/events.md), from its enqueue on, as they come; the
        iteration ends after its ``succeeded`` or ``dead`` event, or when none of its
        events came for ``timeout`` seconds (None: wait for ever)."""
        found: Iterator[events.Event] = self._watching(timeout)[0]
        return found

    def awatch(self, timeout: float | None = 30.0) -> AsyncIterator[events.Event]:
        """The async twin of :meth:`watch`: ``async for event in task.awatch()``."""
        found: AsyncIterator[events.Event] = self._watching(timeout)[1]()
        return found

    def signal(self, name: str, value: Any = None, *, keep: bool = True) -> SignalReply:
        """Send signal ``name`` with ``value`` (JSON as given: str, int, float, bool,
        None, lists, dicts with str keys) to this durable task, for its
        ``self.receive(name)``: "delivered" (it waited for it and runs again now), "kept"
        (kept for a later receive; a later signal of the same name replaces it), "ended"
        (the task succeeded or is dead: nothing kept), "unknown" (no such task). With
        ``keep=False``, kept only when the task awaits that name, else "skipped". The
        reply is that str, with ``state`` and ``awaiting`` (the signal the task waits for,
        or None) as the call found them. A ValueError, nothing kept, when the task keeps
        as many signals as it may (docs/durable.md#limits)."""
        return run_sync(signal_procedure(self._keys(), self.id, name, value, keep), self.url)

    async def asignal(self, name: str, value: Any = None, *, keep: bool = True) -> SignalReply:
        return await run_async(signal_procedure(self._keys(), self.id, name, value, keep), self.url)
