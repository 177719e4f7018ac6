"""What an enqueue asks beyond the job, checked before any I/O: its priority, dedupe key
and window, group, expiry, and when it is due. ``enqueue.py`` sends what these return.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import NamedTuple

from .. import config
from .._redis.priority import check_delay_ms, check_ready_ms
from ..errors import short

# A priority is a whole number in this range (enqueue.lua checks it too): waiting's score
# is ready_ms - priority * 2^42, exact in a double while |priority| stays far below 2^11.
MIN_PRIORITY, MAX_PRIORITY = -100, 100
MAX_DEDUPE_KEY = 500  # characters of a dedupe key
MAX_GROUP_BYTES = 500  # a group's name, UTF-8 (enqueue.lua checks it too)
MAX_DEDUPE_FOR = 366 * 86400  # seconds: the longest window a dedupe key is kept after its end


def check_priority(priority: object, where: str = "priority=") -> int:
    """Return ``priority`` if it is one (an int in -100 .. 100), else raise a clear error."""
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise TypeError(f"{where} must be an int, got {type(priority).__name__}")
    if not MIN_PRIORITY <= priority <= MAX_PRIORITY:
        raise ValueError(f"{where} must be in {MIN_PRIORITY} .. {MAX_PRIORITY}, got {priority}")
    return priority


def check_dedupe_key(key: object) -> str:
    """Return ``key`` if it can be a dedupe key (a str of 1 to 500 characters), else raise."""
    if not isinstance(key, str):
        raise TypeError(f"dedupe_key= must be a str, got {type(key).__name__}")
    if not key or len(key) > MAX_DEDUPE_KEY:
        raise ValueError(f"dedupe_key= must have 1 to {MAX_DEDUPE_KEY} characters: {key!r:.80}")
    return key


def dedupe_for_ms(window: object, where: str = "dedupe_for=") -> int:
    """A dedupe window (seconds or a timedelta, more than 0, at most 366 days) in whole ms."""
    seconds = config.seconds(window, where, minimum=0.001)
    if seconds > MAX_DEDUPE_FOR:
        raise ValueError(f"{where} must be at most {MAX_DEDUPE_FOR} s (366 days), got {seconds}")
    return max(1, round(seconds * 1000))


def check_group(group: object) -> str:
    """Return ``group`` if it can name a group (a str of 1 to 500 bytes), else raise."""
    if not isinstance(group, str):
        raise TypeError(f"group= must be a str, got {type(group).__name__}")
    if not group or len(group.encode()) > MAX_GROUP_BYTES:
        raise ValueError(f"group= must have 1 to {MAX_GROUP_BYTES} bytes: {group!r:.80}")
    return group


def checked_keys(dedupe_keys: object, count: int) -> list[str]:
    """``enqueue_many``'s dedupe keys, one per job (None for none), as "" for none."""
    if isinstance(dedupe_keys, str) or not isinstance(dedupe_keys, Sequence):
        raise TypeError(
            f"dedupe_keys= must be a list of str or None, one per job, got {short(dedupe_keys)}"
        )
    if len(dedupe_keys) != count:
        raise ValueError(f"dedupe_keys= has {len(dedupe_keys)} keys for {count} jobs: one per job")
    return ["" if key is None else check_dedupe_key(key) for key in dedupe_keys]


class FlowControl(NamedTuple):
    """What one enqueue asks beyond the job: a priority for every task (None: each job's
    class's), a dedupe key (only for one task; "" for none), a group ("" for none), an
    expiry in ms for every task (None: each job's class's), a dedupe window in ms for
    every task with a key (None: each job's class's)."""

    priority: int | None = None
    dedupe_key: str = ""
    group: str = ""
    expires_ms: int | None = None
    dedupe_for_ms: int | None = None


NO_CONTROL = FlowControl()


def expires_ms(expires: timedelta | float, where: str) -> int:
    """An expiry (seconds or a timedelta from now, more than 0) in whole ms, at least 1."""
    ms = max(1, round(config.seconds(expires, where, minimum=0.001) * 1000))
    return check_delay_ms(ms, where)


def when(delay: timedelta | float | None, at: datetime | None) -> tuple[int | None, int]:
    """(absolute due ms or None, delay ms) from enqueue's ``delay`` / ``at``."""
    if delay is not None and at is not None:
        raise TypeError("enqueue() takes delay= or at=, not both")
    if at is not None:
        if not isinstance(at, datetime):
            raise TypeError(f"at= must be a datetime, got {type(at).__name__}")
        if at.tzinfo is None or at.utcoffset() is None:
            raise TypeError("at= must be a timezone-aware datetime (e.g. tzinfo=timezone.utc)")
        return check_ready_ms(round(at.timestamp() * 1000), "at="), 0
    if delay is None:
        return None, 0
    return None, check_delay_ms(round(config.seconds(delay, "delay=") * 1000), "delay=")
