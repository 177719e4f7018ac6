"""celery: a task on the Redis broker, ``celery worker`` in ONE process (the solo pool)."""

from __future__ import annotations

from celery import Celery

from . import SyncProducer
from .record import URL, record

WORKER = ["{bin}/celery", "-A", "adapters.celery", "worker", "--pool", "solo", "-Q", "bench"]
SETTINGS = "celery worker --pool solo (one process), no result backend, other settings default"

app = Celery("bench", broker=URL)
app.conf.task_default_queue = "bench"


@app.task
def noop(stamp: float) -> None:
    record(stamp)


class Producer(SyncProducer):
    """``task.delay`` / ``apply_async(countdown=...)``; no bulk enqueue (a ``group`` sends
    its messages one by one)."""

    def one(self, stamp: float, delay: float) -> None:
        if delay:
            noop.apply_async((stamp,), countdown=delay)
        else:
            noop.delay(stamp)
