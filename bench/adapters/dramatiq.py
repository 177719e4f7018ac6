"""dramatiq: an actor on the Redis broker, ``dramatiq`` with one process and its threads."""

from __future__ import annotations

import dramatiq
from dramatiq.brokers.redis import RedisBroker

from . import SyncProducer
from .record import URL, record

THREADS = 8
WORKER = ["{bin}/dramatiq", "adapters.dramatiq", "--processes", "1", "--threads", str(THREADS)]
SETTINGS = f"dramatiq --processes 1 --threads {THREADS} (the default threads), Redis broker"

dramatiq.set_broker(RedisBroker(url=URL))


@dramatiq.actor(queue_name="bench")
def noop(stamp: float) -> None:
    record(stamp)


class Producer(SyncProducer):
    """``send`` / ``send_with_options(delay=ms)``; no bulk enqueue (``group`` sends one by
    one)."""

    def __exit__(self, *exc: object) -> None:
        dramatiq.get_broker().close()

    def one(self, stamp: float, delay: float) -> None:
        if delay:
            noop.send_with_options(args=(stamp,), delay=round(delay * 1000))
        else:
            noop.send(stamp)
