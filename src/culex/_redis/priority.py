"""A task's score in waiting: its ready time and its priority in one number.

waiting is one sorted set, so a claim stays one ZPOPMIN: the score is
``ready_ms - priority * 2**42`` (``lua/include/priority.lua`` writes it). 2**42 ms is the
year 2109, and the scores stay whole numbers far below 2**53, where a double is exact.
A task of priority 0 (every task stored before priorities) scores its ready time.
"""

from __future__ import annotations

UNIT = 2**42  # one step of priority, in ms of the score


def ready_ms(score: float) -> int:
    """When the task with this score in waiting became ready (ms since the epoch)."""
    return int(score) % UNIT


def priority_of(score: float) -> int:
    """The priority of the task with this score in waiting."""
    return -(int(score) // UNIT)
