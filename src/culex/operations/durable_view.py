"""What a durable task's hash says of its steps, read for people: the records of its steps,
sleeps and received signals, what it waits for, and the signals kept for it. ``culex task``
and the dashboard's task page both show these (docs/operations.md, docs/dashboard.md).

Every function takes the task hash's fields as :meth:`culex.Task.info` returns them and
never fails on what it finds there: a record that is not the JSON culex writes (another
producer's) is shown as a record of kind "?", and a count of steps larger than the records
held stops at the first one missing. (culex.jobs.steps reads the same records into its
``Record``, strictly, and without their times: the runner needs no more.)
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

# A wait whose end is at or past this time (ms) waits for ever (culex.jobs.steps.MOST_MS).
FOR_EVER_MS = 2**42 - 1


class StepRecord(NamedTuple):
    """One recorded place of a durable task (``step:<place>`` in its hash)."""

    place: int  # its place in perform, from 0
    name: str  # the step's or the signal's name ("sleep" for a sleep)
    kind: str  # "step", "sleep", "receive" ("?": not a record culex wrote)
    at: int | None  # when it was recorded (ms since the epoch, the server's clock)
    size: int | None  # bytes of its value's JSON text: a step's result, a signal's value
    until: int | None  # a sleep's end (ms)
    timed_out: bool  # a receive that ran out of time (no value)


class Waiting(NamedTuple):
    """What a durable task waits for, in scheduled: a sleep's end, or a signal."""

    signal: str | None  # the signal's name; None: a sleep
    until: int | None  # ms since the epoch; None: for ever (a signal without a timeout)


class KeptSignal(NamedTuple):
    """A signal sent to the task and kept until a receive takes it."""

    name: str
    size: int  # bytes of its value's JSON text


def records(fields: dict[str, str]) -> list[StepRecord]:
    """The task's records, in their order in perform."""
    found: list[StepRecord] = []
    for place in range(min(_whole(fields.get("steps")) or 0, len(fields))):
        text = fields.get(f"step:{place}")
        if text is None:
            break
        found.append(_parsed(place, text))
    return found


def waiting_for(fields: dict[str, str]) -> Waiting | None:
    """What the task waits for (None: nothing: it is not in scheduled, or it is there for
    another reason, such as a retry's delay). A signal: its hash names it (``awaiting``)
    and the end of the wait (``awaiting_until``). A sleep: its last record is a sleep whose
    end is when the task is due."""
    if fields.get("state") != "scheduled":
        return None
    awaiting = fields.get("awaiting")
    if awaiting:
        until = _whole(fields.get("awaiting_until"))
        return Waiting(awaiting, None if until is None or until >= FOR_EVER_MS else until)
    found = records(fields)
    last = found[-1] if found else None
    if last is not None and last.kind == "sleep" and last.until is not None:
        return Waiting(None, last.until) if last.until == _whole(fields.get("due_at")) else None
    return None


def kept_signals(fields: dict[str, str]) -> list[KeptSignal]:
    """The signals kept for the task (sent before its receive took them), by name."""
    return sorted(
        KeptSignal(field[len("signal:") :], _size(value))
        for field, value in fields.items()
        if field.startswith("signal:")
    )


def is_durable(fields: dict[str, str]) -> bool:
    """Whether the task has anything of a durable task to show."""
    return "steps" in fields or "awaiting" in fields or any(f.startswith("signal:") for f in fields)


def _parsed(place: int, text: str) -> StepRecord:
    try:
        data: Any = json.loads(text)
    except (ValueError, RecursionError):
        data = None
    if not isinstance(data, dict):
        return StepRecord(place, "", "?", None, _size(text), None, False)
    kind = data.get("kind")
    value = data.get("value")
    return StepRecord(
        place,
        str(data.get("name", "")),
        kind if kind in ("step", "sleep", "receive") else "?",
        _whole(data.get("at")),
        _size(value) if isinstance(value, str) else None,
        _whole(data.get("until")),
        data.get("timeout") is True,
    )


def _whole(value: object) -> int | None:
    """A whole number as a field or a record holds it (Lua's cjson may write 1.7e+12)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    try:
        number = float(value) if isinstance(value, (str, float)) else None
    except ValueError:
        return None
    if number is None or not number.is_integer() or abs(number) > 2**53:
        return None
    return int(number)


def _size(text: str) -> int:
    """Its bytes in the server (a value that is not UTF-8 is held as surrogates)."""
    try:
        return len(text.encode("utf-8", "surrogateescape"))
    except UnicodeEncodeError:
        return len(text.encode("utf-8", "replace"))
