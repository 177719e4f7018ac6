"""A call to Redis described as data, and the decoding of its reply: no I/O here.

A :class:`Call` names a script (or a plain command), its keys and arguments, and how to
parse the reply. The sync and async drivers in ``drivers.py`` only differ in how they send
it, so no operation is written twice. The operations themselves live by concern:
``enqueuing.py`` (the producer's), ``claims.py`` and ``reports.py`` (the runner's),
``interventions.py`` (what a person does to a queue), ``reads.py`` and ``commands.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Generic, NamedTuple, TypeVar

from .scripts import Script

T = TypeVar("T")
Arg = str | int | float | bytes


class Call(NamedTuple, Generic[T]):
    """One round trip's worth of work: a script (or a command), keys, args, a parser.

    A named tuple, not a frozen dataclass: as immutable, and made faster (a frozen
    dataclass sets each field through ``object.__setattr__``; docs/fast.md); one is made
    for every enqueue.

    ``blocks``: the seconds a blocking command may hold its reply on purpose (BLPOP's
    timeout, say); a driver waits that long plus ``socket_timeout`` before it gives up.
    ``confirms``: a check of the calls before it in its round trip (WAITAOF, WAIT): when
    a driver sends some of them again (scripts the server lost: reloading.again), it sends
    the check again behind them, so that what it says covers them.
    """

    keys: tuple[str, ...]
    args: tuple[Arg, ...]
    parse: Callable[[Any], T]
    script: Script | None = None
    blocks: float = 0.0
    confirms: bool = False


def text(value: bytes | str | None) -> str:
    """Decode a reply value; bytes that are not UTF-8 survive as surrogates."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return value.decode("utf-8", "surrogateescape")


def shown(value: bytes | str | None) -> str:
    """A reply value decoded for reading (a page, a listing, a scrape): bytes that are not
    UTF-8 become U+FFFD, as does a surrogate :func:`text` kept for them, so the text
    encodes anywhere. Not for ids or names sent back to Redis: those keep their bytes."""
    if value is None:
        return ""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    if value.isascii():
        return value
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        try:
            return value.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
        except UnicodeEncodeError:  # (a surrogate that no byte made: made in Python)
            return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in value)
    return value


def number(value: bytes | str | int | None, default: int = 0) -> int:
    """An integer field of a reply, or ``default`` when it is missing or garbage."""
    if isinstance(value, int):
        return value
    if not value:
        return default
    try:
        return int(value)
    except ValueError:
        return default


def texts(reply: list[bytes]) -> list[str]:
    """A flat reply of values (ids, say), each decoded by :func:`text`."""
    return [text(x) for x in reply]


def text_pairs(reply: list[bytes]) -> list[tuple[str, str]]:
    """A flat reply of name, value, name, value... as (name, value) pairs."""
    return [(text(reply[i]), text(reply[i + 1])) for i in range(0, len(reply), 2)]
