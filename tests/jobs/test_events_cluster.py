"""Task events on a Redis Cluster: each queue's stream in its own slot, on its shard,
written by the scripts there; culex.events over queues on two shards, followed too."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

import culex
from culex.testing import drain

from ..server.test_cluster import master_of_queue
from ..testing.test_drain_cluster import on_cluster  # noqa: F401 (a fixture)
from ..topology import Cluster


class EventsClusterMailJob(culex.QueuedJob):
    queue = "emails"

    def perform(self) -> None: ...


class EventsClusterIndexJob(culex.QueuedJob):
    queue = "search"

    def perform(self) -> None: ...


@pytest.mark.usefixtures("on_cluster")
def test_events_of_queues_on_two_shards(cluster: Cluster) -> None:
    assert master_of_queue(cluster, "emails") != master_of_queue(cluster, "search")
    culex.configure(events=True)  # (on_cluster resets the settings after the test)
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
