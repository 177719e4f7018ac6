"""Workflow nodes: the middleware's on_enqueue runs for each node (workflow_enqueue.lua,
"with headers", stores them), their params are sealed by EncryptedParams, and a downstream
node reads its own headers once its upstream has ended."""

from __future__ import annotations

import contextvars
import json
import os

import redis

import culex
from culex.testing import drain

from .jobs import Recording, seen, tenant


class MwNodeJob(culex.QueuedJob):
    queue = "mw_nodes"
    secret: str

    def perform(self) -> list[str]:
        return [self.secret, self.headers.get("by", ""), tenant.get("none")]


def test_each_node_gets_headers_and_sealed_params(r: redis.Redis) -> None:
    culex.configure(
        middleware=[
            Recording("audit", header="by"),
            culex.ContextMiddleware(tenant),
            culex.EncryptedParams(keys={"k1": os.urandom(32)}, current="k1"),
        ],
        successful_job_ttl=60,
    )
    wf = culex.Workflow(name="mw-nodes")
    first = wf.add(MwNodeJob(secret="one"))
    wf.add(MwNodeJob(secret="two"), after=[first])
    context = contextvars.copy_context()
    context.run(tenant.set, "acme")
    run = context.run(wf.enqueue)
    for node in run.nodes():
        key = f"culex:{{mw_nodes}}:task:{node.task.id}"
        params, headers = r.hmget(key, ["params", "headers"])
        assert isinstance(params, bytes) and params.startswith(b'{"$encrypted":"k1:')
        assert isinstance(headers, bytes)
        assert json.loads(headers) == {"by": "audit", "ctx.tenant": '"acme"'}
    assert seen.count(("audit", "on_enqueue", "MwNodeJob")) == 2
    results = [attempt.result for attempt in drain("mw_nodes")]
    assert results == [["one", "audit", "acme"], ["two", "audit", "acme"]]
    assert run.wait(timeout=20) == "succeeded"


def test_nodes_without_headers_are_sent_as_before(r: redis.Redis) -> None:
    wf = culex.Workflow(name="mw-plain")
    wf.add(MwNodeJob(secret="plain"))
    run = wf.enqueue()
    (node,) = run.nodes()
    assert "headers" not in node.fields and node.fields["params"] == '{"secret":"plain"}'
    assert [a.result for a in drain("mw_nodes")] == [["plain", "", "none"]]
