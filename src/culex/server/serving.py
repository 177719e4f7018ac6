"""Whether a live runner serves a queue, for what waits on one: ``task.result()`` and
``run.wait()`` (a warning after :data:`WARN_AFTER` seconds, and in their TimeoutError) and
the dashboard's queue and run pages (a notice line). Without it, a wait on a queue no
runner runs looks the same as a slow task: no word for ever, or "still waiting".

The runner registry (beat.lua) holds the live runners and the queues each runs; a queue's
counters (``stats:total``'s ``minute``) hold the minute a task of it last ended, which says
since when none has served it. One read of each, only when asked: never on a wait's hot path.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable
from datetime import UTC, datetime

from .._redis import commands
from .._redis.keys import queue_keys
from .procedures import Procedure

# Seconds a wait goes on before it looks for a runner of its queues (once).
WARN_AFTER = 5.0

QUIET = "quiet"  # (a runner's state once it takes no new task: runner/startup.py)


class NoRunnerWarning(UserWarning):
    """A wait depends on a queue that no live runner runs: it ends only once one does."""


def unserved(prefix: str, queues: Iterable[str]) -> Procedure[list[str]]:
    """For each of ``queues`` that no live runner takes tasks from (none in the registry
    runs it, or those that do are quiet), the line that says so and since when: ``no runner
    has served queue 'orders' since 2026-12-07 14:02 UTC ...`` or ``no runner has ever
    served queue 'orders' ...``. A registry the server cannot read counts as served: a
    warning never stops, nor blames, what it warns of. One round trip (the registry's ids
    and the queues' last counted minutes), and one more to read the runners it lists."""
    asked = list(dict.fromkeys(queues))
    if not asked:
        return []
    minutes = [commands.unfolded_minute(queue_keys(prefix, q)) for q in asked]
    listed, *ended = yield [commands.runner_ids(prefix), *minutes]
    if not isinstance(listed, list):
        return []
    records = (
        (yield [commands.runner_fields(prefix, i, ("queues", "state")) for i in listed])
        if listed
        else []
    )
    served: set[str] = set()
    for record in records:
        if isinstance(record, dict) and record.get("state") != QUIET:
            served.update(record.get("queues", "").split(","))
    return [
        _line(queue, minute)
        for queue, minute in zip(asked, ended, strict=True)
        if queue not in served
    ]


def _line(queue: str, minute: object) -> str:
    if not isinstance(minute, int):
        return (
            f"no runner has ever served queue {queue!r} (none runs it now, and no task of it "
            "has ended): start one with culex run MODULE; culex runners lists those at work"
        )
    at = datetime.fromtimestamp(minute, UTC).strftime("%Y-%m-%d %H:%M UTC")
    return (
        f"no runner has served queue {queue!r} since {at} (none runs it now; a task of it "
        "last ended then): culex runners lists those at work"
    )


def warn(lines: list[str], waiting: str) -> None:
    """Each line as a :class:`NoRunnerWarning`: ``waiting`` (what waits) and why it may
    wait for ever. Python shows each text once per place by default."""
    for line in lines:
        warnings.warn(f"{waiting} waits on a queue no runner serves: {line}", NoRunnerWarning,
                      stacklevel=2)  # fmt: skip
