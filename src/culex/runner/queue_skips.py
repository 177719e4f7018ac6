"""The queues a runner's claims pass over for now, and until when.

Two reasons: a queue whose keys the server refuses (WRONGTYPE, say; or, on a cluster, whose
node is out of reach) is tried again after a back-off of its own, never deleted; and a
queue whose rate limit holds its ready tasks back is not asked before the time its claim
said (a claim before then would only be refused), whatever wakes the runner meanwhile.
"""

from __future__ import annotations

import time
from collections.abc import Iterable

from .backoff import NODE_OUT_OF_REACH, SERVER_ERROR, Backoff

SICK_PAUSE = (0.5, 60.0)  # back-off bounds of a queue whose keys the server refuses


class QueueSkips:
    """The queues passed over, by name; ``cluster``: a node out of reach is tried again
    sooner (NODE_OUT_OF_REACH) than one server (SERVER_ERROR)."""

    def __init__(self, cluster: bool) -> None:
        self.cluster = cluster
        self.unhealthy: dict[str, tuple[float, Backoff]] = {}  # until, and its back-off
        self.held: dict[str, float] = {}  # held back by the rate limit until

    def skipped(self, queue: str, now: float) -> bool:
        """Whether a claim passes ``queue`` over at ``now`` (monotonic)."""
        if queue in self.unhealthy and self.unhealthy[queue][0] > now:
            return True
        return bool(self.held) and self.held.get(queue, 0.0) > now

    def sick(self, queue: str, unreached: bool) -> float:
        """``queue`` was refused (``unreached``: its server out of reach): the pause before
        it is asked again, growing with each refusal in a row."""
        _, backoff = self.unhealthy.get(queue, (0.0, None))
        if backoff is None:
            bounds = NODE_OUT_OF_REACH if self.cluster else SERVER_ERROR
            backoff = Backoff(*(bounds if unreached else SICK_PAUSE))
        pause = backoff.failed()
        self.unhealthy[queue] = (time.monotonic() + pause, backoff)
        return pause

    def healthy(self, queue: str) -> None:
        self.unhealthy.pop(queue, None)

    def hold(self, queue: str, held_for: float | None) -> None:
        """The claim of ``queue`` said its rate limit holds ready tasks back for
        ``held_for`` s (None or 0: it holds none back)."""
        if held_for:
            self.held[queue] = time.monotonic() + held_for
        elif self.held:
            self.held.pop(queue, None)

    def out_of_reach(self, queues: Iterable[str], now: float) -> bool:
        """On a cluster, whether every queue of a wait is passed over for now (its node was
        out of reach): no wait is started for it until then."""
        return self.cluster and all(
            self.unhealthy.get(queue, (0.0, None))[0] > now for queue in queues
        )

    def back_in(self, now: float) -> float | None:
        """On a cluster, how soon the first unhealthy queue is asked again (a node may be
        back); None when there is none."""
        if not (self.cluster and self.unhealthy):
            return None
        return max(0.0, min(until for until, _ in self.unhealthy.values()) - now)
