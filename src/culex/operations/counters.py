"""The counts of what ended: outcomes (succeeded, failed, dead) and the run times of the
attempts, in DURATION_BUCKETS, as the counters hashes hold them per job (``<job>|<field>``:
docs/wire-format.md), read back into :class:`Counts`, which add up and estimate quantiles
of run time. stats.py reads the hashes; metrics.py exposes the totals.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .._redis.calls import number, shown
from ..errors import short

DURATION_BUCKETS: tuple[float, ...] = (
    0.005,
    0.01,
    0.025,
    0.05,
    0.1,
    0.25,
    0.5,
    1.0,
    2.5,
    5.0,
    10.0,
    30.0,
    60.0,
    300.0,
)
"""Upper bounds (seconds) of the run-time buckets; one more bucket holds the longer runs."""
_EMPTY_DURATIONS = (0,) * (len(DURATION_BUCKETS) + 1)


@dataclass(frozen=True)
class Counts:
    """What ended in a bucket (or a sum of buckets): outcomes, and run times of the
    attempts a runner reported (``durations``: counts per bucket of
    :data:`DURATION_BUCKETS`, not cumulative, the last one above its last bound)."""

    succeeded: int = 0
    failed: int = 0
    dead: int = 0
    duration_sum: float = 0.0  # seconds
    durations: tuple[int, ...] = field(default=_EMPTY_DURATIONS)

    @property
    def processed(self) -> int:
        """Attempts that ended: succeeded + failed + dead."""
        return self.succeeded + self.failed + self.dead

    def __add__(self, other: Counts) -> Counts:
        if not isinstance(other, Counts):
            return NotImplemented
        return Counts(
            self.succeeded + other.succeeded,
            self.failed + other.failed,
            self.dead + other.dead,
            self.duration_sum + other.duration_sum,
            tuple(a + b for a, b in zip(self.durations, other.durations, strict=True)),
        )

    @property
    def mean_duration(self) -> float | None:
        """The mean run time in seconds of the timed attempts (None: none was timed)."""
        timed = sum(self.durations)
        return self.duration_sum / timed if timed else None

    def duration_quantile(self, q: float) -> float | None:
        """An estimate of the ``q`` quantile (0..1) of run time in seconds, interpolated
        inside its bucket as Prometheus' histogram_quantile does (None: none was timed)."""
        if not 0 <= q <= 1:
            raise ValueError(f"a quantile is between 0 and 1, got {short(q)}")
        timed = sum(self.durations)
        if not timed:
            return None
        rank = q * timed
        seen = 0
        for i, n in enumerate(self.durations):
            if n and seen + n >= rank:
                if i == len(DURATION_BUCKETS):  # above the last bound: no upper end
                    return DURATION_BUCKETS[-1]
                low = DURATION_BUCKETS[i - 1] if i else 0.0
                return low + (DURATION_BUCKETS[i] - low) * (rank - seen) / n
            seen += n
        return DURATION_BUCKETS[-1]  # (not reached: rank <= timed)


@dataclass(frozen=True)
class Bucket:
    """The counts of one job on one queue in one minute or hour."""

    start: float  # epoch seconds of the bucket's start
    queue: str
    job: str
    counts: Counts


def parse_counters(fields: dict[str, str]) -> dict[str, Counts]:
    """The counts per job of one counters hash (``<job>|<field>``: docs/wire-format.md);
    fields it does not know are left out. A job name that is not UTF-8 is read with U+FFFD
    for its bytes (two such names that read alike add up)."""
    found: dict[str, list[int]] = {}
    for name, value in fields.items():
        job, sep, part = name.rpartition("|")
        index = _FIELDS.get(part)
        if sep and index is not None:
            tally = found.setdefault(shown(job), [0] * _WIDTH)
            n = number(value)
            tally[index] += n
            if len(part) > 1 and part != "ms":  # an outcome with a run-time bucket
                tally[_OUTCOME_OF[part[0]]] += n
    return {job: _counts(tally) for job, tally in found.items()}


# Where each field of a counters hash adds up (see parse_counters): the outcomes s, f, d
# (0..2), ms (3), then the run-time buckets, whatever the outcome (4..).
_OUTCOME_OF = {"s": 0, "f": 1, "d": 2}
_FIELDS: dict[str, int] = {
    **_OUTCOME_OF,
    "ms": 3,
    **{f"{o}{i}": 4 + i for o in _OUTCOME_OF for i in range(len(DURATION_BUCKETS) + 1)},
}
_WIDTH = 4 + len(DURATION_BUCKETS) + 1


def _counts(tally: list[int]) -> Counts:
    return Counts(tally[0], tally[1], tally[2], tally[3] / 1000, tuple(tally[4:]))
