"""How ``culex task`` prints a task's hash: its fields in a fixed order a person reads (what
the task is, where it stands, its times, then its params, result and errors), each as a
person reads it (times as dates, JSON indented, a workflow node's links as task names,
tracebacks with culex's own frames folded), and the fields that are only culex's
bookkeeping left out. A field culex does not know comes last, as stored."""

from __future__ import annotations

import contextlib
import json

from ..jobs.codecs import moment
from ..jobs.failures import AttemptError, attempt_errors, folded
from ..jobs.task import task_name
from ..middleware.encryption import is_encrypted, shown_params
from ..operations.runs import after_shown

# The order fields are printed in; a field of none of these comes after them, by name.
ORDER = (
    "id", "queue", "type", "state", "cancel_requested", "priority", "group", "dedupe_key",
    "dedupe_for", "periodic", "slot", "trigger", "run", "node", "policy", "up", "down",
    "attempt", "retry_count", "max_retries", "stalls", "retry_later_count", "progress",
    "enqueue_time", "due_at", "started_at", "progress_at", "retry_later_at", "stalled_at",
    "suspended_at", "failed_at", "finished_at", "retried_at", "expires_at", "headers",
    "trace", "params", "result", "last_error", "errors",
)  # fmt: skip

# Culex's bookkeeping, which tells a reader nothing the fields shown do not: left out.
# (on_end: the task has something to clear as it ends; waited: a producer waits for it;
# group_held: it runs as one of its group's; progress_message: said on the progress line.)
HIDDEN = ("on_end", "waited", "group_held", "progress_message")

# The fields that hold a time (ms since the epoch), and those that hold JSON.
TIMES = ("enqueue_time", "due_at", "started_at", "failed_at", "finished_at", "retried_at",
         "slot", "retry_later_at", "progress_at", "stalled_at", "suspended_at",
         "expires_at")  # fmt: skip
JSON = ("params", "result", "headers", "trace")
LINKS_SHOWN = 10  # a node's upstreams or downstreams named, then how many more


def ordered(fields: dict[str, str]) -> list[tuple[str, str]]:
    """The fields to print, in :data:`ORDER`, then those culex does not know by name."""
    known = [(name, fields[name]) for name in ORDER if name in fields]
    others = sorted(n for n in fields if n not in ORDER and n not in HIDDEN)
    return known + [(name, fields[name]) for name in others]


def field_text(name: str, value: str, record: dict[str, str], full: bool) -> str:
    """One field's value as ``culex task`` prints it (lines after the first not indented);
    ``full``: tracebacks whole, else with culex's frames before the job's folded."""
    if name in TIMES and value.isdigit() and (when := moment(int(value))) is not None:
        return f"{when.isoformat(timespec='milliseconds')} ({value})"
    if name == "progress":
        return progress(value, record.get("progress_message", ""))
    if name == "errors" and (entries := attempt_errors(value)):
        return errors_text(entries, full)
    if name == "params" and is_encrypted(value):  # (EncryptedParams': never shown)
        return shown_params(value)
    if name in ("up", "down"):
        return _links(value)
    if name in JSON:
        # (else shown as stored: not JSON, or nested too deep for Python's parser)
        with contextlib.suppress(ValueError, RecursionError):
            return json.dumps(json.loads(value), indent=2, ensure_ascii=False)
    return value


def _links(value: str) -> str:
    """A workflow node's ``up`` (``[[queue, id, name], ...]``) or ``down`` (``[[queue,
    id], ...]``) as names: ``name (queue<id>)`` or ``queue<id>``, the first few and how many
    more ("none" for an empty list); as stored when it is no such list."""
    try:
        links = json.loads(value)
    except (ValueError, RecursionError):
        return value
    if not isinstance(links, list) or not all(
        isinstance(link, list) and len(link) >= 2 and all(isinstance(p, str) for p in link)
        for link in links
    ):
        return value
    names = [
        task_name(link[0], link[1]) if len(link) < 3 or not link[2]
        else f"{link[2]} ({task_name(link[0], link[1])})"
        for link in links
    ]  # fmt: skip
    return after_shown(names, LINKS_SHOWN) if names else "none"


def progress(value: str, message: str) -> str:
    """``11%: rendered 4 of 10 pages``; the stored fraction too only where the percent
    hides it (0% that is not 0, 100% that is not 1), or as stored when it is no number."""
    try:
        fraction = float(value)
    except ValueError:
        return value
    said = f"{fraction:.0%}"
    if said in ("0%", "100%") and fraction not in (0.0, 1.0):
        said += f" ({value})"
    return f"{said}: {message}" if message else said


def errors_text(entries: list[AttemptError], full: bool) -> str:
    """A task's kept errors, oldest first: each attempt's number, time (UTC) and error, and
    below it, indented, its traceback (culex's frames before the job's folded unless
    ``full``)."""
    lines = []
    for entry in entries:
        head = f"attempt {'?' if entry.attempt is None else entry.attempt}"
        when = None if entry.at is None else moment(entry.at)
        if when is not None:
            head += f" at {when.isoformat(timespec='milliseconds')}"
        lines.append(f"{head}: {entry.error}")
        stack = entry.traceback if full else folded(entry.traceback)
        lines += ["  " + line for line in stack.rstrip("\n").splitlines()]
    return "\n".join(lines)
