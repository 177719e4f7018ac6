"""The registry of job classes (``culex.registry``): job classes by their task type."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from .limits import QueueLimits

if TYPE_CHECKING:
    from .job import Job


class JobRegistry:
    """Job classes by type name: how a runner finds the code for a task's ``type``.

    Every concrete job class adds itself to ``culex.registry`` when it is defined. Two
    classes may not share a type name; defining the same class again (same module and
    qualified name: a reload, a class made in a function called twice) replaces it.
    """

    def __init__(self) -> None:
        self._jobs: dict[str, type[Job]] = {}

    def add(self, job: type[Job]) -> None:
        known = self._jobs.get(job.type_)
        if known is not None and _origin(known) != _origin(job):
            raise TypeError(
                f"two job classes have the task type {job.type_!r}: {_origin(known)} and "
                f"{_origin(job)}. A runner finds a task's code by its type, so give this one "
                f'a type of its own with a class attribute, e.g. name = "{_origin(job)}" '
                "(the type stored with its tasks: producers in other languages use it too)"
            )
        self._check_limits(job)
        self._jobs[job.type_] = job

    def _check_limits(self, job: type[Job]) -> None:
        """Limits belong to a queue (the claim is per queue): two job classes on one queue
        may not declare different ones."""
        mine = job.limits_
        for other in self._jobs.values():
            if other.queue != job.queue or _origin(other) == _origin(job):
                continue
            theirs = other.limits_
            for what, a, b in (
                ("rate_limit", mine.rate, theirs.rate),
                ("concurrency_limit", mine.concurrency, theirs.concurrency),
                ("group_rate_limit", mine.group_rate, theirs.group_rate),
                ("group_concurrency", mine.group_concurrency, theirs.group_concurrency),
            ):
                if a is not None and b is not None and a != b:
                    raise TypeError(
                        f"{_origin(job)} declares {what} = {a} for the queue {job.queue!r}, "
                        f"where {_origin(other)} declares {b}: limits belong to the queue, so "
                        "declare the same on both, on one of them only, or give one "
                        "another queue"
                    )

    def queue_limits(self, queue: str) -> QueueLimits:
        """The limits the job classes of ``queue`` declare (each class declares the same or
        none): what a runner's claim uses unless culex.limit set others."""
        found = [job.limits_ for job in self._jobs.values() if job.queue == queue]
        return QueueLimits(
            next((f.rate for f in found if f.rate), None),
            next((f.concurrency for f in found if f.concurrency), None),
            next((f.group_rate for f in found if f.group_rate), None),
            next((f.group_concurrency for f in found if f.group_concurrency), None),
        )

    def declared_limits(self, queue: str) -> dict[str, list[str]]:
        """What :meth:`queue_limits` holds, each limit as text with the job class that
        declares it: ``{"concurrency": ["3", "SendEmailJob"]}`` (the runner registry's
        ``limits``, read by ``culex limit``, ``culex queues`` and the dashboard)."""
        found: dict[str, list[str]] = {}
        for job in self._jobs.values():
            if job.queue != queue:
                continue
            for field in ("rate", "concurrency", "group_rate", "group_concurrency"):
                value = getattr(job.limits_, field)
                if value is not None and field not in found:
                    found[field] = [str(value), job.type_]
        return found

    def own_stalls(self, queue: str) -> dict[str, int]:
        """The job types of ``queue`` whose classes set their own max_stalls, with it."""
        return {
            job.type_: job.max_stalls
            for job in self._jobs.values()
            if job.queue == queue and job.max_stalls is not None
        }

    def get(self, name: str) -> type[Job] | None:
        return self._jobs.get(name)

    def remove(self, job: type[Job]) -> None:
        if self._jobs.get(job.type_) is job:
            del self._jobs[job.type_]

    def queues(self) -> list[str]:
        """Every registered job's queue, in order of first definition."""
        return list(dict.fromkeys(job.queue for job in self._jobs.values()))

    def __iter__(self) -> Iterator[type[Job]]:
        return iter(list(self._jobs.values()))

    def __contains__(self, job: object) -> bool:
        return isinstance(job, type) and self._jobs.get(getattr(job, "type_", "")) is job


def _origin(job: type) -> str:
    return f"{job.__module__}.{job.__qualname__}"


registry = JobRegistry()
