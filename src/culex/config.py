"""Settings: Mosquito's names plus ours, from code, the environment and CLI flags.

Precedence (docs/design.md#settings): CLI flag > environment (``CULEX_<NAME>``) > ``configure()`` in
code > default. ``culex run`` sets its flags for the whole process (:func:`set_flags`), so an
enqueue inside a perform sees them too; every setting in ``_CHECKS`` gets a flag and an
environment variable, read as its field's type says (:func:`kinds`).
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, cast

from ._redis.address import masked
from ._redis.connections import SOCKET_TIMEOUT
from ._redis.keys import check_queue_name
from ._redis.scripts import MOST
from .errors import ConfigurationError, short

if TYPE_CHECKING:
    from .middleware.hooks import Middleware


@dataclass(frozen=True, slots=True)
class Settings:
    """Resolved settings. Durations are seconds (floats)."""

    redis_url: str | None = None  # None: the embedded server (docs/design.md#the-server)
    idle_wait: float = 0.1  # longest an idle runner waits before it looks again
    successful_job_ttl: float = 1.0  # how long a succeeded task's hash is kept
    failed_job_ttl: float = 86400.0  # how long a dead task is kept
    # how long a task that returned a value (not None) keeps it; 0: successful_job_ttl
    result_ttl: float = 3600.0
    run_cron_scheduler: bool = True
    # queues a runner takes tasks from, each "name" or "name:weight"; () = every job's queue
    run_from: tuple[str, ...] = ()
    strict_queues: bool = False  # ask the queues in run_from's order, not in turns
    lease: float = 30.0  # how long a runner may hold a task without a heartbeat
    # how many times a task's lease may run out (a stall: its runner lost, or the claim's
    # reply) before it goes to dead; counted apart from max_retries
    max_stalls: int = 3
    concurrency: int = 10
    prefix: str = "culex"
    grace_period: float = 25.0  # how long a stopping runner waits for running tasks
    dead_max: int = 10_000  # dead keeps at most this many tasks per queue
    max_payload_bytes: int = 512 * 1024
    durable_enqueue: bool = False  # enqueue returns once the server has fsynced the task
    allow_eviction: bool = False  # run even if maxmemory-policy may evict queue keys
    # each task's state changes go to its queue's event stream (docs/events.md)
    events: bool = False
    busy_poll: float = 0.0002  # the longest a wait for a reply polls before it sleeps
    socket_timeout: float = SOCKET_TIMEOUT  # the longest a connection or a reply may take
    # which client speaks to a single server: culex's own ("culex") or redis-py's
    # ("redis-py", e.g. for its credential providers); Sentinel and Cluster use redis-py
    driver: str = "culex"
    # more keyword arguments for redis-py's client, e.g. {"credential_provider": ...}
    # (code only: not from the environment or a flag)
    redis_options: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    # culex.Middleware objects, in order (code only: docs/middleware.md); () costs nothing
    middleware: tuple[Middleware, ...] = ()

    # (each duration in ms at most scripts.MOST, 139 years: the longest a script takes)
    @property
    def successful_job_ttl_ms(self) -> int:
        return min(MOST, max(1, round(self.successful_job_ttl * 1000)))

    @property
    def failed_job_ttl_ms(self) -> int:
        return min(MOST, max(1, round(self.failed_job_ttl * 1000)))

    @property
    def lease_ms(self) -> int:
        return min(MOST, round(self.lease * 1000))


def seconds(value: object, name: str, *, minimum: float = 0.0) -> float:
    """A duration given as a timedelta or a number of seconds, checked."""
    if isinstance(value, timedelta):
        result = value.total_seconds()
    elif isinstance(value, int | float) and not isinstance(value, bool):
        result = float(value)
    else:
        raise ConfigurationError(
            f"{name} must be a timedelta or a number of seconds, got {short(value)}"
        )
    if not result >= minimum or result == float("inf"):
        raise ConfigurationError(
            f"{name} must be a finite duration >= {minimum} s, got {short(value)}"
        )
    return result


def _positive_int(value: object, name: str) -> int:
    return _whole(value, name, 1)


def _whole(value: object, name: str, least: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise ConfigurationError(f"{name} must be a whole number >= {least}, got {short(value)}")
    return value


def _at_most_count(value: int, name: str) -> int:
    """``value`` when the scripts take it: at most scripts.MOST."""
    if value > MOST:
        raise ConfigurationError(f"{name} must be a whole number from 0 to {MOST}, got {value}")
    return value


def _count(value: object, name: str) -> int:
    """A whole number >= 1 that the scripts take: at most scripts.MOST."""
    if _positive_int(value, name) > MOST:
        raise ConfigurationError(f"{name} must be a whole number from 1 to {MOST}, got {value}")
    return cast(int, value)


def _at_most(value: float, most: float, name: str) -> float:
    if value > most:
        raise ConfigurationError(f"{name} must be at most {most} s, got {value}")
    return value


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise ConfigurationError(f"{name} must be True or False, got {short(value)}")
    return value


def _url(value: object, name: str) -> str | None:
    if value is None:
        return None
    schemes = ("redis", "rediss", "valkey", "valkeys")
    if not isinstance(value, str) or not value.startswith(
        (
            "unix://",
            *(f"{s}://" for s in schemes),
            *(f"{s}+{kind}://" for s in schemes for kind in ("sentinel", "cluster")),
        )
    ):
        raise ConfigurationError(
            f"{name} must be a URL like redis://host:6379/0, rediss://..., unix:///path, "
            f"redis+sentinel://host:26379/SERVICE or redis+cluster://host:7000, got "
            + short(masked(value) if isinstance(value, str) else value, 200)
        )
    return value


DRIVERS = ("culex", "redis-py")
CODE_ONLY = frozenset({"redis_options", "middleware"})  # objects, not text: configure() only


def _options(value: object, name: str) -> Mapping[str, Any]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigurationError(
            f"{name} must be a dict of redis-py client keyword arguments, got {short(value)}"
        )
    return dict(value)


def _middleware(value: object, name: str) -> tuple[Middleware, ...]:
    from .middleware.hooks import checked_middleware  # (jobs import this module)

    return checked_middleware(value, name)


def _driver(value: object, name: str) -> str:
    if value not in DRIVERS:
        raise ConfigurationError(f"{name} must be one of {', '.join(DRIVERS)}, got {short(value)}")
    assert isinstance(value, str)
    return value


MAX_WEIGHT = 1000


def _queues(value: object, name: str) -> tuple[str, ...]:
    """run_from: a list of "name" or "name:weight" (or that list as comma-separated text),
    or a dict of names to weights; kept as text, "name:weight" where a weight is not 1."""
    if isinstance(value, str):
        value = [part for part in value.split(",") if part.strip()]
    if isinstance(value, Mapping):
        pairs = [(_queue_name(q, name), _weight(w, q, name)) for q, w in value.items()]
    elif isinstance(value, list | tuple | set | frozenset):
        pairs = [_queue_spec(spec, name) for spec in value]
    else:
        raise ConfigurationError(
            f"{name} must be a list of queue names (each may end in :WEIGHT) or a dict of "
            f"names to weights, got {short(value)}"
        )
    seen: set[str] = set()
    for queue, _ in pairs:
        if queue in seen:
            raise ConfigurationError(f"{name}: the queue {short(queue)} is named twice")
        seen.add(queue)
    return tuple(f"{q}:{w}" if w != 1 or _weight_part(q) is not None else q for q, w in pairs)


def queue_weights(run_from: tuple[str, ...]) -> dict[str, int]:
    """The queues of a checked ``run_from``, in its order, with their weights (1 where
    none is given)."""
    return dict(_queue_spec(spec, "run_from") for spec in run_from)


def _weight_part(spec: str) -> str | None:
    """The text after the last colon when it reads as a weight (empty, or starting with a
    digit or a sign). Other text after a colon is part of the name: "a:b" names a queue, as
    it always has."""
    _, colon, tail = spec.rpartition(":")
    tail = tail.strip()
    return tail if colon and (not tail or tail[0] in "+-.0123456789") else None


def _queue_spec(spec: object, name: str) -> tuple[str, int]:
    if not isinstance(spec, str):
        return _queue_name(spec, name), 1
    spec = spec.strip()
    weight = _weight_part(spec)
    if weight is None:
        return _queue_name(spec, name), 1
    queue = spec.rpartition(":")[0].strip()
    if not weight:
        raise ConfigurationError(f"{name}: {short(spec)} has a colon but no weight after it")
    number = int(weight) if weight.isascii() and weight.isdigit() else weight
    return _queue_name(queue, name), _weight(number, queue, name)


def _queue_name(queue: object, name: str) -> str:
    try:
        return check_queue_name(queue)
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{name}: {exc}") from None


def _weight(weight: object, queue: object, name: str) -> int:
    if isinstance(weight, bool) or not isinstance(weight, int) or not 1 <= weight <= MAX_WEIGHT:
        raise ConfigurationError(
            f"{name}: the weight of queue {short(queue)} must be a whole number from 1 to "
            f"{MAX_WEIGHT}, got {short(weight)}"
        )
    return weight


def _prefix(value: object, name: str) -> str:
    if not isinstance(value, str) or not value or "{" in value or "}" in value:
        raise ConfigurationError(
            f"{name} must be a non-empty string without braces: {short(value)}"
        )
    return value


_CHECKS: dict[str, Callable[[object, str], Any]] = {
    "redis_url": _url,
    "idle_wait": lambda v, n: seconds(v, n, minimum=0.001),
    "successful_job_ttl": lambda v, n: seconds(v, n, minimum=0.001),
    "failed_job_ttl": lambda v, n: seconds(v, n, minimum=0.001),
    "result_ttl": seconds,
    "run_cron_scheduler": _flag,
    "run_from": _queues,
    "strict_queues": _flag,
    "lease": lambda v, n: seconds(v, n, minimum=0.1),
    "max_stalls": lambda v, n: _at_most_count(_whole(v, n, 0), n),
    "concurrency": _positive_int,
    "prefix": _prefix,
    "grace_period": seconds,
    "dead_max": _count,
    "max_payload_bytes": _positive_int,
    "durable_enqueue": _flag,
    "allow_eviction": _flag,
    "events": _flag,
    "busy_poll": lambda v, n: _at_most(seconds(v, n), 0.01, n),
    "socket_timeout": lambda v, n: seconds(v, n, minimum=0.001),
    "driver": _driver,
    "redis_options": _options,
    "middleware": _middleware,
}


_KINDS = {"bool": "flag", "float": "seconds", "int": "count"}


def kinds() -> dict[str, str]:
    """Every setting, in table order, with what its text (environment, flag) is read as:
    "flag" (true/false), "seconds", "count" (a whole number) or "text"."""
    types = {field.name: str(field.type).removesuffix(" | None") for field in _FIELDS}
    return {
        name: _KINDS.get(types.get(name, ""), "text") for name in _CHECKS if name not in CODE_ONLY
    }


def _from_text(name: str, raw: str) -> object:
    """Turn a setting's text (an environment variable, a flag) into the type its check
    expects; text that does not fit is passed on for the check to refuse."""
    kind = kinds()[name]
    if kind == "flag":
        lowered = raw.strip().lower()
        if lowered in ("1", "true", "yes", "on"):
            return True
        if lowered in ("0", "false", "no", "off"):
            return False
        return raw
    if kind == "text":
        return raw
    try:
        number = float(raw)
    except ValueError:
        return raw
    return int(number) if number.is_integer() and kind == "count" else number


_FIELDS = dataclasses.fields(Settings)
_code: dict[str, Any] = {}
_flags: dict[str, Any] = {}  # culex run's flags
_listeners: list[Callable[[], None]] = []
_current: list[Settings] = []  # the cached result of settings() without flags


def check(values: Mapping[str, object], source: str) -> dict[str, Any]:
    """Validate setting values (by name) and return them normalized."""
    checked: dict[str, Any] = {}
    for name, value in values.items():
        if name not in _CHECKS:
            known = ", ".join(sorted(_CHECKS))
            raise ConfigurationError(f"{source}: unknown setting {short(name)} (known: {known})")
        checked[name] = _CHECKS[name](value, f"{source} {name}")
    return checked


def configure(**values: object) -> None:
    """Set culex's settings in code (every argument optional; see :class:`Settings`)."""
    _code.update(check(values, "configure():"))
    _changed()


def reset() -> None:
    """Forget everything set with :func:`configure` and re-read the environment."""
    _code.clear()
    _changed()


def _changed() -> None:
    _current.clear()
    for listener in _listeners:
        listener()


def on_change(listener: Callable[[], None]) -> None:
    """Call ``listener`` whenever the code settings change (drops cached connections)."""
    _listeners.append(listener)


def environment() -> dict[str, Any]:
    """Settings found in ``CULEX_*`` environment variables, checked."""
    found = {
        name: _from_text(name, os.environ[f"CULEX_{name.upper()}"])
        for name in _CHECKS
        if f"CULEX_{name.upper()}" in os.environ and name not in CODE_ONLY
    }
    return check(found, "environment:")


def set_flags(values: Mapping[str, object]) -> None:
    """Set the command line's settings for the whole process (replacing any set before);
    text is read as the environment's is. They win over everything else."""
    read = {
        name: _from_text(name, value) if isinstance(value, str) and name in _CHECKS else value
        for name, value in values.items()
    }
    checked = check(read, "command line:")
    _flags.clear()
    _flags.update(checked)
    _changed()


def settings(**flags: object) -> Settings:
    """The settings in force: defaults < code < environment < command line < ``flags``."""
    if not flags and _current:
        return _current[0]
    merged = {**_code, **environment(), **_flags, **check(flags, "the argument")}
    resolved = dataclasses.replace(Settings(), **merged)
    if not flags:
        _current.append(resolved)
    return resolved


def settings_for(redis_url: str | None) -> Settings:
    """The settings in force, on the server ``redis_url`` names when one is given (a
    command's ``--redis-url``)."""
    return settings(redis_url=redis_url) if redis_url else settings()
