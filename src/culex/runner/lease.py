"""Leases: a runner's claim on its running tasks, renewed by heartbeats from a thread.

The heartbeat runs in a thread of its own with its own connection, so a task that blocks
the event loop (a busy loop in an ``async def perform``) or holds the GIL in a C call does
not stop the renewals: such a task is not handed out twice while its runner lives.

The same beat, in the same round trip, keeps the runner's record in the runner registry
(beat.lua): who it is and the tasks it runs now. The record expires a lease after the last
beat, and is removed when the runner stops.

A running attempt's own calls (a durable step's record, a suspend, a read of its records or
upstreams) are held through a server outage for as long as its lease holds
(:class:`ThroughOutage`), as the reporter holds a finished outcome.
"""

from __future__ import annotations

import json
import logging
import threading
import time

from .. import config
from .._redis import claims, commands, reports
from .._redis.calls import Call
from .._redis.claims import Claimed
from .._redis.drivers import SyncDriverProtocol
from .._redis.keys import queue_keys, queues_key
from ..errors import AttemptOver, ServerError, ServerUnavailable
from ..jobs.task_logs import LogBuffer
from ..server import configured
from .backoff import SERVER_ERROR, Backoff

logger = logging.getLogger("culex")

# A runner that could not renew a lease for this share of it knows the task may be lost.
LOST_AFTER = 0.8


class Held:
    """A task this runner holds: its lease and when that lease was last renewed."""

    __slots__ = ("claimed", "finished", "lease_ms", "lines", "lost", "renewed", "started")

    def __init__(self, claimed: Claimed, lease_ms: int) -> None:
        self.claimed = claimed
        self.lease_ms = lease_ms
        self.renewed = time.monotonic()
        self.started = round(time.time() * 1000)  # (shown in the registry)
        self.lost = False
        # The attempt has ended and its report may be on its way: a refused renewal then
        # means the report landed first, not a lost lease.
        self.finished = False
        self.lines: LogBuffer | None = None  # its job's log lines, sent with each beat

    def left(self, now: float) -> float:
        """Seconds (monotonic) until the runner must take this lease for lost if it is not
        renewed meanwhile (0.8 of it after the last renewal); 0 or less: now."""
        return self.renewed + LOST_AFTER * self.lease_ms / 1000 - now


class LeaseKeeper:
    """Renews the leases of every held task in one call per queue, every lease/3, and
    records the runner (``identity``: its fields in the registry; None: not recorded)."""

    def __init__(
        self, settings: config.Settings, url: str, identity: dict[str, str] | None = None
    ) -> None:
        self.settings = settings
        self.url = url
        self.identity = identity
        self._default_lease_ms = settings.lease_ms  # (read per task: computed once)
        self._held: dict[tuple[str, str], Held] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._run, name="culex-heartbeat", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stopped.set()
        self._wake.set()
        self._thread.join(timeout=5)

    def hold(self, claimed: Claimed, lease_ms: int) -> None:
        """Keep renewing ``claimed``; a lease other than the claim's is set at once."""
        with self._lock:
            self._held[(claimed.queue, claimed.id)] = Held(claimed, lease_ms)
        if lease_ms != self._default_lease_ms:
            self._wake.set()

    def keep_lines(self, claimed: Claimed, buffer: LogBuffer) -> None:
        """Send the log lines of ``claimed``'s attempt in ``buffer`` with each beat."""
        with self._lock:
            held = self._held.get((claimed.queue, claimed.id))
            if held is not None and held.claimed is claimed:
                held.lines = buffer

    def say(self, **fields: str) -> None:
        """Change fields of the runner's record (its ``state``); the next beat, at once,
        writes them."""
        if self.identity is not None:
            self.identity = {**self.identity, **fields}  # (a new dict: the thread reads it)
        self._wake.set()

    def finish(self, claimed: Claimed) -> None:
        """The attempt ended; keep renewing until its report lands, but expect refusals."""
        held = self._held.get((claimed.queue, claimed.id))
        if held is not None:
            held.finished = True

    def outage(self, claimed: Claimed) -> ThroughOutage:
        """How ``claimed``'s attempt holds its own calls through a server outage."""
        return ThroughOutage(self, claimed)

    def holding(self, claimed: Claimed) -> Held | None:
        """The lease held for ``claimed``'s attempt, None when it is held no more. (No lock:
        a child process forked while a thread held it calls this too.)"""
        held = self._held.get((claimed.queue, claimed.id))
        return held if held is not None and held.claimed is claimed else None

    def drop(self, claimed: Claimed) -> None:
        """Stop renewing ``claimed`` (its outcome was reported, or it was handed back)."""
        with self._lock:
            held = self._held.get((claimed.queue, claimed.id))
            if held is not None and held.claimed is claimed:
                del self._held[(claimed.queue, claimed.id)]

    def _run(self) -> None:
        driver = self._connected()
        if driver is None:  # stopped first
            return
        self._renew(driver, [])  # (the runner is in the registry from its start)
        while not self._stopped.is_set():
            with self._lock:
                held = list(self._held.values())
            shortest = min((h.lease_ms for h in held), default=self.settings.lease_ms)
            self._wake.wait(shortest / 3000)
            self._wake.clear()
            if not self._stopped.is_set() and (held or self.identity is not None):
                with self._lock:  # (the tasks held now, for the registry)
                    held = list(self._held.values())
                self._renew(driver, held)
        if self.identity is not None:
            try:
                driver.run(self._record(0, []))
            except ServerError as exc:  # (it expires a lease from now anyway)
                logger.warning("could not leave the runner registry: %s", exc)
        driver.close()

    def _connected(self) -> SyncDriverProtocol | None:
        """The thread's own driver; while it cannot be made (a cluster whose nodes do not
        answer, say), tried again after a back-off: the thread never dies of it."""
        backoff = Backoff(*SERVER_ERROR)
        while True:
            try:
                timeout = self.settings.socket_timeout
                return configured.new_sync_driver(self.url, socket_timeout=timeout)
            except ServerError as exc:
                logger.warning("the heartbeat cannot connect (tried again): %s", exc)
            if self._stopped.wait(backoff.failed()):
                return None

    def _record(self, ttl_ms: int, held: list[Held]) -> Call[int]:
        """The runner's beat in the registry: who it is, and the tasks it runs now."""
        assert self.identity is not None
        tasks = [
            {"queue": h.claimed.queue, "id": h.claimed.id, "job": h.claimed.type,
             "attempt": h.claimed.attempt, "started": h.started}
            for h in held
            if not h.finished
        ]  # fmt: skip
        fields = {**self.identity, "tasks": json.dumps(tasks)}
        return claims.beat(self.settings.prefix, self.identity["id"], ttl_ms, fields)

    def _listed(self) -> list[Call[int]]:
        """The runner's queues in the registry of queue names, again with each beat: a
        producer adds a queue once per process, so a queue whose name was lost (a FLUSHALL,
        a restore) is listed again while a runner serves it."""
        assert self.identity is not None
        names = [q for q in self.identity["queues"].split(",") if q]
        return [commands.register_queue(queues_key(self.settings.prefix), *names)] if names else []

    def _logged(self, held: list[Held]) -> list[tuple[LogBuffer, list[str], Call[int]]]:
        """The log lines the held attempts buffered since the last beat, and their calls."""
        logged = []
        for h in held:
            lines = h.lines.take() if h.lines is not None else []
            if lines and h.lines is not None:
                keys = queue_keys(self.settings.prefix, h.claimed.queue)
                call = reports.log(keys, h.claimed.id, h.claimed.attempt, lines)
                logged.append((h.lines, lines, call))
        return logged

    def _renew(self, driver: SyncDriverProtocol, held: list[Held]) -> None:
        groups: dict[tuple[str, int], list[Held]] = {}
        for h in held:
            groups.setdefault((h.claimed.queue, h.lease_ms), []).append(h)
        calls = [
            claims.heartbeat(
                queue_keys(self.settings.prefix, queue),
                lease_ms,
                [(h.claimed.id, h.claimed.attempt) for h in group],
            )
            for (queue, lease_ms), group in groups.items()
        ]
        beats = (
            []
            if self.identity is None
            else [*self._listed(), self._record(self.settings.lease_ms, held)]
        )
        logged = self._logged(held)
        try:
            replies = driver.run_many([*calls, *beats, *(call for _, _, call in logged)])
        except ServerError as exc:  # (the next beat tries again)
            logger.warning("could not renew the leases of %d tasks: %s", len(held), exc)
            replies = [exc] * (len(calls) + len(beats) + len(logged))
        told = len(calls) + len(beats)  # (the log calls' replies come after)
        if beats and isinstance(replies[told - 1], ServerError):
            logger.warning("could not beat in the runner registry: %s", replies[told - 1])
        for (buffer, lines, _), reply in zip(logged, replies[told:], strict=True):
            if isinstance(reply, ServerError):  # (with the next beat, or the report)
                buffer.put_back(lines)
        now = time.monotonic()
        for group, reply in zip(groups.values(), replies[: len(calls)], strict=True):
            lost = set(reply) if isinstance(reply, list) else set()
            for h in group:
                if isinstance(reply, list) and h.claimed.id not in lost:
                    h.renewed = now
                elif not h.lost and not h.finished and (h.claimed.id in lost or h.left(now) < 0):
                    h.lost = True
                    logger.warning(
                        "lost the lease of task %s<%s> (attempt %d): it may run again elsewhere; "
                        "its report will be refused",
                        h.claimed.queue,
                        h.claimed.id,
                        h.claimed.attempt,
                    )


class ThroughOutage:
    """An attempt's own call that the server cannot serve now (ServerUnavailable) is sent
    again after a back-off (50 ms doubling to 2 s, the reporter's), while the attempt's
    lease holds: renewed within 0.8 of it, not lost. Once it does not, the attempt ends
    (AttemptOver "outage"): its task runs again after the lease, as a stall, not a failed
    attempt. The call sent again is fenced by the attempt as the first was, and a call whose
    first sending landed (its reply lost) is taken as landed (culex.jobs.steps).

    In a child process (``isolation = "process"``) the keeper's renewals are not seen: there
    the lease counts from the last renewal before the child started."""

    __slots__ = ("backoff", "claimed", "keeper")

    def __init__(self, keeper: LeaseKeeper, claimed: Claimed) -> None:
        self.keeper = keeper
        self.claimed = claimed
        # (made by the first outage: one is made for every task, most of which meet none)
        self.backoff: Backoff | None = None

    def pause(self, error: ServerUnavailable) -> float:
        held = self.keeper.holding(self.claimed)
        left = 0.0 if held is None or held.lost else held.left(time.monotonic())
        if left <= 0:
            logger.warning(
                "task %s<%s> (attempt %d) stops: the server could not take its call within "
                "its lease (%s); it runs again after the lease",
                *(self.claimed.queue, self.claimed.id, self.claimed.attempt, error),
            )
            raise AttemptOver("outage") from error
        if self.backoff is None:
            self.backoff = Backoff(*SERVER_ERROR)
        if not self.backoff.failures:
            logger.warning(
                "task %s<%s> (attempt %d) waits for the server: %s (sent again while its "
                "lease holds)",
                *(self.claimed.queue, self.claimed.id, self.claimed.attempt, error),
            )
        return min(self.backoff.failed(), left)

    def passed(self) -> None:
        if self.backoff is not None:
            self.backoff.failures = 0
