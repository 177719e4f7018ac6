"""The errors of a task's failed attempts, kept whole: each with its traceback.

The report of a failed attempt (fail.lua) adds ``{attempt, at, error, traceback}`` to the
task hash's ``errors`` field, a JSON list of its newest :data:`KEPT` failed attempts, oldest
first (docs/wire-format.md); ``last_error`` still holds the last reason alone. The runner
logs the same traceback; ``culex task`` and the dashboard's task page show the list.
"""

from __future__ import annotations

import json
import re
import traceback
from dataclasses import dataclass

KEPT = 5  # failed attempts whose errors a task keeps: the newest
TRACEBACK_BYTES = 8192  # of each traceback, in UTF-8: its end, where the error was raised


@dataclass(frozen=True, slots=True)
class AttemptError:
    """One failed attempt as its task keeps it: ``at`` in ms since the epoch (server time),
    ``traceback`` "" when none was reported (a broken task, a cancel). ``attempt`` and
    ``at`` are None when the entry, written by something else, has no such number."""

    attempt: int | None
    at: int | None
    error: str
    traceback: str


def traceback_of(exc: BaseException) -> str:
    """``exc`` with its traceback, as Python prints it, cut to its end (:func:`capped`)."""
    try:
        return capped("".join(traceback.format_exception(exc)))
    except Exception as failed:  # (a traceback is a help: an attempt never fails for it)
        return f"(the traceback could not be formatted: {type(failed).__name__})"


def capped(text: str, limit: int = TRACEBACK_BYTES) -> str:
    """``text`` whole when its UTF-8 takes at most ``limit`` bytes, else its last ``limit``
    bytes (whole characters) after a line that says how much was cut."""
    data = text.encode("utf-8", "replace")  # (a lone surrogate: "?")
    if len(data) <= limit:
        return data.decode()
    kept = data[-limit:].decode("utf-8", "ignore")  # (a character cut at the start goes)
    return f"[... {len(data) - limit:,} bytes cut ...]\n{kept}"


def attempt_errors(stored: str | None) -> list[AttemptError]:
    """The entries of a task's ``errors`` field, oldest first; none for a task without the
    field (e.g. one that failed under an older culex) or with one that is no such list."""
    if not stored:
        return []
    try:
        entries = json.loads(stored)
    except (ValueError, RecursionError):
        return []
    if not isinstance(entries, list):
        return []
    return [
        AttemptError(
            _whole(entry.get("attempt")),
            _whole(entry.get("at")),
            _text(entry.get("error")),
            _text(entry.get("traceback")),
        )
        for entry in entries
        if isinstance(entry, dict)
    ]


def _whole(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return int(value) if value == value and abs(value) < 2**63 else None


def _text(value: object) -> str:
    return value if isinstance(value, str) else ""


# A frame's first line, as Python prints it; a file inside the culex package (a checkout's
# src/culex/, an installed site-packages/culex/, dist-packages on Debian); and one of the
# standard library's (lib/python3.N/ outside site-packages), through which culex calls the
# job: a thread pool, asyncio.
_FRAME = re.compile(r'  File "(?P<file>[^"]*)", line \d+')
_CULEX_FILE = re.compile(r"[/\\](?:src|site-packages|dist-packages)[/\\]culex[/\\]")
_STDLIB_FILE = re.compile(
    r"[/\\]lib[/\\]python3(?:\.\d+)?[/\\](?!site-packages|dist-packages)|^<frozen ", re.I
)
_HEADER = "Traceback (most recent call last):"


def folded(text: str, hint: str = "--full") -> str:
    """A stored traceback as a person reads it first: culex's own frames at the top of each
    traceback (the runner's and the middleware chain's, which come before the job's, and
    the standard library's among them: a thread pool's, asyncio's) left out, with a line
    in their place that says how many: ``(N culex frames folded: hint)``.
    The job's frames and the exception are kept as they were; a traceback without such
    frames, or with no frame but culex's (an error of culex's own), comes back unchanged.
    The stored text is never changed: this is for display."""
    lines = text.split("\n")
    out: list[str] = []
    i = 0
    while i < len(lines):
        out.append(lines[i])
        starts = lines[i] == _HEADER or (i == 0 and lines[i].startswith("[... "))
        i += 1
        if not starts:
            continue
        count, ours, j = 0, False, i
        while j < len(lines) and (frame := _FRAME.match(lines[j])):
            if _CULEX_FILE.search(frame["file"]):
                ours = True
            elif not _STDLIB_FILE.search(frame["file"]):
                break
            j += 1
            while j < len(lines) and lines[j].startswith("    "):  # (its source, its ^^^)
                j += 1
            count += 1
        else:  # (no frame of the job's follows: culex's own error, shown whole)
            continue
        if ours:
            i = j
            out.append(f"  ({count} culex frame{'s' if count > 1 else ''} folded: {hint})")
    return "\n".join(out)
