"""Back-off: how long a loop pauses after consecutive failures.

Each loop keeps its own, so that one loop's failures never lengthen another's pauses.
"""

from __future__ import annotations

# Bounds of the pause after a server error, in seconds.
SERVER_ERROR = (0.05, 2.0)
# ... after a cluster's node was out of reach: a failover there takes a few seconds, and
# its queues are served again within this much of its end (docs/production.md).
NODE_OUT_OF_REACH = (0.05, 0.5)


class Backoff:
    """Exponential back-off: ``low``, then twice as long after each failure, up to ``high``."""

    __slots__ = ("failures", "high", "low")

    def __init__(self, low: float, high: float) -> None:
        self.low = low
        self.high = high
        self.failures = 0  # consecutive; a success sets it back to 0

    def failed(self) -> float:
        """Count one more failure; the seconds to pause before trying again."""
        self.failures += 1
        return float(min(self.high, self.low * 2 ** (self.failures - 1)))
