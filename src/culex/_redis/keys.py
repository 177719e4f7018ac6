"""Every Redis key name culex uses, in one place.

Each queue's keys share the hash tag ``{<queue>}``, so every key one script touches lives
in one Redis Cluster slot and queues spread over shards.
"""

from __future__ import annotations

from functools import lru_cache

from ..errors import short

# A queue name becomes part of key names and of a hash tag: braces would break the tag.
_FORBIDDEN = frozenset("{}")
MAX_QUEUE_NAME = 200


def check_queue_name(name: object) -> str:
    """Return ``name`` if it can name a queue, else raise a clear error."""
    if not isinstance(name, str):
        raise TypeError(f"a queue name must be a str, got {type(name).__name__}")
    if not name or len(name) > MAX_QUEUE_NAME:
        raise ValueError(
            f"a queue name must have 1 to {MAX_QUEUE_NAME} characters: {short(name, 210)}"
        )
    if not name.isprintable() or any(c in _FORBIDDEN or c.isspace() for c in name):
        raise ValueError(
            f"a queue name cannot hold braces, spaces or control characters: {short(name, 210)}"
        )
    return name


class QueueKeys:
    """The keys of one queue: four sorted sets, a wake-up signal, the task hashes, the
    lists that wake producers waiting for a task's end, the records of the periodic
    jobs that run on it, its counters (minute and hour buckets, totals), its procedure
    control (the control hash, the rate limit's starts), its dedupe keys (each
    mapped to the live task enqueued with it), its groups' ready sets and turns, the
    cancels requested for its running tasks, and its event stream."""

    __slots__ = (
        "aside",
        "cancels",
        "control",
        "dead",
        "dedupe",
        "dedupe_windows",
        "done_prefix",
        "events",
        "grouped_ready",
        "groups_prefix",
        "name",
        "outbox",
        "pending",
        "periodic_prefix",
        "scheduled",
        "signal",
        "starts",
        "stats_prefix",
        "stats_total",
        "succeeded",
        "task_prefix",
        "waiting",
    )

    def __init__(self, prefix: str, queue: str) -> None:
        base = f"{prefix}:{{{queue}}}"
        self.name = queue
        self.waiting = f"{base}:waiting"
        self.pending = f"{base}:pending"
        self.scheduled = f"{base}:scheduled"
        self.dead = f"{base}:dead"
        self.signal = f"{base}:signal"
        self.task_prefix = f"{base}:task:"
        self.done_prefix = f"{base}:done:"
        self.periodic_prefix = f"{base}:periodic:"
        # Counters: the scripts that end tasks add <prefix>m:<start s> (a minute bucket),
        # <prefix>h:<start s> (an hour bucket) and <prefix>total to it (docs/wire-format.md).
        self.stats_prefix = f"{base}:stats:"
        self.stats_total = f"{base}:stats:total"
        # Flow control: the queue's pause flag and the limits set at run time (a hash),
        # and the starts of the rate limit's window (a sorted set, scored by start ms).
        self.control = f"{base}:control"
        self.starts = f"{base}:starts"
        # The running (pending) tasks whose cancel was requested (cancel.lua), scored by
        # the request's time in ms: their runners read it about once a second. An id
        # leaves it when its task leaves pending (fail, complete, reclaim).
        self.cancels = f"{base}:cancels"
        # A hash: dedupe key -> the id of the task that holds it (enqueue.lua); the scripts
        # that end a task remove its entry, or keep it for the task's window.
        # The recent successes: task id -> when it succeeded (ms); complete.lua keeps the
        # newest 1,000 and drops the oldest whose hash has expired (browse.lua reads it).
        self.succeeded = f"{base}:succeeded"
        self.dedupe = f"{base}:dedupe"
        # A sorted set: the dedupe keys kept after their task ended (enqueue(dedupe_for=)),
        # scored by the window's end in ms. The scripts name it from the dedupe hash (this
        # name + ":windows", include/dedupe.lua): ending a task takes no KEY more.
        self.dedupe_windows = f"{self.dedupe}:windows"
        # Groups (enqueue(group=)): <prefix>g:<group> (a group's ready tasks), ready (every
        # grouped ready task), ring (the groups' turns), running, delayed, s:<group> (a
        # group's rate window): include/groups.lua and claim.lua.
        self.groups_prefix = f"{base}:groups:"
        self.grouped_ready = f"{self.groups_prefix}ready"
        # Workflows: the ends of this queue's workflow nodes not yet applied to their
        # downstreams and runs (a sorted set of task ids scored by when a runner may take
        # each, beside a hash per entry, <outbox>:<id>: include/workflow.lua).
        self.outbox = f"{base}:outbox"
        # The entries a runner could not apply (workflow_done.lua's "aside"): a sorted set
        # of task ids scored by when, beside a hash per entry, <aside>:<id>, with `reason`.
        self.aside = f"{base}:aside"
        # The queue's task events (a stream, bounded by count and age): the scripts that
        # change a task's state add one entry when they are sent it (include/events.lua).
        self.events = f"{base}:events"

    def task(self, task_id: str) -> str:
        """The hash of one task."""
        return self.task_prefix + task_id

    def done(self, task_id: str) -> str:
        """The list that wakes the producers waiting for one task's end (wait.lua)."""
        return self.done_prefix + task_id

    def outbox_entry(self, task_id: str) -> str:
        """The outbox entry of a workflow node that ended: its run, state, result or error,
        and its downstreams (include/workflow.lua)."""
        return f"{self.outbox}:{task_id}"

    def waits(self, task_id: str) -> str:
        """The set of upstream ids a blocked workflow node still waits for."""
        return f"{self.task_prefix[:-5]}waits:{task_id}"

    def upstream(self, task_id: str) -> str:
        """A workflow node's copy of what its upstreams ended with: upstream id -> JSON."""
        return f"{self.task_prefix[:-5]}upstream:{task_id}"

    def stats_minute(self, start: int) -> str:
        """The counters of the minute that starts at ``start`` (epoch seconds, a multiple
        of 60); it expires 2 days after it was added to its hour and the totals."""
        return f"{self.stats_prefix}m:{start}"

    def stats_hour(self, start: int) -> str:
        """The counters of the hour that starts at ``start`` (epoch seconds, a multiple of
        3600), its minutes added as they end; it expires 8 days after the last one."""
        return f"{self.stats_prefix}h:{start}"

    def events_if(self, events: bool) -> tuple[str, ...]:
        """The optional last key of the scripts that change a task's state: the queue's
        event stream when events are on (include/events.lua), else none."""
        return (self.events,) if events else ()

    def periodic(self, job_type: str) -> str:
        """The record of one periodic job (its slots and last run), in the queue's slot."""
        return self.periodic_prefix + job_type


@lru_cache(maxsize=1024)
def queue_keys(prefix: str, queue: str) -> QueueKeys:
    """The (cached) keys of ``queue`` under ``prefix``."""
    return QueueKeys(prefix, queue)


def queue_base(prefix: str, queue: str) -> str:
    """The start every key of ``queue`` shares, ``<prefix>:{<queue>}:`` (read_queues.lua
    adds the rest, as :class:`QueueKeys` names them)."""
    return f"{prefix}:{{{queue}}}:"


def queues_key(prefix: str) -> str:
    """A set of every queue name producers have used (for the CLI and dashboards)."""
    return f"{prefix}:queues"


def periodic_jobs_key(prefix: str) -> str:
    """The registry of periodic jobs: a sorted set of ``<queue> <job type>`` (neither holds
    a space), scored by when the job's record expires unless a scheduler renews it."""
    return f"{prefix}:periodic"


def runners_key(prefix: str) -> str:
    """The runner registry: a sorted set of runner ids, scored by when each record expires.
    Its hash tag keeps it in one slot with the runners' own hashes (beat.lua)."""
    return f"{prefix}:{{runners}}"


def runner_key(prefix: str, runner_id: str) -> str:
    """One runner's record (host, pid, queues, the tasks it runs now, ...)."""
    return f"{prefix}:{{runners}}:runner:{runner_id}"


class RunKeys:
    """The keys of one workflow run, in a slot of its own (the hash tag ``{run:<id>}``):
    its record (name, state, node count, times), its nodes (task id -> JSON of queue, name,
    upstream ids, policy), the nodes that ended (task id -> state), and the list that wakes
    those waiting for its end."""

    __slots__ = ("done", "ended", "id", "nodes", "record")

    def __init__(self, prefix: str, run_id: str) -> None:
        base = f"{prefix}:{{run:{run_id}}}"
        self.id = run_id
        self.record = f"{base}:record"
        self.nodes = f"{base}:nodes"
        self.ended = f"{base}:ended"
        self.done = f"{base}:done"


def run_keys(prefix: str, run_id: str) -> RunKeys:
    """The keys of workflow run ``run_id`` under ``prefix``."""
    return RunKeys(prefix, run_id)


def unfinished_key(prefix: str) -> str:
    """The workflow operations that span slots and are under way (an enqueue, a cancel, a
    retry): a sorted set of run ids scored by when a runner may finish the operation in
    the producer's stead (ms): the producer removes its run once done."""
    return f"{prefix}:{{workflows}}:unfinished"
