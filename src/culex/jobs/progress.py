"""A running task's progress: its job reports how far the attempt has got
(``self.progress(0.4, "rendered 4 of 10 pages")``), anyone reads it (``task.progress()``).

progress.lua stores it on the task's hash (``progress``, ``progress_message``,
``progress_at`` by the server's clock), only while the reporting attempt holds the task:
a runner that lost its lease cannot overwrite a newer attempt's progress. The last
progress stays on the hash after the task ends, and while a retry waits.
"""

from __future__ import annotations

import asyncio
import math
from typing import NamedTuple

from .._redis import commands, reports
from .._redis.keys import QueueKeys
from ..errors import short
from ..server.procedures import Procedure, one_call, run_async, run_sync

MAX_MESSAGE = 1000  # characters (the script takes up to 4 bytes each)
FIELDS = ("progress", "progress_message")


class Progress(NamedTuple):
    """How far a task's attempt has got: ``fraction`` from 0 to 1, and the job's message
    (None when it gave none)."""

    fraction: float
    message: str | None


class Reporting(NamedTuple):
    """Where the running attempts of a queue report their progress: the runner sets its
    queue's on each job it runs (one per queue, not per task: the job knows its task id
    and attempt)."""

    url: str | None  # the runner's server (None: the configured one)
    keys: QueueKeys


def checked(fraction: object, message: object) -> tuple[float, str]:
    """The fraction and message as progress.lua takes them, else a clear error."""
    if isinstance(fraction, bool) or not isinstance(fraction, int | float):
        raise TypeError(f"progress: the fraction must be a number, got {short(fraction)}")
    if math.isnan(fraction) or not 0 <= fraction <= 1:
        raise ValueError(f"progress: the fraction must be from 0 to 1, got {short(fraction)}")
    if message is None:
        return float(fraction), ""
    if not isinstance(message, str):
        raise TypeError(f"progress: the message must be a str or None, got {message!r:.80}")
    if len(message) > MAX_MESSAGE:
        raise ValueError(
            f"progress: the message must have at most {MAX_MESSAGE} characters, got {len(message)}"
        )
    return float(fraction), message


def report(
    reporting: Reporting | None, task_id: str, attempt: int, fraction: object, message: object
) -> bool:
    """Store the progress of attempt ``attempt`` of ``task_id`` (blocking); see
    :meth:`culex.Job.progress`."""
    procedure = _report_procedure(reporting, task_id, attempt, fraction, message)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False if procedure is None else run_sync(procedure, _url(reporting))
    # A blocking call here would stall every task on the loop for a round trip.
    raise RuntimeError(
        "progress() blocks, and an event loop runs in this thread: in an async def "
        "perform, use `await self.aprogress(...)`"
    )


async def areport(
    reporting: Reporting | None, task_id: str, attempt: int, fraction: object, message: object
) -> bool:
    """The async twin of :func:`report`."""
    procedure = _report_procedure(reporting, task_id, attempt, fraction, message)
    return False if procedure is None else await run_async(procedure, _url(reporting))


def _report_procedure(
    reporting: Reporting | None, task_id: str, attempt: int, fraction: object, message: object
) -> Procedure[bool] | None:
    """The arguments checked (outside a runner too), and the procedure that stores them; None
    outside a runner (perform_now): there is no task to store them on."""
    number, text = checked(fraction, message)
    if reporting is None:
        return None
    call = reports.progress(reporting.keys, task_id, attempt, number, text)
    return one_call(call)


def _url(reporting: Reporting | None) -> str | None:
    return None if reporting is None else reporting.url


def read_procedure(keys: QueueKeys, task_id: str) -> Procedure[Progress | None]:
    """A task's last progress, or None when none was reported (or it has no record)."""
    return one_call(commands.read_fields(keys, task_id, FIELDS), _parsed)


def _parsed(values: list[str | None]) -> Progress | None:
    fraction, message = values
    try:
        number = float(fraction) if fraction is not None else math.nan
    except ValueError:  # (not culex's: progress.lua stores a number)
        number = math.nan
    if math.isnan(number):
        return None
    return Progress(number, message or None)
