"""The Lua scripts, one file per state change under ``lua/``, loaded once per process.

``lua/dead.lua`` is not a script: it holds what moving a task to dead writes, and goes
in front of the scripts that do (fail, reclaim, cancel), so that it is written once.

Each script is sent by its SHA-1 (EVALSHA); a server that lost its script cache
(restart, ``SCRIPT FLUSH``) answers NOSCRIPT and the driver loads it again.
"""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

try:  # CPython's own SHA-1: hashlib would load OpenSSL, 0.7 MB of every runner's memory
    from _sha1 import sha1  # type: ignore[import-not-found]  # (no stub: a private module)
except ImportError:  # another Python
    from hashlib import sha1


@dataclass(frozen=True, slots=True)
class Script:
    """A Lua script and its SHA-1."""

    name: str
    source: str
    sha: str

    @classmethod
    def load(cls, name: str, *shared: str) -> Script:
        """``lua/<name>.lua``, after the ``shared`` Lua files it calls (``dead``: moving a
        task to dead, written once for fail, reclaim and cancel)."""
        source = "".join(_read(part) for part in (*shared, name))
        return cls(name, source, sha1(source.encode()).hexdigest())


def _read(name: str) -> str:
    return resources.files(__package__).joinpath("lua", f"{name}.lua").read_text("utf-8")


ENQUEUE = Script.load("enqueue")
CLAIM = Script.load("claim")
COMPLETE = Script.load("complete")
FAIL = Script.load("fail", "dead")
HEARTBEAT = Script.load("heartbeat")
RELEASE = Script.load("release")
RECLAIM = Script.load("reclaim", "dead")
SCHEDULE = Script.load("schedule")
RETRY_DEAD = Script.load("retry_dead")
CANCEL = Script.load("cancel", "dead")

ALL = (ENQUEUE, CLAIM, COMPLETE, FAIL, HEARTBEAT, RELEASE, RECLAIM, SCHEDULE, RETRY_DEAD, CANCEL)
