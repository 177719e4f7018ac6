"""How the culex commands print: tables, times, one-line reasons."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from .._redis.calls import shown


def print_table(columns: Sequence[str], rows: list[dict[str, str]]) -> None:
    """Columns padded to their widest cell, a header line first; each cell as :func:`shown`
    reads it (a name or an id that is not UTF-8 cannot stop the command). The last column
    is not padded: a long last cell widens no other line (the work is linear in the
    cells' lengths)."""
    rows = [{c: shown(row[c]) for c in columns} for row in rows]
    widths = [max([len(c), *(len(row[c]) for row in rows)]) for c in columns[:-1]]
    for line in [dict(zip(columns, columns, strict=True)), *rows]:
        cells = [line[c].ljust(w) for c, w in zip(columns, widths, strict=False)]
        print("  ".join([*cells, line[columns[-1]]]).rstrip())


def local_time(moment: datetime) -> str:
    """A time in this machine's zone; a UTC time past 9999 there is shown in UTC."""
    try:
        return moment.astimezone().strftime("%Y-%m-%d %H:%M:%S")
    except OverflowError:
        return moment.strftime("%Y-%m-%d %H:%M:%S %Z")


def one_line(reason: str, width: int = 80) -> str:
    """A reason shortened to one line."""
    lines = reason.strip().splitlines() or [""]
    line = lines[0] + (" ..." if len(lines) > 1 else "")
    return line if len(line) <= width else line[: width - 3] + "..."
