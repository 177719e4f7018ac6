"""drain on a Redis Cluster: each queue's scripts on its own shard, no CROSSSLOT."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

import culex
from culex import config
from culex.testing import drain, enqueued

from ..server.test_cluster import master_of_queue
from ..topology import Cluster
from .jobs import HOUR


class MailJob(culex.QueuedJob):
    queue = "emails"
    to: str

    def perform(self) -> str:
        return self.to


class IndexJob(culex.QueuedJob):
    queue = "search"
    page: int

    def perform(self) -> None:
        MailJob(to=f"page {self.page} indexed").enqueue(delay=HOUR)


@pytest.fixture
def on_cluster(cluster: Cluster, monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    monkeypatch.setenv("CULEX_REDIS_URL", cluster.url)
    config.reset()
    try:
        yield cluster
    finally:
        monkeypatch.undo()
        config.reset()


def test_drain_runs_queues_on_two_shards(on_cluster: Cluster) -> None:
    assert master_of_queue(on_cluster, "emails") != master_of_queue(on_cluster, "search")
    IndexJob(page=1).enqueue()
    MailJob(to="ada").enqueue(delay=HOUR)
    assert len(enqueued(MailJob)) == 1
    ran = drain(["emails", "search"])
    assert sorted((r.job, r.outcome) for r in ran) == [
        ("IndexJob", "succeeded"), ("MailJob", "succeeded"), ("MailJob", "succeeded"),
    ]  # fmt: skip
    assert {r.result for r in ran if r.job == "MailJob"} == {"ada", "page 1 indexed"}
    assert enqueued(MailJob) == []
