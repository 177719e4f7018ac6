"""What a runner supports, as the runner registry says it, and the warning that runners of an
older culex ignore a control.

Each runner records ``protocol`` in its registry record (``PROTOCOL``: the controls it
honours in its claim, reclaim and reports). A record without it is a runner of an older
culex: it claims past a pause and past limits set at run time, and ends grouped tasks
without counting them out of their group. ``culex pause``, ``culex limit`` and
``enqueue(group=)`` then warn (:func:`warn_of_older`), after one read of the registry; an
enqueue reads it at most once a minute per queue and process.
"""

from __future__ import annotations

import time
import warnings

from .. import config
from .._redis import commands
from .procedures import Procedure

PROTOCOL = 1  # 1: pause, limits set at run time, groups and healed group counts
RECHECK = 60.0  # seconds between an enqueue's reads of the registry, per queue

_FIELDS = ("queues", "protocol", "version", "host", "pid")
_checked: dict[tuple[str | None, str, str], float] = {}  # (url, prefix, queue) -> monotonic


class OlderRunnerWarning(UserWarning):
    """Runners of an older culex run a queue: they ignore a control just set on it."""


def older_runners(prefix: str, queues: list[str]) -> Procedure[dict[str, list[dict[str, str]]]]:
    """The runners in the registry whose record says no ``protocol`` (an older culex), for
    each of ``queues`` they run ({} when none): their version, host and pid. A registry the
    server cannot read counts as none: a warning never stops what it warns of."""
    listed = yield [commands.runner_ids(prefix)]
    if not isinstance(listed[0], list) or not listed[0]:
        return {}
    records = yield [commands.runner_fields(prefix, i, _FIELDS) for i in listed[0]]
    found: dict[str, list[dict[str, str]]] = {}
    for record in records:
        if not isinstance(record, dict) or not record.get("queues") or record.get("protocol"):
            continue
        for queue in set(record["queues"].split(",")) & set(queues):
            found.setdefault(queue, []).append(record)
    return found


def warning(queue: str, runners: list[dict[str, str]], ignored: str) -> str:
    """The line that says so: ``queue``'s older runners, and what they ignore."""
    named = ", ".join(
        f"{r.get('version') or 'an unknown version'} on {r.get('host', '?')} pid "
        f"{r.get('pid', '?')}"
        for r in runners[:3]
    )
    more = f" and {len(runners) - 3} more" if len(runners) > 3 else ""
    return (
        f"{len(runners)} runner(s) of an older culex run queue {queue!r} ({named}{more}): "
        f"they ignore {ignored} until they are upgraded (culex runners lists them)"
    )


def warn_of_older(
    settings: config.Settings, queues: list[str], ignored: str, *, recheck: bool = False
) -> Procedure[list[str]]:
    """Read the registry once and warn (:class:`OlderRunnerWarning`) for each of ``queues``
    that runners of an older culex run; the warnings said. With ``recheck``, a queue is
    looked at again only ``RECHECK`` seconds after its last look in this process."""
    if recheck:
        now = time.monotonic()
        due = [
            q
            for q in queues
            if now - _checked.get((settings.redis_url, settings.prefix, q), -RECHECK) >= RECHECK
        ]
        if not due:
            return []
        for q in due:
            _checked[(settings.redis_url, settings.prefix, q)] = now
        queues = due
    found = yield from older_runners(settings.prefix, queues)
    said = [warning(q, found[q], ignored) for q in queues if q in found]
    for line in said:
        warnings.warn(line, OlderRunnerWarning, stacklevel=2)
    return said
