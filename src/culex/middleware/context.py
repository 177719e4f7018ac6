"""ContextMiddleware: context variables carried from the producer to ``perform``, and on to
the tasks enqueued there (docs/middleware.md)."""

from __future__ import annotations

import contextvars
import json
import math
from collections.abc import Awaitable, Callable
from typing import Any

from ..errors import short
from .hooks import Job, Middleware, quoted

CONTEXT_PREFIX = "ctx."  # a context variable's header: ctx.<its name>
_SCALARS = (str, int, float, bool, type(None))


class ContextMiddleware(Middleware):
    """Carries context variables from the producer to ``perform``: each one set at
    enqueue is stored as the header ``ctx.<name>`` (its value as JSON) and set again
    around perform, so that a task enqueued inside perform carries it on. A variable not
    set at enqueue is not stored, and left as it is around perform.

    Values are JSON data that comes back equal: str, int, float (finite), bool, None,
    and lists and str-keyed dicts of them (a tuple would come back a list: refused).
    """

    def __init__(self, *variables: contextvars.ContextVar[Any]) -> None:
        for variable in variables:
            if not isinstance(variable, contextvars.ContextVar):
                raise TypeError(
                    f"ContextMiddleware takes contextvars.ContextVar objects, got {short(variable)}"
                )
        names = [variable.name for variable in variables]
        twice = {name for name in names if names.count(name) > 1}
        if twice:
            raise ValueError(f"ContextMiddleware: two variables named {short(min(twice))}")
        self.variables = variables
        self._headers = tuple((CONTEXT_PREFIX + v.name, v) for v in variables)
        # each header with its variable and [(its last str value, that value's JSON)]: a
        # variable holds one value task after task, quoted once (the pair swapped whole:
        # threads share it)
        self._kept: tuple[tuple[str, contextvars.ContextVar[Any], list[tuple[object, str]]], ...]
        self._kept = tuple((header, v, [(_UNSET, "")]) for header, v in self._headers)

    def __repr__(self) -> str:
        return f"ContextMiddleware({', '.join(v.name for v in self.variables)})"

    def on_enqueue(self, job: Job, headers: dict[str, str]) -> None:
        for header, variable, last in self._kept:
            value = variable.get(_UNSET)
            if value is _UNSET:
                continue
            kept = last[0]
            if value is kept[0]:  # (the str quoted last time: a str never changes)
                headers[header] = kept[1]
            elif type(value) is str:  # (the common case: no walk, no encoder)
                headers[header] = text = quoted(value)
                last[0] = (value, text)
            else:
                _check_value(value, variable.name)
                headers[header] = _dumps(value)

    def _set(self, job: Job) -> list[tuple[contextvars.ContextVar[Any], contextvars.Token[Any]]]:
        headers = job.headers
        return [
            (variable, variable.set(json.loads(headers[header])))
            for header, variable in self._headers
            if header in headers
        ]

    def around_perform(self, job: Job, call_next: Callable[[], Any]) -> Any:
        tokens = self._set(job)
        try:
            return call_next()
        finally:
            for variable, token in reversed(tokens):
                variable.reset(token)

    async def aaround_perform(self, job: Job, call_next: Callable[[], Awaitable[Any]]) -> Any:
        tokens = self._set(job)
        try:
            return await call_next()
        finally:
            for variable, token in reversed(tokens):
                variable.reset(token)


_UNSET = object()
_dumps = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode


def _check_value(value: object, name: str) -> None:
    """Refuse a value that JSON would not give back equal (TypeError, ValueError)."""
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError(f"ContextMiddleware: {name} is {value!r}: JSON has no such number")
    if type(value) in _SCALARS:
        return
    if type(value) is list:
        for item in value:
            _check_value(item, name)
        return
    if type(value) is dict:
        for key, item in value.items():
            if type(key) is not str:
                raise TypeError(f"ContextMiddleware: {name} has a dict key {short(key)}: str only")
            _check_value(item, name)
        return
    raise TypeError(
        f"ContextMiddleware: {name} holds {short(value)} ({type(value).__name__}): a "
        "context value is str, int, float, bool, None, or a list or str-keyed dict of them"
    )
