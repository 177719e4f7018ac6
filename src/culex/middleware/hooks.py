"""Middleware: code that runs at every enqueue and around every attempt (docs/middleware.md).

``culex.configure(middleware=[...])`` sets the list for the process: producers apply each
one's ``on_enqueue`` (and ``seal_params``) as they build an enqueue's call, and a runner
runs ``around_perform`` (``aaround_perform`` for an ``async def perform``) around each
attempt, then ``on_failure`` / ``on_dead`` as the attempt ends (culex.runner.wrapping).
The first middleware of the list is the outermost: its ``on_enqueue`` runs first, its
``around_perform`` encloses the others'.

Headers are a task's string map, written at enqueue and stored as the task hash's
``headers`` field (a JSON object, docs/wire-format.md); ``perform`` reads them as
``self.headers``. With no middleware configured nothing here runs: the enqueue and the
runner check an empty tuple and go on.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from ..errors import ConfigurationError, short

# The job object a hook gets is a culex.Job (typed Any here: this module lies below the
# jobs, which import the settings that list the middleware).
Job = Any

MAX_HEADERS = 100  # headers a task may have
MAX_HEADER_NAME = 200  # characters of a header's name
MAX_HEADERS_BYTES = 16 * 1024  # the headers' JSON text, UTF-8


class Middleware:
    """Base class of a middleware: override the hooks you need (each default does
    nothing, or calls ``call_next``). A hook that raises is logged, never kills a runner:
    see each hook for what else it does."""

    def on_enqueue(self, job: Job, headers: dict[str, str]) -> None:
        """Called for each task as it is enqueued, before anything is stored: write into
        ``headers`` (str to str). An exception here is the enqueue's: nothing is stored."""

    def around_perform(self, job: Job, call_next: Callable[[], Any]) -> Any:
        """Runs a sync ``perform`` (with its before/after hooks): return ``call_next()``.
        An exception out of it, before or after ``call_next``, is the attempt's failure.
        With ``isolation = "process"`` it runs in the child process, around perform."""
        return call_next()

    async def aaround_perform(self, job: Job, call_next: Callable[[], Awaitable[Any]]) -> Any:
        """The async twin of :meth:`around_perform`, for an ``async def perform``:
        ``return await call_next()``. (The sync ``around_perform`` is not called for an
        async perform: override both for both kinds of jobs.)"""
        return await call_next()

    def on_failure(self, job: Job, error: BaseException, will_retry: bool) -> None:
        """An attempt failed: ``error`` is what it raised (a :class:`culex.TaskFailed` when
        it raised nothing, e.g. cancelled); ``will_retry``: whether the task runs again.
        Runs on the runner's event loop (or awaited, if ``async def``): keep it quick. An
        exception here is logged; the outcome stays as it was."""

    def on_dead(self, job: Job | None, error: BaseException) -> None:
        """The task ends dead (after ``on_failure`` with ``will_retry`` False, or at once
        for a task the runner cannot build: then ``job`` is None, and ``error`` a
        :class:`culex.TaskFailed` with the reason, e.g. an unknown encryption key). As
        :meth:`on_failure`, quick and never fatal."""

    # -- params as stored (EncryptedParams) -----------------------------------------

    def seal_params(self, task_id: str, params: str) -> str:
        """The params text to store for task ``task_id`` (called after ``on_enqueue``,
        in the list's order). Default: as they are."""
        return params

    def open_params(self, task_id: str, stored: str) -> str:
        """The params text a runner decodes from the stored one (called in the reverse
        order). Raise :class:`ParamsUnreadable` to send the task to dead with the reason."""
        return stored


class ParamsUnreadable(Exception):
    """A task's stored params cannot be opened (a key that is gone, a tampered text): the
    runner sends the task to dead with this message."""


def checked_middleware(value: object, name: str) -> tuple[Middleware, ...]:
    """``configure(middleware=...)``: a list (or tuple) of Middleware objects."""
    if isinstance(value, Middleware):
        value = [value]
    if isinstance(value, str | bytes) or not isinstance(value, Iterable):
        raise ConfigurationError(f"{name} must be a list of culex.Middleware objects")
    listed = tuple(value)
    for item in listed:
        if not isinstance(item, Middleware):
            raise ConfigurationError(
                f"{name} takes culex.Middleware objects (an instance of a subclass), got "
                f"{short(item)}"
            )
    return listed


def enqueue_parts(settings: Any, job: Job, task_id: str, params: str) -> tuple[str, str]:
    """The params and headers (JSON text, "" for none) to store for ``job`` as
    ``task_id``: every middleware's on_enqueue, then its seal_params, in the order of
    ``settings.middleware``; sealed params are held to ``settings.max_payload_bytes``."""
    middleware, enqueuers, sealers = _planned
    if middleware is not settings.middleware:
        middleware, enqueuers, sealers = _plan(settings.middleware)
    headers: dict[str, str] = {}
    for on_enqueue in enqueuers:
        on_enqueue(job, headers)
    sealed = params
    for seal in sealers:
        sealed = seal(task_id, sealed)
    # (a character takes at most 4 bytes: most sealed params are measured without encoding)
    if sealed is not params and len(sealed) * 4 > settings.max_payload_bytes:
        most = settings.max_payload_bytes
        if len(sealed.encode()) > most:
            raise ValueError(
                f"{type(job).__name__}: params take {len(sealed.encode())} bytes as stored "
                f"(sealed by the middleware), more than max_payload_bytes ({most})"
            )
    return sealed, headers_text(headers, job) if headers else ""


def _plan(middleware: tuple[Middleware, ...]) -> _Plan:
    """The on_enqueue and seal_params hooks of ``middleware`` that do something (those
    its classes override), in order: made once per list (the last one asked is kept)."""
    global _planned
    _planned = (
        middleware,
        tuple(m.on_enqueue for m in middleware if type(m).on_enqueue is not Middleware.on_enqueue),
        tuple(
            m.seal_params for m in middleware if type(m).seal_params is not Middleware.seal_params
        ),
    )
    return _planned


_Plan = tuple[tuple[Middleware, ...], tuple[Any, ...], tuple[Any, ...]]
_planned: _Plan = ((), (), ())  # the middleware last asked for, and its hooks


def headers_text(headers: dict[str, str], job: Job) -> str:
    """``headers`` as the JSON object stored, checked: str names (1 to 200 characters) to
    str values, at most 100 of them and 16 KiB in all (TypeError, ValueError).

    A header whose name and value are the very objects (``is``) of one checked before is
    not checked or quoted again: its member text is kept (one per name, ``_members``), so
    the common enqueue, whose middleware writes the same constants and context values
    task after task, pays a dict look-up per header."""
    if len(headers) > MAX_HEADERS:
        raise ValueError(f"{type(job).__name__}: {len(headers)} headers, more than {MAX_HEADERS}")
    members = []
    for key, value in headers.items():
        known = _members.get(key)
        if known is None or known[0] is not key or known[1] is not value:
            known = _member(key, value, job)
        members.append(known)
    global _last
    last = _last  # (read once: another thread may replace it meanwhile)
    if members == last[0]:  # (the members of the last text: checked, and written)
        return last[1]
    text = "{" + ",".join([member[2] for member in members]) + "}"
    if len(text) * 4 > MAX_HEADERS_BYTES and len(text.encode()) > MAX_HEADERS_BYTES:
        raise ValueError(
            f"{type(job).__name__}: the headers take more than {MAX_HEADERS_BYTES} bytes"
        )
    _last = (members, text)
    return text


def _member(key: object, value: object, job: Job) -> tuple[str, str, str]:
    """A header checked (str name of 1 to 200 characters, str value) and its JSON member
    text, kept for the next enqueue (up to MAX_KEPT names)."""
    if type(key) is not str or type(value) is not str:  # (subclasses refused too)
        raise TypeError(
            f"{type(job).__name__}: a header is str to str, got {short(key)}: {short(value)} "
            f"({type(key).__name__} to {type(value).__name__})"
        )
    if not key or len(key) > MAX_HEADER_NAME:
        raise ValueError(
            f"{type(job).__name__}: a header name has 1 to {MAX_HEADER_NAME} characters"
        )
    made = (key, value, f"{quoted(key)}:{quoted(value)}")
    if len(made[2]) <= MAX_KEPT_MEMBER and (len(_members) < MAX_KEPT or key in _members):
        _members[key] = made
    return made


MAX_KEPT = 256  # header names whose last member text is kept
MAX_KEPT_MEMBER = 1024  # characters of a member text kept
# name -> (the name, its value, their JSON member): the last checked header of each name
_members: dict[str, tuple[str, str, str]] = {}
_last: tuple[list[tuple[str, str, str]], str] = ([], "{}")  # the last headers' members and text


# A str as a JSON string, non-ASCII text as it is (json.dumps(text, ensure_ascii=False)).
quoted: Callable[[str], str] = json.encoder.encode_basestring


def read_headers(stored: bytes) -> dict[str, str]:
    """A task's stored headers (ValueError when they are not a JSON object of strings)."""
    try:
        found = json.loads(stored.decode())
    except ValueError as exc:  # (also bytes that are not UTF-8)
        raise ValueError(f"headers are not a JSON object of strings: {exc}") from None
    if not isinstance(found, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in found.items()
    ):
        raise ValueError(f"headers are not a JSON object of strings: {short(found)}")
    return found
