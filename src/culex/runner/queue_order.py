"""In which order a runner asks its queues for tasks, and how much it asks of each.

Each claim turn gets a plan: the queues in the order they are asked, and each one's share
of the free slots. The claimer asks every queue once per turn, for its share plus what the
queues before it left unclaimed, so a turn still fills every free slot it can.

- :class:`Rotation` (plain names): the first queue asked turns each time, and it is asked
  for every free slot, so one busy queue cannot starve the others.
- :class:`Strict` (``strict_queues``): always in ``run_from``'s order; a queue is asked
  only for what the queues before it did not fill.
- :class:`Weighted` (``critical:6,default:3,low:1``): smooth weighted round robin (nginx's)
  per free slot, so the shares follow the weights within every turn, and over turns.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from .._redis.keys import QueueKeys


class QueueOrder(Protocol):
    """The plan of one claim turn."""

    def plan(self, free: int) -> tuple[list[QueueKeys], Sequence[int]]:
        """The queues in the order to ask them, and the shares of ``free`` (a share left
        out is 0). The shares add up to ``free``, and never grow along the order."""
        ...


def choose(keys: list[QueueKeys], weights: Mapping[str, int], strict: bool) -> QueueOrder:
    """The order for a runner's queues: strict, weighted (weights that differ), or the
    rotation of plain names (equal weights are plain names)."""
    if strict:
        return Strict(keys)
    if len(set(weights.get(k.name, 1) for k in keys)) > 1:
        return Weighted(keys, [weights.get(k.name, 1) for k in keys])
    return Rotation(keys)


class Rotation:
    def __init__(self, keys: list[QueueKeys]) -> None:
        self.keys = keys
        self.turn = 0

    def plan(self, free: int) -> tuple[list[QueueKeys], Sequence[int]]:
        keys, turn = self.keys, self.turn
        self.turn = (turn + 1) % len(keys)
        return keys[turn:] + keys[:turn], (free,)


class Strict:
    def __init__(self, keys: list[QueueKeys]) -> None:
        self.keys = keys

    def plan(self, free: int) -> tuple[list[QueueKeys], Sequence[int]]:
        return self.keys, (free,)


class Weighted:
    """Smooth weighted round robin, one pick per free slot: each pick adds every queue's
    weight to its credit and picks the queue with the most, which then pays the total.
    Over any run of ``total`` picks each queue is picked exactly its weight's times, and
    the picks are spread (6:3:1 gives c d c c d c l c d c, not six c in a row)."""

    def __init__(self, keys: list[QueueKeys], weights: list[int]) -> None:
        self.keys = keys
        self.weights = weights
        self.total = sum(weights)
        self.credit = [0] * len(keys)

    def plan(self, free: int) -> tuple[list[QueueKeys], Sequence[int]]:
        # Whole rounds of `total` picks give each queue its weight and leave the credits
        # as they were: only the rest is picked one by one.
        rounds, rest = divmod(free, self.total)
        shares = [rounds * w for w in self.weights]
        credit, weights = self.credit, self.weights
        indexes = range(len(weights))
        for _ in range(rest):
            for i in indexes:
                credit[i] += weights[i]
            picked = max(indexes, key=credit.__getitem__)
            credit[picked] -= self.total
            shares[picked] += 1
        # The largest share first; among equal shares, the queue owed most (its credit).
        order = sorted(indexes, key=lambda i: (-shares[i], -credit[i]))
        return [self.keys[i] for i in order], [shares[i] for i in order]
