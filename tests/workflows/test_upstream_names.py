"""A node that reads an upstream it does not have: one line that says which it has."""

from __future__ import annotations

import pytest
import redis

import culex

from ..conftest import running
from .jobs import QUEUES, Journal, WfPriceJob


class WfReadsValidateJob(culex.QueuedJob):
    """Reads the upstream named "validate", whatever its after= says."""

    queue = "wf-b"
    max_retries = 0

    def perform(self) -> int:
        return int(self.upstream()["validate"].result)


@pytest.fixture
def fresh(r: redis.Redis) -> None:
    Journal.clear()


@pytest.mark.usefixtures("fresh")
async def test_reading_an_upstream_not_in_after_says_which_upstreams_the_node_has() -> None:
    wf = culex.Workflow()
    fetch = wf.add(WfPriceJob(cents=1), name="fetch")
    check = wf.add(WfPriceJob(cents=2), name="check")
    reads = wf.add(WfReadsValidateJob(), after=[fetch, check], name="report")
    alone = wf.add(WfReadsValidateJob(), name="alone")
    async with running(culex.Runner(run_from=list(QUEUES))):
        run = wf.enqueue()
        assert await run.await_(timeout=30) == "failed"
    assert reads.info()["last_error"] == (
        "NoSuchUpstream: this node has no upstream named 'validate': its upstreams are "
        "'check', 'fetch'; a node's upstreams are the nodes its after= names"
    )
    assert alone.info()["last_error"] == (
        "NoSuchUpstream: this node has no upstream named 'validate': it has none (or it is "
        "no workflow node); a node's upstreams are the nodes its after= names"
    )
    with pytest.raises(KeyError):  # (still a KeyError, for code that catches one)
        culex.Job.upstream(WfReadsValidateJob())["validate"]
