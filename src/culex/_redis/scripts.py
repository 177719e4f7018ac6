"""The Lua scripts, one file per state change under ``lua/``, loaded once per process.

Each file is the script as sent, complete by itself
(docs/design.md#the-files-are-the-protocol): a foreign client sends the same file (shared
Lua is copied in: culex._redis.assembly).

Each script is sent by its SHA-1 (EVALSHA); a server that lost its script cache
(restart, ``SCRIPT FLUSH``) answers NOSCRIPT and the driver loads it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

try:  # CPython's own SHA-1: hashlib would load OpenSSL into every runner (docs/fast.md)
    from _sha1 import sha1  # type: ignore[import-not-found]  # (no stub: a private module)
except ImportError:  # another Python
    from hashlib import sha1


MOST = 2**42 - 1
"""The largest whole number a script takes where its header names no other bound (a ready
time in ms, a duration in ms, a count): ``lua/include/numbers.lua``'s MOST. A script refuses
a larger one with nothing written; culex sends a longer duration as this one (139 years)."""


@dataclass(frozen=True, slots=True)
class Script:
    """A Lua script and its SHA-1."""

    name: str
    source: str
    sha: str

    @classmethod
    def load(cls, name: str) -> Script:
        """``lua/<name>.lua``, as it is."""
        source = resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")
        return cls(name, source, sha1(source.encode()).hexdigest())


ENQUEUE = Script.load("enqueue")
CLAIM = Script.load("claim")
COMPLETE = Script.load("complete")
FAIL = Script.load("fail")
HEARTBEAT = Script.load("heartbeat")
RELEASE = Script.load("release")
RECLAIM = Script.load("reclaim")
SCHEDULE = Script.load("schedule")
RETRY_DEAD = Script.load("retry_dead")
CANCEL = Script.load("cancel")
WAIT = Script.load("wait")
BEAT = Script.load("beat")
READ_PERIODIC = Script.load("read_periodic")
BROWSE = Script.load("browse")
DELETE = Script.load("delete")
HASTEN = Script.load("hasten")
QUEUE_CONTROL = Script.load("queue_control")
RETRY_LATER = Script.load("retry_later")
PROGRESS = Script.load("progress")
LOG = Script.load("log")
RUN_NOW = Script.load("run_now")
READ_QUEUES = Script.load("read_queues")
WORKFLOW_ENQUEUE = Script.load("workflow_enqueue")
WORKFLOW_RECORD = Script.load("workflow_record")
WORKFLOW_RESOLVE = Script.load("workflow_resolve")
WORKFLOW_TAKE = Script.load("workflow_take")
WORKFLOW_DONE = Script.load("workflow_done")
WORKFLOW_UNFINISHED = Script.load("workflow_unfinished")
WORKFLOW_DISCARD = Script.load("workflow_discard")
WORKFLOW_REARM = Script.load("workflow_rearm")
WORKFLOW_HEAL = Script.load("workflow_heal")
STEP = Script.load("step")
SUSPEND = Script.load("suspend")
SIGNAL = Script.load("signal")
PERIODIC_PAUSE = Script.load("periodic_pause")

ALL = (
    ENQUEUE,
    CLAIM,
    COMPLETE,
    FAIL,
    HEARTBEAT,
    RELEASE,
    RECLAIM,
    SCHEDULE,
    RETRY_DEAD,
    CANCEL,
    WAIT,
    BEAT,
    READ_PERIODIC,
    BROWSE,
    DELETE,
    HASTEN,
    QUEUE_CONTROL,
    RETRY_LATER,
    PROGRESS,
    LOG,
    RUN_NOW,
    READ_QUEUES,
    WORKFLOW_ENQUEUE,
    WORKFLOW_RECORD,
    WORKFLOW_RESOLVE,
    WORKFLOW_TAKE,
    WORKFLOW_DONE,
    WORKFLOW_UNFINISHED,
    WORKFLOW_DISCARD,
    WORKFLOW_REARM,
    WORKFLOW_HEAL,
    STEP,
    SUSPEND,
    SIGNAL,
    PERIODIC_PAUSE,
)
