"""Durable tasks: steps that run once, sleeps that free the runner, signals — inside an
ordinary job (docs/durable.md).

A job's ``perform`` calls ``self.step(name, fn, ...)``, ``self.sleep(duration)`` and
``self.receive(name, timeout=...)`` (in an ``async def perform``: ``astep``, ``asleep``,
``areceive``). Each is a place in perform, counted from 0. A step's result is recorded with
the task by step.lua, fenced by the attempt; a sleep and a wait for a signal end the attempt
(suspend.lua: the task goes to scheduled, holding no runner). Every later attempt runs
perform from the top: the places already recorded give back their records (read once per
attempt, in one round trip) without running anything again, and the first place not
recorded runs.
"""

from __future__ import annotations

import functools
import inspect
import json
import math
import typing
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import Any, NamedTuple, TypeVar

from .._redis import commands, steps
from .._redis.keys import QueueKeys
from .._redis.steps import MAX_NAME, MAX_STEP_BYTES, MAX_STEPS, MAX_TASK_BYTES
from ..errors import AttemptOver, JobFailure, SignalTimeout, StepError, short
from ..server.procedures import Outage, Procedure, run_async, run_sync
from .declaration import JobHooks
from .serialization import decode_result, encode_result, result_codec

T = TypeVar("T")
F = TypeVar("F", bound=Callable[..., Any])

MOST_MS = 2**42 - 1


class Record(NamedTuple):
    """One recorded place of a durable task."""

    name: str
    kind: str  # "step", "sleep" or "receive"
    value: str | None  # a step's result or a signal's value (JSON text)
    timeout: bool  # a receive that ran out of time


def _record(text: str) -> Record:
    data = json.loads(text) if text else {}
    value = data.get("value")
    return Record(
        str(data.get("name", "")),
        str(data.get("kind", "")),
        None if value is None else str(value),
        bool(data.get("timeout", False)),
    )


def _name(name: object, what: str) -> str:
    if not isinstance(name, str) or not 0 < len(name.encode()) <= MAX_NAME:
        raise ValueError(f"{what}: a name is a str of 1 to {MAX_NAME} bytes, got {short(name)}")
    return name


def _delay_ms(duration: object, what: str, *, none: bool = False) -> int | None:
    if duration is None and none:
        return None
    seconds = duration.total_seconds() if isinstance(duration, timedelta) else duration
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or math.isnan(seconds):
        raise TypeError(f"{what}: a timedelta or a number of seconds, got {short(duration)}")
    if seconds < 0:
        raise ValueError(f"{what}: cannot be negative, got {short(duration)}")
    return min(MOST_MS, round(seconds * 1000))


def _one_at_a_time(method: F) -> F:
    """A place runs alone: a step, sleep or receive that begins while another of the same
    job has not ended (two ``astep`` under ``asyncio.gather``, a step inside a step's
    function) is a StepError, before it reads or runs anything: places are counted in the
    order they begin and recorded in that order, one after the other."""
    what = method.__name__

    def enter(job: Durable, args: tuple[Any, ...]) -> None:
        named = f"{what} {args[0]!r}" if args and isinstance(args[0], str) else what
        if job._open_ is not None:
            raise StepError(
                f"{named} began while {job._open_} had not ended: a task's steps, sleeps and "
                "receives run one at a time (not under asyncio.gather, nor one inside "
                "another's function)"
            )
        job._open_ = named

    if inspect.iscoroutinefunction(method):

        @functools.wraps(method)
        async def alone(job: Durable, *args: Any, **kwargs: Any) -> Any:
            enter(job, args)
            try:
                return await method(job, *args, **kwargs)
            finally:
                job._open_ = None

        return typing.cast(F, alone)

    @functools.wraps(method)
    def alone_sync(job: Durable, *args: Any, **kwargs: Any) -> Any:
        enter(job, args)
        try:
            return method(job, *args, **kwargs)
        finally:
            job._open_ = None

    return typing.cast(F, alone_sync)


class Place(NamedTuple):
    """Where a durable call acts: its task, attempt and queue, and its place in perform."""

    url: str | None
    keys: QueueKeys
    task_id: str
    attempt: int
    at: int  # its place in perform, from 0
    outage: Outage | None  # how its calls are held through a server outage (runner.lease)

    def run(self, procedure: Procedure[T]) -> T:
        """Send ``procedure``'s calls (blocking), held through an outage while the lease holds."""
        return run_sync(procedure, self.url, self.outage)

    async def arun(self, procedure: Procedure[T]) -> T:
        """:meth:`run` on the running event loop."""
        return await run_async(procedure, self.url, self.outage)


class Durable:
    """The durable methods of a job (culex.Job has them). The state is per attempt: the
    runner makes a new job object for every attempt."""

    task_id: str
    attempt: int
    outage_: Outage | None = None  # set by the runner (None outside one: a call raises)
    _records_: list[Record] | None = None
    _awaiting_: tuple[int, str] | None = None  # the place a wait for a signal holds, its name
    _places_: int = 0
    _open_: str | None = None  # the place under way (_one_at_a_time)

    def _place(self) -> Place | None:
        """The next place in perform, or None outside a runner (perform_now)."""
        reporting = getattr(self, "reporting_", None)
        if reporting is None:
            return None
        at = self._places_
        self._places_ = at + 1
        return Place(reporting.url, reporting.keys, self.task_id, self.attempt, at, self.outage_)

    def _replay(self, place: Place, kind: str, name: str) -> Procedure[Record | None]:
        """The record at ``place`` (read with the others, once an attempt), checked to be
        this ``kind`` and ``name``; None when the place is new."""
        if self._records_ is None:
            fields = yield commands.read_task(place.keys, place.task_id)
            count = int(fields.get("steps", "0") or 0)
            self._records_ = [_record(fields.get(f"step:{k}", "")) for k in range(count)]
            if fields.get("awaiting"):  # (a receive that waits is the place after the records)
                self._awaiting_ = (count, fields["awaiting"])
        records = self._records_
        if place.at < len(records):
            found = records[place.at]
            if (found.kind, found.name) != (kind, name):
                raise _changed(place.at, found, kind, name)
            return found
        waits = self._awaiting_
        if waits is not None and waits[0] == place.at and (kind, name) != ("receive", waits[1]):
            raise _changed(place.at, Record(waits[1], "receive", None, False), kind, name)
        if kind == "step" and any(r.kind == "step" and r.name == name for r in records):
            raise StepError(f"step name {name!r} is used twice in this task: names are unique")
        return None

    def _recorded(self, place: Place, name: str, result: str) -> Procedure[None]:
        reply = yield steps.step(
            place.keys,
            place.task_id,
            place.attempt,
            place.at,
            name,
            result,
            max_steps=MAX_STEPS,
            max_step_bytes=MAX_STEP_BYTES,
            max_task_bytes=MAX_TASK_BYTES,
        )
        if _own(reply, "step", name) is None:
            _judge(reply, place, "step", name)
        assert self._records_ is not None
        self._records_.append(Record(name, "step", result, False))

    def _suspended(
        self, place: Place, kind: str, name: str, delay_ms: int | None
    ) -> Procedure[Record]:
        reply = yield steps.suspend(
            place.keys,
            place.task_id,
            place.attempt,
            place.at,
            kind,
            name,
            delay_ms,
            max_steps=MAX_STEPS,
        )
        record = _own(reply, kind, name)
        if record is None:
            _judge(reply, place, kind, name)
            if reply[0] == "suspended":
                raise AttemptOver("suspended")
            value = reply[1] if reply[0] == "signal" else None
            record = Record(name, kind, value, reply[0] == "timeout")
        elif kind == "sleep":  # (its task went to scheduled with the record: never pending)
            raise AttemptOver("suspended")
        assert self._records_ is not None
        self._records_.append(record)
        return record

    # -- steps -------------------------------------------------------------------------

    @_one_at_a_time
    def step(self, name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` once for this task, and record its result; a later
        attempt gets the recorded result back (typed by ``fn``'s return annotation)
        without calling ``fn``. A step that raised is not recorded. Blocking; in an
        ``async def perform``, ``await self.astep(...)``."""
        name = _name(name, "step")
        place = self._place()
        if place is None:
            return fn(*args, **kwargs)
        found = place.run(self._replay(place, "step", name))
        if found is not None:
            return typing.cast(T, self._decoded(fn, name, found.value))
        value = fn(*args, **kwargs)
        place.run(self._recorded(place, name, self._encoded(fn, name, value)))
        return value

    @_one_at_a_time
    async def astep(
        self, name: str, fn: Callable[..., Awaitable[T]], *args: Any, **kwargs: Any
    ) -> T:
        """:meth:`step` for an ``async def perform``: ``fn`` is a coroutine function."""
        name = _name(name, "astep")
        place = self._place()
        if place is None:
            return await fn(*args, **kwargs)
        found = await place.arun(self._replay(place, "step", name))
        if found is not None:
            return typing.cast(T, self._decoded(fn, name, found.value))
        value = await fn(*args, **kwargs)
        await place.arun(self._recorded(place, name, self._encoded(fn, name, value)))
        return value

    def _codec(self, fn: Callable[..., Any], name: str) -> Any:
        where = f"step {name!r} ({getattr(fn, '__qualname__', fn)!r})'s return annotation"
        try:
            annotation = typing.get_type_hints(fn).get("return")
        except Exception:
            return None
        return result_codec(annotation, JobHooks(type(self)), where)

    def _encoded(self, fn: Callable[..., Any], name: str, value: object) -> str:
        return encode_result(value, self._codec(fn, name), f"the result of step {name!r}")

    def _decoded(self, fn: Callable[..., Any], name: str, text: str | None) -> object:
        return decode_result(text, self._codec(fn, name), f"the result of step {name!r}")

    # -- sleeps ------------------------------------------------------------------------

    @_one_at_a_time
    def sleep(self, duration: timedelta | float) -> None:
        """Sleep ``duration`` (a timedelta or seconds) by the server's clock, holding no
        runner: this attempt ends, the task waits in scheduled, and the next attempt
        resumes after this call. Outside a runner (perform_now) it returns at once."""
        delay = _delay_ms(duration, "sleep")
        place = self._place()
        if place is not None:
            found = place.run(self._replay(place, "sleep", "sleep"))
            if found is None:
                place.run(self._suspended(place, "sleep", "", delay))

    @_one_at_a_time
    async def asleep(self, duration: timedelta | float) -> None:
        """:meth:`sleep` for an ``async def perform``."""
        delay = _delay_ms(duration, "asleep")
        place = self._place()
        if place is not None:
            found = await place.arun(self._replay(place, "sleep", "sleep"))
            if found is None:
                await place.arun(self._suspended(place, "sleep", "", delay))

    # -- signals -----------------------------------------------------------------------

    @_one_at_a_time
    def receive(self, name: str, *, timeout: timedelta | float | None = None) -> Any:
        """The value of signal ``name`` (``task.signal(name, value)``): at once when it
        was sent already; else this attempt ends and the task waits, holding no runner,
        until the signal comes (then it resumes here) or ``timeout`` passes (by the
        server's clock): then culex.SignalTimeout. None: no timeout."""
        name = _name(name, "receive")
        delay = _delay_ms(timeout, "receive timeout", none=True)
        place = self._place()
        if place is None:
            raise RuntimeError("receive() waits for a signal sent to a task: run it in a runner")
        found = place.run(self._replay(place, "receive", name))
        if found is None:
            found = place.run(self._suspended(place, "receive", name, delay))
        return _received(found, name)

    @_one_at_a_time
    async def areceive(self, name: str, *, timeout: timedelta | float | None = None) -> Any:
        """:meth:`receive` for an ``async def perform``."""
        name = _name(name, "areceive")
        delay = _delay_ms(timeout, "areceive timeout", none=True)
        place = self._place()
        if place is None:
            raise RuntimeError("areceive() waits for a signal sent to a task: run it in a runner")
        found = await place.arun(self._replay(place, "receive", name))
        if found is None:
            found = await place.arun(self._suspended(place, "receive", name, delay))
        return _received(found, name)


def _received(record: Record, name: str) -> Any:
    if record.timeout:
        raise SignalTimeout(f"no signal {name!r} came in time")
    return json.loads(record.value) if record.value is not None else None


def _own(reply: tuple[str, ...], kind: str, name: str) -> Record | None:
    """The record a "conflict" reply holds when it is this attempt's own: the reply to its
    call was lost and the driver sent the call again (it does, once, on a connection that
    broke). The attempt read every earlier attempt's records at its first place, and only
    the attempt that holds the task writes, so a record past those at this place, of this
    kind and name, is the one this call made. None for any other reply."""
    if reply[0] != "conflict":
        return None
    found = _record(reply[1])
    return found if (found.kind, found.name) == (kind, name) else None


def _judge(reply: tuple[str, ...], place: Place, kind: str, name: str) -> None:
    """Raise for a reply that ends the attempt or the task."""
    what = reply[0]
    if what == "stale":
        raise AttemptOver("stale")
    if what == "cancel":  # (a cancel was asked for: it ends the task as cancelled)
        raise JobFailure("cancelled", retry=False)
    if what == "conflict":
        raise _changed(place.at, _record(reply[1]), kind, name)
    if what == "limit":
        limits = {
            "steps": f"a task records at most {MAX_STEPS:,} steps, sleeps and signals",
            "step": f"a step's result is at most {MAX_STEP_BYTES:,} bytes of JSON",
            "task": f"a task's step results are at most {MAX_TASK_BYTES:,} bytes together",
        }
        raise StepError(f"{kind} {name!r}: {limits.get(reply[1], reply[1])}")


def _changed(index: int, found: Record, kind: str, name: str) -> StepError:
    return StepError(
        f"the steps changed under a running task: place {index} recorded {found.kind} "
        f"{found.name!r}, the code now reaches {kind} {name!r}: a place's name must be the "
        "same on every attempt (not made of a random value, the time or a read), and a "
        "deploy must not change the steps of tasks in flight (docs/durable.md: changing a "
        "job's steps)"
    )
