"""How the culex commands print: tables, times, one-line reasons."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    pass


def print_table(columns: Sequence[str], rows: list[dict[str, str]]) -> None:
    """Columns padded to their widest cell, a header line first."""
    widths = [max([len(c), *(len(row[c]) for row in rows)]) for c in columns]
    for line in [dict(zip(columns, columns, strict=True)), *rows]:
        print("  ".join(line[c].ljust(w) for c, w in zip(columns, widths, strict=True)).rstrip())


def local_time(moment: datetime) -> str:
    return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")


def one_line(reason: str, width: int = 80) -> str:
    """A reason shortened to one line."""
    lines = reason.strip().splitlines() or [""]
    line = lines[0] + (" ..." if len(lines) > 1 else "")
    return line if len(line) <= width else line[: width - 3] + "..."
