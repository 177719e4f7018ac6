"""An ``enqueue_many`` batch: its ids and dedupe keys, which of its tasks are stored so far,
and the error that says which were not when a round trip failed (enqueue.py sends it)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..errors import ServerError, short
from .enqueue_options import FlowControl, checked_keys
from .task import Task, check_id, new_id

if TYPE_CHECKING:
    from .enqueue import Enqueueable


class EnqueueManyError(ServerError):
    """``enqueue_many`` stored part of a batch (the server refused a write, or could not be
    reached). ``stored``: the tasks stored (or already there under their id), in order;
    ``failed``: ``(id, job)`` of each task not known to be stored, in order: it may or may
    not be there. Enqueue them again with ``ids=`` (or the whole batch with the same ids):
    a stored id is never stored twice."""

    def __init__(
        self, cause: ServerError, stored: list[Task], failed: list[tuple[str, Enqueueable]]
    ) -> None:
        ids = ", ".join(task_id for task_id, _ in failed[:3])
        more = f" and {len(failed) - 3} more" if len(failed) > 3 else ""
        super().__init__(
            f"enqueue_many stored {len(stored)} of {len(stored) + len(failed)} tasks; not "
            f"stored: {ids[:300]}{more} (send them again with the same ids): {cause}"
        )
        self.stored = stored
        self.failed = failed

    @property
    def stored_ids(self) -> list[str]:
        return [task.id for task in self.stored]

    @property
    def failed_ids(self) -> list[str]:
        return [task_id for task_id, _ in self.failed]


@dataclass
class Batch:
    """The ids of an ``enqueue_many`` batch, drawn or given, its dedupe keys (one per job,
    "" for none; empty: none at all), and which of them are stored so far (filled as the
    replies come in; read when a round trip fails)."""

    ids: list[str]
    given: bool
    stored: dict[int, Task] = field(default_factory=dict)  # by the job's place
    dedupe_keys: list[str] = field(default_factory=list)

    @classmethod
    def of(
        cls,
        jobs: Sequence[Enqueueable],
        ids: Sequence[str] | None,
        dedupe_keys: Sequence[str | None] | None = None,
    ) -> Batch:
        keyed = [] if dedupe_keys is None else checked_keys(dedupe_keys, len(jobs))
        if ids is None:
            return cls([new_id() for _ in jobs], False, dedupe_keys=keyed)
        if isinstance(ids, str) or not isinstance(ids, Sequence):
            raise TypeError(f"ids= must be a list of str, one per job, got {short(ids)}")
        if len(ids) != len(jobs):
            raise ValueError(f"ids= has {len(ids)} ids for {len(jobs)} jobs: one per job")
        checked = [check_id(task_id) for task_id in ids]
        if len(set(checked)) != len(checked):
            twice = next(i for i in checked if checked.count(i) > 1)
            raise ValueError(f"ids= names {short(twice)} twice: one task per id")
        return cls(checked, True, dedupe_keys=keyed)

    def controls(self, control: FlowControl) -> list[FlowControl]:
        """What the enqueue of each job asks: ``control``, with the job's own dedupe key."""
        if not self.dedupe_keys:
            return [control] * len(self.ids)
        return [control._replace(dedupe_key=key) if key else control for key in self.dedupe_keys]

    def error(self, jobs: Sequence[Enqueueable], cause: ServerError) -> EnqueueManyError:
        """What was stored and what was not, when ``cause`` ended the batch."""
        stored = [self.stored[i] for i in sorted(self.stored)]
        failed = [(self.ids[i], job) for i, job in enumerate(jobs) if i not in self.stored]
        return EnqueueManyError(cause, stored, failed)
