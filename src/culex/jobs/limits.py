"""The limits a queue's job classes declare: a :class:`Rate` of starts, a concurrency,
and the same per group (``rate_limit``, ``concurrency_limit``, ``group_rate_limit``,
``group_concurrency`` on a job class), checked when the class is defined.

What a runner's claim uses for the queue unless ``culex.limit`` set others at run time
(culex/operations/queue_control.py; docs/flow-control.md).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Final

from ..errors import ConfigurationError, short


@dataclass(frozen=True, slots=True)
class Rate:
    """At most ``count`` starts in any window of ``per``: ``Rate(100, per=timedelta(seconds=1))``
    is ``"100/s"``. A start is a claim: an attempt that begins, whatever its end."""

    count: int
    per: timedelta = timedelta(seconds=1)

    def __post_init__(self) -> None:
        if isinstance(self.count, bool) or not isinstance(self.count, int) or self.count < 1:
            raise ConfigurationError(
                f"a rate's count must be a whole number >= 1, got {short(self.count)}"
            )
        if not isinstance(self.per, timedelta) or self.per < timedelta(milliseconds=1):
            raise ConfigurationError(
                f"a rate's window (per) must be a timedelta >= 1 ms, got {short(self.per)}"
            )

    @property
    def window_ms(self) -> int:
        return round(self.per / timedelta(milliseconds=1))

    def __str__(self) -> str:
        for unit, ms in _UNIT_MS.items():
            if self.window_ms == ms:
                return f"{self.count}/{unit}"
        return f"{self.count}/{self.window_ms}ms"


_UNIT_MS: Final = {"s": 1000, "m": 60_000, "h": 3_600_000}
_RATE_TEXT = re.compile(r"(\d{1,9})\s*/\s*(\d{1,9}\s*)?(ms|s|m|h)")


def rate(value: object, name: str = "rate") -> Rate:
    """A :class:`Rate`, or its text ``"N/s"``, ``"N/m"``, ``"N/h"`` (also ``"N/10s"``,
    ``"N/500ms"``), checked."""
    if isinstance(value, Rate):
        return value
    if isinstance(value, str):
        match = _RATE_TEXT.fullmatch(value.strip())
        if match:
            count, times, unit = match.groups()
            window_ms = int(times or 1) * (1 if unit == "ms" else _UNIT_MS[unit])
            return Rate(int(count), per=timedelta(milliseconds=window_ms))
    raise ConfigurationError(
        f'{name} must be a culex.Rate or a text like "100/s", "10/m", "1000/h" or "5/10s", '
        f"got {short(value)}"
    )


def concurrency(value: object, name: str = "concurrency") -> int:
    """A concurrency limit: a whole number >= 1, checked."""
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigurationError(f"{name} must be a whole number >= 1, got {short(value)}")
    return value


@dataclass(frozen=True, slots=True)
class QueueLimits:
    """What a queue's job classes declare: the claim's defaults for that queue."""

    rate: Rate | None = None
    concurrency: int | None = None
    group_rate: Rate | None = None
    group_concurrency: int | None = None

    def claim_args(self) -> dict[str, Any]:
        """The keyword arguments of ``operations.claim`` that carry these limits."""
        return {
            "rate": _window(self.rate),
            "concurrency": self.concurrency,
            "group_rate": _window(self.group_rate),
            "group_concurrency": self.group_concurrency,
        }


def _window(limit: Rate | None) -> tuple[int, int] | None:
    return None if limit is None else (limit.count, limit.window_ms)
