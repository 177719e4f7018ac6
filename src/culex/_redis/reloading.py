"""What a driver does when the server lost scripts (a restart, SCRIPT FLUSH, a replica made
master that never loaded them): the calls refused with NOSCRIPT are sent again behind a
SCRIPT LOAD of each lost script, and their new replies take the old ones' places."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .calls import Call
from .connections import ReplyError


def _load(call: Call[Any]) -> Call[Any]:
    assert call.script is not None
    return Call((), ("SCRIPT", "LOAD", call.script.source), lambda reply: reply)


def again(calls: Sequence[Call[Any]], replies: list[Any]) -> list[Call[Any]] | None:
    """What to send next: None when no call was refused with NOSCRIPT (the common case,
    checked without allocating), else a SCRIPT LOAD per lost script, then those calls
    again, with the checks behind them (``Call.confirms``), in one round trip (the server
    runs a pipeline in order)."""
    if len(replies) == 1:  # run()'s path
        if not no_script(replies[0]):
            return None
    elif not any(map(no_script, replies)):
        return None
    resent = [calls[i] for i in _resent(calls, replies)]
    loads = {call.script: _load(call) for call in resent if call.script is not None}
    return [*loads.values(), *resent]


def merge(calls: Sequence[Call[Any]], replies: list[Any], resent: list[Any]) -> list[Any]:
    """``replies`` with those of the calls sent again replaced by their new ones
    (``resent``: the replies to what :func:`again` planned, its SCRIPT LOADs first)."""
    places = _resent(calls, replies)
    for i, reply in zip(places, resent[len(resent) - len(places) :], strict=True):
        replies[i] = reply
    return replies


def _resent(calls: Sequence[Call[Any]], replies: list[Any]) -> list[int]:
    """The places of the calls :func:`again` sends again: those refused with NOSCRIPT, and
    the checks behind the first of them. (The calls between that ran are not sent again:
    they ran, in an order the batch did not mean, which a check would not see.)"""
    first = next(i for i, reply in enumerate(replies) if no_script(reply))
    return [i for i in range(first, len(calls)) if calls[i].confirms or no_script(replies[i])]


def no_script(reply: Any) -> bool:
    """Whether ``reply`` refused its call because the server lacks the script."""
    return isinstance(reply, ReplyError) and reply.code == "NOSCRIPT"
