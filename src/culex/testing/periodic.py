"""run_periodic: run one slot of a periodic job now, in a test."""

from __future__ import annotations

from datetime import timedelta

from ..jobs import periodic
from ..jobs.periodic import PeriodicJob
from .attempts import Attempt
from .draining import adrain, drain
from .enqueued_tasks import check_job_class


def run_periodic(job: type[PeriodicJob], *, timeout: float | timedelta = 10) -> Attempt:
    """Enqueue one run of ``job`` now, as ``culex periodic trigger`` does, and drain its
    queue (other tasks waiting there run too); return the attempt of that run. A failure
    is re-raised, as :func:`drain` does with ``fail_fast``."""
    task = periodic.trigger(_checked(job))
    return _attempt_of(task.id, drain([job.queue], timeout=timeout))


async def arun_periodic(job: type[PeriodicJob], *, timeout: float | timedelta = 10) -> Attempt:
    """The async twin of :func:`run_periodic`."""
    task = await periodic.atrigger(_checked(job))
    return _attempt_of(task.id, await adrain([job.queue], timeout=timeout))


def _checked(job: object) -> type[PeriodicJob]:
    checked = check_job_class(job, "run_periodic()")
    if not issubclass(checked, PeriodicJob):
        raise TypeError(f"run_periodic() takes a PeriodicJob class, got {checked.__name__}")
    return checked


def _attempt_of(task_id: str, ran: list[Attempt]) -> Attempt:
    return [record for record in ran if record.task_id == task_id][-1]
