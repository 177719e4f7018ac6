"""How values look on the pages: times as dates and as "3 min ago", long text cut; what
no page can show (text that is not UTF-8, a time no date holds) shown as stored."""

from __future__ import annotations

import json
import math
import re
import time
from datetime import datetime

from markupsafe import Markup

from .._redis.calls import shown
from ..jobs import failures
from ..jobs.codecs import moment

# Shown in full up to this many characters; longer text is cut, with a "show all" link
# that loads the whole of it as plain text.
CUT = 2000


def date(ms: object) -> str:
    """A time in ms since the epoch as a UTC date ("" when there is none); as stored when
    no date holds it (the year 33715, inf, a text that is no number)."""
    value = _ms(ms)
    if value is None:
        return ms if isinstance(ms, str) and ms != "0" else ""
    when = moment(value)
    return f"{value:.0f} ms" if when is None else when.strftime("%Y-%m-%d %H:%M:%S UTC")


def ago(ms: object, now: float | None = None) -> str:
    """How long ago (or how far ahead) a time in ms since the epoch is: "3 min ago" (""
    when there is none; inf or nan as stored: "inf ms")."""
    value = _ms(ms)
    if value is None or not math.isfinite(value):
        return date(ms)
    delta = ((time.time() if now is None else now) * 1000 - value) / 1000
    text = span(abs(delta))
    return f"{text} ago" if delta >= 0 else f"in {text}"


def span(seconds: float) -> str:
    """A duration, roughly: "12 s", "3 min", "2 h", "4 d"."""
    if seconds < 60:
        return f"{seconds:.0f} s" if seconds >= 10 else f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{seconds / 60:.0f} min"
    if seconds < 86400:
        return f"{seconds / 3600:.0f} h"
    return f"{seconds / 86400:.0f} d"


def pretty_json(text: object) -> str:
    """Stored JSON indented for reading; as stored when it is not JSON, or is nested more
    than DEEPEST deep (Python's parser fails on 3 KB of brackets, or, where the recursion
    limit is raised, indents them into megabytes)."""
    if not isinstance(text, str):
        return ""
    if text.count("[") + text.count("{") > DEEPEST and _too_deep(text):
        return text
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except (ValueError, RecursionError):
        return text


DEEPEST = 100  # JSON nested deeper is shown as stored
_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')  # a string (skipped) or a bracket


def _too_deep(text: str) -> bool:
    """Whether JSON ``text`` nests more than DEEPEST deep (brackets inside strings aside)."""
    depth = 0
    for token in _TOKEN.finditer(text):
        mark = token.group()
        if mark in ("[", "{"):
            depth += 1
            if depth > DEEPEST:
                return True
        elif mark in ("]", "}"):
            depth -= 1
    return False


def cut(text: object, limit: int = CUT) -> str:
    """``text`` cut to ``limit`` characters, with "…" when it was longer."""
    value = "" if text is None else str(text)
    return value if len(value) <= limit else value[:limit] + "…"


def first_line(text: object, limit: int = 120) -> str:
    """The first line of ``text``, cut: a reason in a table cell."""
    lines = ("" if text is None else str(text)).strip().splitlines() or [""]
    line = lines[0] + (" …" if len(lines) > 1 else "")
    return cut(line, limit)


def folded_traceback(text: str) -> str:
    """A failed attempt's traceback with culex's own frames before the job's folded: the
    task page shows it first, and the whole one in a <details> below it."""
    return failures.folded(text, "the whole traceback below")


def readable(value: object) -> object:
    """What a page writes of ``value``: text as :func:`shown` reads it (a surrogate that
    stands for a byte that is not UTF-8 would make the page fail to encode), the rest as
    is. Applied by the templates to every value they write, and to the URLs they build."""
    if not isinstance(value, str) or value.isascii():
        return value
    return Markup(shown(value)) if isinstance(value, Markup) else shown(value)


def _ms(value: object) -> float | None:
    """A time in ms (None: none, 0, or a text that is no number); inf and nan as stored."""
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isascii():
        try:
            value = float(value)
        except ValueError:
            return None
    if isinstance(value, int | float):
        if value == 0:
            return None
        try:
            return float(value)
        except OverflowError:  # (an int of 400 digits)
            return math.inf if value > 0 else -math.inf
    if isinstance(value, datetime):
        return value.timestamp() * 1000
    return None
