"""What a runner supports, as the runner registry says it, and the warning that runners of an
older culex ignore a control.

Each runner records ``protocol`` in its registry record (``PROTOCOL``: the controls it
honours in its claim, reclaim and reports). A record without it is a runner of an older
culex: it claims past a pause and past limits set at run time, and ends grouped tasks
without counting them out of their group. ``culex pause``, ``culex limit`` and
``enqueue(group=)`` then warn (:func:`warn_of_older`), after one read of the registry; an
enqueue reads it at most once a minute per queue and process.

Each runner also records its release (``version``, :data:`VERSION`) and the features it
serves (``features``, :data:`FEATURES`: the task kinds an older runner mishandles). A
feature in use on a queue that a live runner of that queue cannot serve is what
``culex runners`` and the dashboard's runners and queue pages warn of
(:func:`unserved`): see docs/production.md, "Upgrades and rollbacks".
"""

from __future__ import annotations

import time
import warnings
from typing import NamedTuple

from .. import config
from .._redis import commands
from .._redis.keys import QueueKeys, queue_keys
from .procedures import Procedure

# culex's release (CHANGELOG.md): pyproject.toml reads it from here ([tool.hatch.version]),
# culex.__version__ is it, and each runner records it in the registry.
VERSION = "0.10.0"
PROTOCOL = 1  # 1: pause, limits set at run time, groups and healed group counts
RECHECK = 60.0  # seconds between an enqueue's reads of the registry, per queue

_FIELDS = ("queues", "protocol", "version", "host", "pid", "features")
_checked: dict[tuple[str | None, str, str], float] = {}  # (url, prefix, queue) -> monotonic


class OlderRunnerWarning(UserWarning):
    """Runners of an older culex run a queue: they ignore a control just set on it."""


def older_runners(prefix: str, queues: list[str]) -> Procedure[dict[str, list[dict[str, str]]]]:
    """The runners in the registry whose record says no ``protocol`` (an older culex), for
    each of ``queues`` they run ({} when none): their version, host and pid. A registry the
    server cannot read counts as none: a warning never stops what it warns of."""
    found: dict[str, list[dict[str, str]]] = {}
    for record in (yield from _records(prefix)):
        if record.get("protocol"):
            continue
        for queue in set(record["queues"].split(",")) & set(queues):
            found.setdefault(queue, []).append(record)
    return found


def _records(prefix: str) -> Procedure[list[dict[str, str]]]:
    """The live runners' records that name queues (``_FIELDS`` of each, and ``id``, the
    runner's in the registry): none when the server cannot read the registry."""
    listed = yield [commands.runner_ids(prefix)]
    if not isinstance(listed[0], list) or not listed[0]:
        return []
    records = yield [commands.runner_fields(prefix, i, _FIELDS) for i in listed[0]]
    return [
        {**r, "id": i}
        for i, r in zip(listed[0], records, strict=True)
        if isinstance(r, dict) and r.get("queues")
    ]


def warning(queue: str, runners: list[dict[str, str]], ignored: str) -> str:
    """The line that says so: ``queue``'s older runners, and what they ignore."""
    return (
        f"{len(runners)} runner(s) of an older culex run queue {queue!r} ({_named(runners)}): "
        f"they ignore {ignored} until they are upgraded (culex runners lists them)"
    )


def _named(runners: list[dict[str, str]]) -> str:
    """ "0.1.0 on web-1 pid 41, ..." for the first three of ``runners``, "and N more"."""
    named = ", ".join(
        f"{r.get('version') or 'an unknown version'} on {r.get('host', '?')} pid "
        f"{r.get('pid', '?')}"
        for r in runners[:3]
    )
    return named + (f" and {len(runners) - 3} more" if len(runners) > 3 else "")


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


class Feature(NamedTuple):
    """A kind of task that a runner older than ``since`` mishandles: ``name`` as a runner's
    record lists it, ``title`` as the warnings say it, ``older`` what such a runner does
    with these tasks. A queue uses it when a task next in line has one of ``fields`` (or
    params that begin with ``params``), or one of the queue's keys named ``keys`` (QueueKeys
    attributes, or a groups key) exists."""

    name: str
    title: str
    since: str
    older: str
    fields: tuple[str, ...] = ()
    keys: tuple[str, ...] = ()
    params: str = ""


# Every feature an older runner mishandles, oldest first (docs/production.md, "Upgrades and
# rollbacks", says the same per feature, with what to drain before a rollback below it).
FEATURES = (
    Feature(
        "controls", "a pause or limits set at run time", "0.4.0",
        "claims past a pause and past limits set at run time", keys=("control",),
    ),
    Feature(
        "groups", "groups", "0.4.0",
        "takes no task from a group's ready set, and a grouped task it retries, reclaims or "
        "ends runs outside its group's limits or is not counted out of its group",
        fields=("group",), keys=("grouped_ready", "groups:running"),
    ),
    Feature(
        "workflows", "workflows", "0.5.0",
        "ends a workflow node without releasing its downstreams: the run never ends",
        fields=("run",), keys=("outbox",),
    ),
    Feature(
        "durable", "durable steps", "0.6.0",
        "runs perform from the top without its recorded steps (steps run again, a sleep or "
        "a wait for a signal is not kept)",
        fields=("steps", "awaiting", "suspended_at"),
    ),
    Feature(
        "expiry", "expiry (expires=)", "0.7.0",
        "runs a task after it expired", fields=("expires_at",),
    ),
    Feature(
        "headers", "middleware headers", "0.8.0",
        "runs the task without its headers (no middleware context)", fields=("headers",),
    ),
    Feature(
        "encrypted", "EncryptedParams", "0.8.0",
        "reads sealed params as the params: the task goes to dead (no value for the "
        "required param)",
        params='{"$encrypted":',
    ),
    Feature(
        "events", "task events", "0.9.0",
        "writes no event for the tasks it takes and ends (the stream, culex events and "
        "task.watch miss them)",
        keys=("events",),
    ),
)  # fmt: skip
SERVED = ",".join(f.name for f in FEATURES)  # (what this culex's runners record)
LOOKED_AT = 25  # the tasks next in line looked at per state (waiting, scheduled, ...)
_NEXT = ("waiting", "scheduled", "pending", "grouped_ready")


class Unserved(NamedTuple):
    """A feature in use on ``queue`` (as ``seen``: a task id or a key) that ``runners`` of
    that queue cannot serve (their records: version, host, pid)."""

    queue: str
    feature: Feature
    seen: str
    runners: list[dict[str, str]]

    def line(self) -> str:
        """What ``culex runners`` prints and the dashboard shows (without runners: what
        ``culex runners --rollback-check`` prints)."""
        f = self.feature
        said = (
            f"queue {self.queue!r} uses {f.title} ({self.seen}): a runner older than "
            f"{f.since} {f.older}"
        )
        if not self.runners:
            return f"{said}. Drain these tasks before a rollback below {f.since}"
        return (
            f"{said}; {len(self.runners)} runner(s) there cannot serve it "
            f"({_named(self.runners)}): upgrade or stop them (docs/production.md, Upgrades "
            f"and rollbacks)"
        )


def release(text: str) -> tuple[int, int, int]:
    """A release's numbers ("0.4.0" -> (0, 4, 0)); a ValueError for anything else."""
    parts = text.split(".") if isinstance(text, str) else []
    if len(parts) != 3 or not all(p.isdecimal() and len(p) < 6 for p in parts):
        raise ValueError(f"a release is written like 0.4.0, got {text!r}")
    return int(parts[0]), int(parts[1]), int(parts[2])


def newer_in_use(prefix: str, version: str, queues: list[str]) -> Procedure[list[Unserved]]:
    """The features newer than release ``version`` in use on each of ``queues`` (runners
    left empty): what a rollback to ``version`` would mishandle, to drain first. Two round
    trips a queue."""
    newer = [f for f in FEATURES if release(f.since) > release(version)]
    found: list[Unserved] = []
    for queue in queues if newer else []:
        found += [
            Unserved(queue, f, seen, []) for f, seen in (yield from in_use(prefix, queue, newer))
        ]
    return found


def served(record: dict[str, str]) -> set[str]:
    """The features a runner's record says it serves: its ``features``; a record without
    them (culex before 0.10.0, whose records all said version 0.1.0) serves pause, limits and
    groups when it says a ``protocol``, else none."""
    if "features" in record:
        return set(record["features"].split(","))
    return {"controls", "groups"} if record.get("protocol") else set()


def unserved(prefix: str, queues: list[str] | None = None) -> Procedure[list[Unserved]]:
    """For each queue (of ``queues``, or every queue a live runner runs) that a runner
    cannot serve every feature on: the features in use there that some of its runners
    cannot serve. Reads the registry once, and only the queues such a runner runs: nothing
    more when every runner serves everything."""
    lacking: dict[str, dict[str, list[dict[str, str]]]] = {}  # queue -> feature -> records
    for record in (yield from _records(prefix)):
        missing = [f.name for f in FEATURES if f.name not in served(record)]
        for queue in record["queues"].split(","):
            if missing and (queues is None or queue in queues):
                for name in missing:
                    lacking.setdefault(queue, {}).setdefault(name, []).append(record)
    found: list[Unserved] = []
    for queue in sorted(lacking):
        used = yield from in_use(prefix, queue, [f for f in FEATURES if f.name in lacking[queue]])
        found += [Unserved(queue, f, seen, lacking[queue][f.name]) for f, seen in used]
    return found


def in_use(
    prefix: str, queue: str, features: list[Feature]
) -> Procedure[list[tuple[Feature, str]]]:
    """Which of ``features`` ``queue`` uses, each with what showed it: one of its keys, or
    one of the ``LOOKED_AT`` tasks next in line of waiting, scheduled, pending and its
    groups' ready tasks. Two round trips."""
    keys = queue_keys(prefix, queue)
    named = [(f, k) for f in features for k in f.keys]
    calls = [commands.first_ids(getattr(keys, s), LOOKED_AT) for s in _NEXT]
    replies = yield [*calls, *(commands.exists(_key(keys, k)) for _, k in named)]
    found = zip(named, replies[len(calls) :], strict=True)
    seen = {f.name: f"key {_key(keys, k)}" for (f, k), there in found if there is True}
    ids = list(dict.fromkeys(i for r in replies[: len(calls)] if isinstance(r, list) for i in r))
    fields = sorted({n for f in features for n in f.fields} | {"params"})
    rows = (yield [commands.read_fields(keys, i, fields) for i in ids]) if ids else []
    for task_id, row in zip(ids, rows, strict=True):
        values = dict(zip(fields, row, strict=True)) if isinstance(row, list) else {}
        for f in features:
            if f.name not in seen and (
                any(values.get(n) for n in f.fields)
                or (f.params and (values.get("params") or "").startswith(f.params))
            ):
                seen[f.name] = f"task {task_id}"
    return [(f, seen[f.name]) for f in features if f.name in seen]


def _key(keys: QueueKeys, name: str) -> str:
    """A queue's key by its QueueKeys attribute, or ``groups:<rest>`` under its groups."""
    if name.startswith("groups:"):
        return keys.groups_prefix + name.partition(":")[2]
    return str(getattr(keys, name))
