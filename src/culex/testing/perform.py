"""perform_now: run one job object's perform here, as a runner would, without a queue."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from ..errors import short
from ..jobs.job import Job
from ..jobs.serialization import decode_result
from ..jobs.task import new_id
from ..runner.attempt import _run_async, _run_sync


def perform_now(job: Job) -> Any:
    """Run ``job``'s before_perform, perform and after_perform in this process, and return
    perform's result as a producer would read it back.

    The params go through the job's codecs both ways first, and the result through its
    result codec, as on a real run: a param that would not survive the trip through Redis
    fails here too, and a result that does not fit its annotation comes back as the plain
    JSON stored, with a warning in the log. Nothing is stored. Exceptions are the job's
    own. An ``async def perform`` runs on a loop of its own (inside a running loop:
    ``await aperform_now``).
    """
    prepared = _prepared(job, "perform_now()")
    if prepared.async_perform_:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return _result(prepared, asyncio.run(_run_async(prepared, None)))
        raise RuntimeError("perform_now() cannot run inside an event loop: use aperform_now()")
    return _result(prepared, _run_sync(prepared))


async def aperform_now(job: Job) -> Any:
    """The async twin of :func:`perform_now`; a sync perform runs in a thread."""
    prepared = _prepared(job, "aperform_now()")
    if prepared.async_perform_:
        return _result(prepared, await _run_async(prepared, None))
    return _result(prepared, await asyncio.to_thread(_run_sync, prepared))


def _prepared(job: object, where: str) -> Job:
    """A copy of ``job`` made from its params as stored: encoded, then decoded."""
    if not isinstance(job, Job) or not type(job).type_:
        raise TypeError(f"{where} takes a job object, e.g. SendEmailJob(to=...), got {short(job)}")
    cls = type(job)
    try:
        stored = json.loads(job.params_json())
        prepared = cls.from_params(stored)
    except (TypeError, ValueError) as exc:
        raise ValueError(
            f"{where}: the params of {short(job)} do not survive the trip through Redis: {exc}"
        ) from exc
    prepared.task_id = f"perform-now-{new_id()}"
    prepared.attempt = 1
    prepared.retry_count = 0
    return prepared


def _result(job: Job, value: Any) -> Any:
    """The result as stored and read back."""
    where = f"the result of {type(job).__name__}.perform()"
    return decode_result(job.result_text(value), job.result_codec_, where)
