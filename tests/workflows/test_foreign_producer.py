"""docs/wire-format.md's "Enqueueing a workflow from another language", sent as the page
writes it, by a producer that is not culex: culex's runners run the run to its end."""

from __future__ import annotations

import json
import re
import shlex
from decimal import Decimal
from pathlib import Path

import redis

import culex

from .._redis.test_protocol import shipped
from ..conftest import running

PAGE = Path(__file__).resolve().parent.parent.parent / "docs" / "wire-format.md"
SECTION = "## Enqueueing a workflow from another language"
SALES = {"eu": Decimal("120.50"), "us": Decimal("99.00")}


class RegionSalesJob(culex.QueuedJob):
    queue = "reports"
    region: str

    def perform(self) -> Decimal:
        return SALES[self.region]


class SumSalesJob(culex.QueuedJob):
    queue = "reports"

    def perform(self) -> Decimal:
        return sum((end.result for end in self.upstream().values()), Decimal(0))


def producer_steps() -> list[tuple[list[str], str]]:
    """The section's first block: each command (its words) with the reply the page gives
    it ("" for none)."""
    block = PAGE.read_text().split(SECTION, 1)[1].split("```text\n", 1)[1].split("```", 1)[0]
    block = re.sub(r"\\\n\s*", "", block)
    steps: list[tuple[list[str], str]] = []
    for line in block.splitlines():
        line = line.strip()
        if line.startswith("->"):
            steps[-1] = (steps[-1][0], line.removeprefix("->").strip())
        elif re.match(r"(TIME|ZADD|SADD|ZREM|EVALSHA)\b", line):
            command, _, reply = line.partition("->")
            steps.append((shlex.split(command.replace("<now_ms + 60000>", "NOW")), reply.strip()))
    return steps


async def test_the_pages_producer_steps_enqueue_a_run_that_culex_runs(
    r: redis.Redis, url: str
) -> None:
    sources = shipped()
    raw = redis.Redis.from_url(url)
    steps = producer_steps()
    assert [words[0] for words, _ in steps][:3] == ["TIME", "ZADD", "SADD"]
    now_ms = 0
    for words, reply in steps:
        if words[0] == "EVALSHA":
            words = ["EVAL", sources[words[1].strip("<>")], *words[2:]]
        words = [str(now_ms + 60_000) if w == "NOW" else w for w in words]
        got = raw.execute_command(*words)
        if words[0] == "TIME":
            now_ms = int(got[0]) * 1000 + int(got[1]) // 1000
        elif reply:
            want = json.loads(reply)
            assert got == (want.encode() if isinstance(want, str) else want), (words[:3], got)
    assert r.zrange("culex:{workflows}:unfinished", 0, -1) == [b"r1"]  # (until it ends)
    assert r.hget("culex:{run:r1}:record", "state") == b"running"
    async with running(culex.Runner(run_from=["reports"])):
        assert await culex.WorkflowRun("r1").await_(timeout=30) == "succeeded"
    total = culex.Task("n3", "reports")
    assert total.result(timeout=1) == Decimal("219.50")
    assert r.zcard("culex:{reports}:outbox") == 0
    assert r.zcard("culex:{workflows}:unfinished") == 0  # (struck off as it ended)
