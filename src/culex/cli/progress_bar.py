"""A plain-text progress bar for long commands (``culex dead retry --all``, ``culex dead
purge``): redrawn in place on a terminal, one line at the end when the output is a file or a
pipe, so logs do not fill with bars."""

from __future__ import annotations

import sys
from typing import TextIO


class ProgressBar:
    """Called as ``bar(done, total)`` after each step (the shape of bulk.apply's progress)."""

    def __init__(self, label: str, stream: TextIO | None = None, width: int = 30) -> None:
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.live = self.stream.isatty()

    def line(self, done: int, total: int) -> str:
        share = min(1.0, done / total) if total else 1.0
        filled = round(share * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        return f"{self.label} [{bar}] {done:,}/{total:,} ({share:.0%})"

    def __call__(self, done: int, total: int) -> None:
        finished = done >= total
        if self.live:
            self.stream.write("\r" + self.line(done, total) + ("\n" if finished else ""))
        elif finished:
            self.stream.write(self.line(done, total) + "\n")
        self.stream.flush()
