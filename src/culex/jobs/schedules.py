"""The schedules of periodic jobs: where their slots fall, computed without I/O. Every
interval counted from the epoch (:class:`Interval`), every n calendar months
(:class:`Monthly`, ``run_every = months(n)``) or a cron expression (:class:`Cron`), in a
time zone, with culex's rule for wall-clock times a DST change skips or repeats. The job
class that declares one is periodic.py's; the rules are in docs/periodic.md.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, tzinfo
from typing import TYPE_CHECKING, Protocol

from ..errors import short

if TYPE_CHECKING:
    from cronsim import CronSim

# zoneinfo and cronsim are imported where they are used: a runner without cron jobs or time
# zones does not carry them (bench/README.md, RSS).

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


@dataclass(frozen=True, slots=True)
class MonthSpan:
    """A span of calendar months (Mosquito's ``Time::MonthSpan``): ``run_every = months(3)``."""

    months: int

    def __post_init__(self) -> None:
        if isinstance(self.months, bool) or not isinstance(self.months, int) or self.months < 1:
            raise TypeError(
                f"a month span is a whole number of months >= 1, got {short(self.months)}"
            )


def months(n: int) -> MonthSpan:
    """``run_every = culex.months(n)``: midnight of the first of every n-th month."""
    return MonthSpan(n)


class Schedule(Protocol):
    """Where a periodic job's slots fall. Slots are ms since the epoch."""

    @property
    def tz(self) -> tzinfo:
        """The time zone the slots are computed (and shown) in."""
        ...

    def around(self, now_ms: int) -> tuple[int | None, int | None]:
        """The latest slot at or before ``now_ms``, and the first one after it."""
        ...


@dataclass(frozen=True, slots=True)
class Interval:
    """Every ``ms``, counted from the epoch, so that every runner computes the same slots."""

    ms: int
    tz: tzinfo = UTC

    def around(self, now_ms: int) -> tuple[int | None, int | None]:
        current = now_ms - now_ms % self.ms
        return current, current + self.ms

    def __str__(self) -> str:
        return f"every {timedelta(milliseconds=self.ms)}"


@dataclass(frozen=True, slots=True)
class Monthly:
    """Midnight of the first of every ``n``-th month in ``tz``, counted from January 1970."""

    n: int
    tz: tzinfo

    def around(self, now_ms: int) -> tuple[int | None, int | None]:
        local = instant(now_ms).astimezone(self.tz)
        index = (local.year - 1970) * 12 + local.month - 1
        index -= index % self.n
        current = self._slot(index)
        if current > now_ms:  # a month that begins in a DST gap, seen from inside the gap
            index -= self.n
            current = self._slot(index)
        return current, self._slot(index + self.n)

    def _slot(self, index: int) -> int:
        year, month = divmod(index, 12)
        return ms(wall_clock(datetime(1970 + year, month + 1, 1), self.tz))

    def __str__(self) -> str:
        every = "every month" if self.n == 1 else f"every {self.n} months"
        return f"{every} ({self.tz})"


@dataclass(frozen=True, slots=True)
class Cron:
    """A five-field cron expression in ``tz``, evaluated by cronsim.

    cronsim follows Debian cron: an expression with fixed minutes and hours names wall-clock
    times (a time in a spring-forward gap runs at the first minute after the gap, a time in
    a fall-back overlap runs once, at its first occurrence); one with ``*`` in the minute or
    hour field follows real time through a change.
    """

    expr: str
    tz: tzinfo

    def around(self, now_ms: int) -> tuple[int | None, int | None]:
        from cronsim import CronSim

        now = instant(now_ms)
        # cronsim's reverse iteration starts one tick before where it is put: one second
        # after now, so that a slot at exactly now counts as current.
        start = (now.replace(microsecond=0) + timedelta(seconds=1)).astimezone(self.tz)
        current = _first(CronSim(self.expr, start, reverse=True))
        # Then walk forward in real time: for wall-clock expressions cronsim's answers may lie
        # behind now (inside a fall-back overlap) or repeat (several times in one gap).
        walk = CronSim(
            self.expr, instant(now_ms if current is None else current).astimezone(self.tz)
        )
        for _ in range(1000):
            slot = _first(walk)
            if slot is None or slot > now_ms:
                return current, slot
            if current is None or slot > current:
                current = slot
        return current, None

    def __str__(self) -> str:
        return f"cron {self.expr} ({self.tz})"


def _first(slots: CronSim) -> int | None:
    try:
        return ms(next(slots))
    except StopIteration:  # cronsim gives up after 50 years without a match
        return None


def wall_clock(local: datetime, tz: tzinfo) -> datetime:
    """The instant of a wall-clock time in ``tz``, by culex's DST rule: a time that occurs
    twice (fall-back overlap) is its first occurrence; a time that does not exist
    (spring-forward gap) is the first instant after the gap."""
    local = local.replace(microsecond=0)
    first = local.replace(tzinfo=tz, fold=0)
    if first.astimezone(UTC).astimezone(tz).replace(tzinfo=None) == local:
        return first  # it exists; fold=0 is its first occurrence when it occurs twice
    # In a gap, fold=0 reads the time with the offset from before the change (an instant
    # after the gap) and fold=1 with the offset after it (an instant before the gap); the
    # change lies between them, found to the second.
    low = int(local.replace(tzinfo=tz, fold=1).timestamp())
    high = int(first.timestamp())
    after = datetime.fromtimestamp(high, tz).utcoffset()
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, tz).utcoffset() == after:
            high = middle
        else:
            low = middle
    return datetime.fromtimestamp(high, tz)


def instant(slot_ms: int) -> datetime:
    """A time in ms since the epoch as an aware UTC datetime (exact: no float)."""
    return EPOCH + timedelta(milliseconds=slot_ms)


def ms(when: datetime) -> int:
    """An aware datetime as ms since the epoch (exact: no float)."""
    return (when - EPOCH) // timedelta(milliseconds=1)


def checked_zone(name: str, timezone: object) -> tzinfo:
    """The time zone a job class names (``timezone``; None: UTC), checked: ``name`` is the
    class's, for the error."""
    if timezone is None:
        return UTC
    if not isinstance(timezone, str):
        raise TypeError(
            f'{name}.timezone must be a name like "Europe/Berlin", got {short(timezone)}'
        )
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(timezone)
    except (ZoneInfoNotFoundError, ValueError):
        raise TypeError(f"{name}.timezone: unknown time zone {short(timezone)}") from None


def cron_schedule(name: str, expr: object, tz: tzinfo) -> Cron:
    """The schedule of a cron expression, checked (five fields, one cronsim reads, that
    matches some time); ``name`` is the job class's, for the error."""
    if not isinstance(expr, str) or len(expr.split()) != 5:
        raise TypeError(
            f"{name}.cron must have five fields (minute hour day month weekday), got {short(expr)}"
        )
    from cronsim import CronSim, CronSimError

    try:
        slots = CronSim(expr, datetime.now(tz))
    except CronSimError as exc:
        raise TypeError(f"{name}.cron {short(expr)}: {exc}") from None
    if _first(slots) is None:
        raise TypeError(f"{name}.cron {short(expr)} never matches")
    return Cron(expr, tz)


def zone_of(name: str) -> tzinfo:
    """The time zone a record names ("" or one this machine does not know: UTC)."""
    if not name:
        return UTC
    from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return UTC
