"""The reads of the queues' event streams (include/events.lua writes them), each a
:class:`~culex._redis.calls.Call`: the entries after a position, the oldest and newest
entry, a blocking read. No I/O here; culex.operations.events drives
them. Every read is bounded (COUNT), and a blocking read names its wait.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, NamedTuple

from .calls import Call, text


class Entry(NamedTuple):
    """One entry of a queue's event stream: its id ("<ms>-<seq>") and its fields."""

    id: str
    fields: dict[str, str]


def _entries(reply: list[Any] | None) -> list[Entry]:
    out = []
    for entry_id, flat in reply or ():
        fields = {text(flat[i]): text(flat[i + 1]) for i in range(0, len(flat) - 1, 2)}
        out.append(Entry(text(entry_id), fields))
    return out


def after(stream: str, position: str, count: int) -> Call[list[Entry]]:
    """Up to ``count`` entries after ``position`` (exclusive), oldest first."""
    return Call((), ("XRANGE", stream, f"({position}", "+", "COUNT", count), _entries)


class Kept(NamedTuple):
    """What a stream keeps: the id of its oldest entry (None: none), and whether it ever
    lost entries (trimmed by count or age: more were added than it holds)."""

    oldest: str | None
    trimmed: bool


def kept(stream: str) -> Call[Kept]:
    """XINFO STREAM, read as :class:`Kept`. A missing stream makes the server refuse it
    ("no such key"): the caller reads that as a stream that never lost an entry."""

    def parse(reply: list[Any]) -> Kept:
        info = {text(reply[i]): reply[i + 1] for i in range(0, len(reply) - 1, 2)}
        first = info.get("first-entry")
        added = info.get("entries-added", info.get("length", 0))
        return Kept(text(first[0]) if first else None, int(added) > int(info.get("length", 0)))

    return Call((), ("XINFO", "STREAM", stream), parse)


def newest(stream: str) -> Call[str | None]:
    """The id of the newest entry (None: the stream is empty or missing)."""
    return Call((), ("XREVRANGE", stream, "+", "-", "COUNT", 1), _first_id)


def latest(stream: str, count: int) -> Call[list[Entry]]:
    """The newest ``count`` entries, newest first."""
    return Call((), ("XREVRANGE", stream, "+", "-", "COUNT", count), _entries)


def _first_id(reply: list[Any]) -> str | None:
    return text(reply[0][0]) if reply else None


def block(positions: Mapping[str, str], count: int, timeout: float) -> Call[dict[str, list[Entry]]]:
    """Wait up to ``timeout`` s for entries after each stream's position (one XREAD: the
    streams must share a slot on a cluster); the reply is {stream: entries}, {} when the
    wait ended with none."""
    ms = max(1, math.ceil(timeout * 1000))  # (0 would wait for ever)

    def parse(reply: list[Any] | None) -> dict[str, list[Entry]]:
        return {text(name): _entries(entries) for name, entries in reply or ()}

    return Call(
        (),
        ("XREAD", "COUNT", count, "BLOCK", ms, "STREAMS", *positions, *positions.values()),
        parse,
        blocks=ms / 1000,
    )
