"""huey: a task on ``RedisHuey``, ``huey_consumer`` with thread workers."""

from __future__ import annotations

from huey import RedisHuey

from . import SyncProducer
from .record import URL, record

WORKERS = 1
WORKER = ["{bin}/huey_consumer", "adapters.huey.huey", "--workers", str(WORKERS), "-k", "thread"]
SETTINGS = f"huey_consumer -k thread --workers {WORKERS}, other settings default"

huey = RedisHuey("bench", url=URL)


@huey.task()
def noop(stamp: float) -> None:
    record(stamp)


class Producer(SyncProducer):
    """Calling the task / ``task.schedule(delay=...)``; huey has no bulk enqueue."""

    def one(self, stamp: float, delay: float) -> None:
        if delay:
            noop.schedule(args=(stamp,), delay=delay)
        else:
            noop(stamp)
