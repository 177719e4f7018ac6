"""What a workflow node's upstreams ended with, as its job reads it in ``perform``:
``self.upstream()`` (``await self.aupstream()`` in an ``async def perform``).

The node's queue keeps a copy of each upstream's end beside the node (workflow_resolve.lua
writes it as the upstream's end is applied), so a result outlives the upstream's own hash
and its ``result_ttl``.
"""

from __future__ import annotations

import json
from typing import Any, NamedTuple

from .._redis import workflows
from .._redis.keys import QueueKeys
from ..server.procedures import Outage, Procedure, run_async, run_sync
from .progress import Reporting
from .registry import registry
from .serialization import decode_result


class Upstream(NamedTuple):
    """How one upstream ended: ``state`` "succeeded" or "dead"; ``result`` its return value
    (typed by its job's ``perform`` annotation when its class is registered here; None when
    it died); ``error`` why it died (None when it succeeded)."""

    state: str
    result: Any
    error: str | None


class NoSuchUpstream(KeyError):
    """``self.upstream()["validate"]`` in a node with no upstream of that name: says which
    it has, where a bare ``KeyError: 'validate'`` would leave the reader guessing."""

    def __str__(self) -> str:  # (KeyError's own would show the message in quotes)
        return str(self.args[0])


class Upstreams(dict[str, Upstream]):
    """A node's upstreams by name, as :meth:`culex.Job.upstream` returns them: a dict
    whose missing name is a :class:`NoSuchUpstream` that lists the names there are."""

    def __missing__(self, name: str) -> Upstream:
        has = (
            f"its upstreams are {', '.join(map(repr, sorted(self)))}"
            if self
            else "it has none (or it is no workflow node)"
        )
        raise NoSuchUpstream(
            f"this node has no upstream named {name!r}: {has}; a node's upstreams are the "
            "nodes its after= names"
        )


def upstream_procedure(keys: QueueKeys, task_id: str) -> Procedure[dict[str, Upstream]]:
    """The ends of a node's upstreams, by node name ({} for a task that is no node)."""
    copies = yield workflows.read_upstream(keys, task_id)
    return Upstreams(map(_upstream, copies.values()))


def upstreams(
    reporting: Reporting | None, task_id: str, outage: Outage | None
) -> dict[str, Upstream]:
    """:meth:`culex.Job.upstream`: read where ``reporting`` says ({} outside a runner),
    held through a server outage by ``outage`` (culex.runner.lease)."""
    if reporting is None:
        return Upstreams()
    return run_sync(upstream_procedure(reporting.keys, task_id), reporting.url, outage)


async def aupstreams(
    reporting: Reporting | None, task_id: str, outage: Outage | None
) -> dict[str, Upstream]:
    """The async twin of :func:`upstreams`."""
    if reporting is None:
        return Upstreams()
    return await run_async(upstream_procedure(reporting.keys, task_id), reporting.url, outage)


def _upstream(text: str) -> tuple[str, Upstream]:
    copy = json.loads(text)
    name = str(copy.get("name", ""))
    if copy.get("state") != "succeeded":
        return name, Upstream("dead", None, str(copy.get("error", "")))
    job = registry.get(str(copy.get("type", "")))
    codec = getattr(job, "result_codec_", None)
    where = f"the result of upstream {name}"
    return name, Upstream("succeeded", decode_result(copy.get("result"), codec, where), None)
