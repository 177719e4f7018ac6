"""A task's score in waiting: its ready time and its priority in one number.

waiting is one sorted set, so a claim stays one ZPOPMIN: the score is
``ready_ms - priority * 2**42`` (``lua/include/priority.lua`` writes it). 2**42 ms is the
year 2109, and the scores stay whole numbers far below 2**53, where a double is exact.
A task of priority 0 (every task stored before priorities) scores its ready time.
"""

from __future__ import annotations

import time

UNIT = 2**42  # one step of priority, in ms of the score
LATEST = "2109-05-15 07:35 UTC"  # (UNIT ms since the epoch: no ready time can be later)


def check_ready_ms(ms: int, what: str) -> int:
    """``ms``, when a task is to be ready (ms since the epoch), if a score can hold it; else
    a clear error that names ``what`` (a ready time past UNIT would read back as a
    priority)."""
    if not 0 <= ms < UNIT:
        raise ValueError(
            f"{what} must make a task ready between 1970 and {LATEST} "
            "(a waiting score holds no later time)"
        )
    return ms


def check_delay_ms(delay_ms: int, what: str) -> int:
    """``delay_ms`` if a task made ready that long from now has a ready time a score can hold
    (:func:`check_ready_ms`, by this process's clock)."""
    check_ready_ms(round(time.time() * 1000) + delay_ms, what)
    return delay_ms


def ready_ms(score: float) -> int:
    """When the task with this score in waiting became ready (ms since the epoch)."""
    return int(score) % UNIT


def priority_of(score: float) -> int:
    """The priority of the task with this score in waiting."""
    return -(int(score) // UNIT)
