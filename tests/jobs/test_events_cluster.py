"""Task events on a Redis Cluster: each queue's stream in its own slot, on its shard,
written by the scripts there; culex.events over queues on two shards, followed too."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest

import culex
from culex import config
from culex.testing import drain

from ..server.test_cluster import master_of_queue
from ..topology import Cluster


class EventsClusterMailJob(culex.QueuedJob):
    queue = "emails"

    def perform(self) -> None: ...


class EventsClusterIndexJob(culex.QueuedJob):
    queue = "search"

    def perform(self) -> None: ...


@pytest.fixture
def on_cluster(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    monkeypatch.setenv("CULEX_REDIS_URL", cluster.url)
    monkeypatch.setenv("CULEX_EVENTS", "1")
    config.reset()
    try:
        yield cluster
    finally:
        monkeypatch.undo()
        config.reset()


def test_events_of_queues_on_two_shards(on_cluster: Cluster) -> None:
    assert master_of_queue(on_cluster, "emails") != master_of_queue(on_cluster, "search")
    mail = EventsClusterMailJob().enqueue()
    index = EventsClusterIndexJob().enqueue()
    drain(["emails", "search"])
    found = list(culex.events(["emails", "search"], since="0", follow=False))
    for task in (mail, index):
        kinds = [e.kind for e in found if e.task_id == task.id]
        assert kinds == ["enqueued", "started", "succeeded"]
    assert {e.queue for e in found} == {"emails", "search"}
    assert [e.kind for e in mail.watch(timeout=5)] == ["enqueued", "started", "succeeded"]
    # followed: a new event on either shard comes; and no event ends the iteration
    last = found[-1].id
    followed = culex.events(["emails", "search"], since=last, timeout=30)
    with ThreadPoolExecutor(1) as pool:
        first = pool.submit(next, followed)
        later = EventsClusterIndexJob().enqueue()
        event = first.result(timeout=30)
    assert (event.queue, event.task_id, event.kind) == ("search", later.id, "enqueued")
    assert list(culex.events(["emails", "search"], timeout=0.3)) == []
