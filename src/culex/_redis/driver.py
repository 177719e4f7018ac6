"""What the rest of culex needs from a driver: the calls it makes, sync and async.

A driver sends :class:`~culex._redis.operations.Call` objects and returns their parsed
replies. culex's own drivers (``client.SyncDriver``, ``client.AsyncDriver``) speak RESP
over their own connections; another one (a maintained client's Sentinel or Cluster
connection, say) is a new implementation of these two protocols, not a fork of the users.
tests/test_drivers.py holds what every implementation must do.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, TypeVar, runtime_checkable

from .operations import Call

T = TypeVar("T")


@runtime_checkable
class SyncDriverProtocol(Protocol):
    """A blocking driver, safe to share between threads."""

    def run(self, call: Call[T]) -> T:
        """Send one call; its parsed reply. A refused call raises its ServerError, a
        server out of reach ServerUnavailable; no call waits past ``socket_timeout``
        (plus what the call ``blocks`` on purpose)."""
        ...

    def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """Send calls in one round trip, run in order; their parsed replies, in order. A
        refused call's place holds its ServerError (the others still ran); a server out of
        reach raises ServerUnavailable."""
        ...

    def close(self) -> None:
        """Drop the idle connections (the driver may still be used: it opens new ones)."""
        ...


@runtime_checkable
class AsyncDriverProtocol(Protocol):
    """An asyncio driver, bound to the event loop it is first used on."""

    async def run(self, call: Call[T]) -> T:
        """As :meth:`SyncDriverProtocol.run`."""
        ...

    async def run_many(self, calls: Sequence[Call[Any]]) -> list[Any]:
        """As :meth:`SyncDriverProtocol.run_many`."""
        ...

    async def close(self) -> None:
        """As :meth:`SyncDriverProtocol.close`."""
        ...
