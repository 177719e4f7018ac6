"""The reporter's outbox: the outcomes of ended attempts, waiting to be reported.

A runner puts each outcome in as its attempt ends (a drain of culex.testing, a round's at
a time); the reporter (culex.runner.reporter) takes them all at once, and puts back those
it could not send. ``landed`` is clear while outcomes wait for a server that could not
take them (out of memory, out of reach): the claimer claims no task then (on one server;
not on a cluster, where it skips the queues of the master out of reach by itself).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from .outcome import Outcome


class Outbox:
    """The outcomes to report, with the events the runner's loops wait on."""

    __slots__ = ("landed", "outcomes", "ready")

    def __init__(self, outcomes: Iterable[Outcome] = ()) -> None:
        self.outcomes: list[Outcome] = list(outcomes)
        self.ready = asyncio.Event()  # set when an outcome was put in
        self.landed = asyncio.Event()  # clear while reports wait for the server
        self.landed.set()

    def put(self, outcome: Outcome) -> None:
        """One more outcome to report; the reporter wakes for it."""
        self.outcomes.append(outcome)
        self.ready.set()

    def take(self) -> list[Outcome]:
        """Every outcome waiting, taken out."""
        batch = self.outcomes
        self.outcomes = []
        return batch

    def extend(self, outcomes: list[Outcome]) -> None:
        """More outcomes, without waking the reporter: those it could not send, to send
        again after its pause, or a drain's round, which it flushes itself."""
        self.outcomes += outcomes
