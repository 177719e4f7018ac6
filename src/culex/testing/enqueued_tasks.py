"""enqueued: the tasks of a job that wait or are scheduled, for a test's assertions."""

from __future__ import annotations

import json
from typing import Any

from .. import config
from .._redis import commands
from .._redis.keys import queue_keys
from ..errors import short
from ..jobs.job import Job
from ..jobs.task import Task
from ..server.procedures import Procedure, run_async, run_sync

MAX_TASKS = 10_000  # the most ids enqueued() reads of a queue (waiting and scheduled)


def enqueued(job: type[Job], **params: Any) -> list[Task]:
    """The tasks of ``job`` waiting or scheduled in its queue whose params include
    ``params`` (compared as the job decodes them), soonest first: waiting, then scheduled."""
    return run_sync(_procedure(job, params), config.settings().redis_url)


async def aenqueued(job: type[Job], **params: Any) -> list[Task]:
    """The async twin of :func:`enqueued`."""
    return await run_async(_procedure(job, params), config.settings().redis_url)


def check_job_class(job: object, where: str) -> type[Job]:
    """``job`` if it is a concrete job class, else a clear error."""
    if not isinstance(job, type) or not issubclass(job, Job) or not job.type_:
        raise TypeError(f"{where} takes a job class (a QueuedJob or PeriodicJob), got {short(job)}")
    return job


def _procedure(job: type[Job], params: dict[str, Any]) -> Procedure[list[Task]]:
    job = check_job_class(job, "enqueued()")
    wanted = _wanted(job, params)
    settings = config.settings()
    keys = queue_keys(settings.prefix, job.queue)
    waiting, scheduled = yield [
        commands.first_ids(keys.waiting, MAX_TASKS + 1),
        commands.first_ids(keys.scheduled, MAX_TASKS + 1),
    ]
    ids: list[str] = waiting + scheduled
    if len(ids) > MAX_TASKS:
        raise ValueError(
            f"enqueued(): queue {short(job.queue)} holds more than {MAX_TASKS} waiting and "
            "scheduled tasks; it reads small queues, as tests have"
        )
    if not ids:
        return []
    rows = yield [commands.read_fields(keys, i, ("type", "params")) for i in ids]
    return [
        Task(task_id, job.queue, settings.redis_url, job)
        for task_id, (job_type, raw) in zip(ids, rows, strict=True)
        if job_type == job.type_ and _matches(job, raw, wanted)
    ]


def _wanted(job: type[Job], params: dict[str, Any]) -> dict[str, Any]:
    """The given params, checked by the job's own codecs."""
    unknown = params.keys() - job.params_.keys()
    if unknown:
        raise TypeError(f"enqueued(): {job.__name__} has no params {', '.join(sorted(unknown))}")
    return {
        name: job.params_[name].codec.validate(value, f"{job.__name__}.{name}")
        for name, value in params.items()
    }


def _matches(job: type[Job], raw: str | None, wanted: dict[str, Any]) -> bool:
    if not wanted:
        return True
    try:
        stored = json.loads(raw or "{}")
    except ValueError:
        return False
    if not isinstance(stored, dict):
        return False
    for name, value in wanted.items():
        param = job.params_[name]
        if name not in stored:  # (a producer may leave out a param that has a default)
            if param.required or param.default != value:
                return False
            continue
        try:
            if param.codec.decode(stored[name], name) != value:
                return False
        except (ValueError, TypeError):
            return False
    return True
