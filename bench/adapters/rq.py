"""rq: a plain function, ``rq worker`` with ``SimpleWorker`` (the default ``Worker`` forks a
process per job, which rq documents as the price of isolation, not a throughput setting)."""

from __future__ import annotations

from datetime import timedelta

from redis import Redis
from rq import Queue

from .record import URL, record

WORKER = [
    "{bin}/rq",
    "worker",
    "--url",
    "{url}",
    "--worker-class",
    "rq.worker.SimpleWorker",
    "--with-scheduler",
    "bench",
]
SETTINGS = "rq worker --worker-class SimpleWorker --with-scheduler (one job at a time)"


def noop(stamp: float) -> None:
    record(stamp)


class Producer:
    """``Queue.enqueue`` / ``enqueue_in``, and ``Queue.enqueue_many`` (one pipeline)."""

    def __enter__(self) -> Producer:
        self.queue = Queue("bench", connection=Redis.from_url(URL))
        return self

    def __exit__(self, *exc: object) -> None:
        self.queue.connection.close()

    def one(self, stamp: float, delay: float) -> None:
        if delay:
            self.queue.enqueue_in(timedelta(seconds=delay), noop, stamp)
        else:
            self.queue.enqueue(noop, stamp)

    def many(self, stamps: list[float]) -> None:
        self.queue.enqueue_many([Queue.prepare_data(noop, (s,)) for s in stamps])
