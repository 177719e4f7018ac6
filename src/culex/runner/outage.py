"""An outage: the server (or, on a cluster, one master) out of reach for a while, as in a
failover, told in two lines rather than one per failed call.

The runner's loops tell the :class:`Outage` each call that failed for want of the server
(ServerUnavailable), under a name of what it was for (``reports``, ``queue emails``,
``reclaiming emails``), and each that worked again. The first failure logs one WARNING
line: what is out of reach, and that culex sends it again (reports, claims) until it
answers; once every name that failed has worked again, one line says the outage is over
and how long it lasted. The failures in between are logged at DEBUG, with their details.
"""

from __future__ import annotations

import logging
import time

logger = logging.getLogger("culex")


class Outage:
    """What failed for want of the server, by name, since when (see the module's docstring)."""

    __slots__ = ("failing", "since")

    def __init__(self) -> None:
        self.failing: set[str] = set()
        self.since: float | None = None  # time.monotonic() of the first failure

    def failed(self, what: str, error: BaseException) -> None:
        """``what`` failed: the server (or its node) could not be reached, or did not answer."""
        self.failing.add(what)
        if self.since is None:
            self.since = time.monotonic()
            logger.warning(
                "%s failed: %s (a failover, or a restart, may be under way: reports and claims "
                "are held and sent again until the server answers; each try is logged at DEBUG)",
                what,
                error,
            )
        else:
            logger.debug("%s failed again: %s", what, error)

    def worked(self, *whats: str) -> None:
        """``whats`` worked (again); the outage is over once every name that failed has."""
        if not self.failing or self.failing.isdisjoint(whats):
            return
        self.failing.difference_update(whats)
        if not self.failing and self.since is not None:
            logger.warning(
                "the server answers again: what was held is sent (out of reach for %.1f s)",
                time.monotonic() - self.since,
            )
            self.since = None
