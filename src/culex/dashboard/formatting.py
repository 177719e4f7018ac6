"""How values look on the pages: times as dates and as "3 min ago", long text cut."""

from __future__ import annotations

import json
import time
from datetime import datetime

from ..codecs import moment

# Shown in full up to this many characters; longer text is cut, with a "show all" link
# that loads the whole of it as plain text.
CUT = 2000


def date(ms: object) -> str:
    """A time in ms since the epoch as a UTC date ("" when there is none)."""
    value = _ms(ms)
    if value is None:
        return ""
    when = moment(value)
    return f"{value:.0f} ms" if when is None else when.strftime("%Y-%m-%d %H:%M:%S UTC")


def ago(ms: object, now: float | None = None) -> str:
    """How long ago (or how far ahead) a time in ms since the epoch is: "3 min ago"."""
    value = _ms(ms)
    if value is None:
        return ""
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
    """Stored JSON indented for reading (as stored when it is not JSON)."""
    if not isinstance(text, str):
        return ""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False)
    except ValueError:
        return text


def cut(text: object, limit: int = CUT) -> str:
    """``text`` cut to ``limit`` characters, with "…" when it was longer."""
    value = "" if text is None else str(text)
    return value if len(value) <= limit else value[:limit] + "…"


def first_line(text: object, limit: int = 120) -> str:
    """The first line of ``text``, cut: a reason in a table cell."""
    lines = ("" if text is None else str(text)).strip().splitlines() or [""]
    line = lines[0] + (" …" if len(lines) > 1 else "")
    return cut(line, limit)


def _ms(value: object) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if value > 0 else None
    if isinstance(value, str) and value.isdigit():
        return float(value) if int(value) > 0 else None
    if isinstance(value, datetime):
        return value.timestamp() * 1000
    return None
