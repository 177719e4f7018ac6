"""A producer that is not culex: plain redis-py and the documented script, in its own process."""

from __future__ import annotations

import ast
import asyncio
import subprocess
import sys
from pathlib import Path

import redis

import culex

from .conftest import running

ROOT = Path(__file__).resolve().parent.parent
PRODUCER = ROOT / "docs" / "examples" / "foreign_producer.py"
ENQUEUE_LUA = ROOT / "src" / "culex" / "_redis" / "lua" / "enqueue.lua"


class AddJob(culex.QueuedJob):
    queue = "foreign"
    a: int
    b: int

    def perform(self) -> int:
        return self.a + self.b


async def test_a_foreign_producer_enqueues_and_reads_the_result(r: redis.Redis, url: str) -> None:
    # -I: isolated mode, so the producer process cannot import culex from this checkout
    command = [sys.executable, "-I", str(PRODUCER), url, str(ENQUEUE_LUA), "foreign", "AddJob"]
    async with running(culex.Runner(run_from=["foreign"])):
        proc = await asyncio.create_subprocess_exec(
            *command, '{"a": 2, "b": 3}', stdout=subprocess.PIPE
        )
        out, _ = await proc.communicate()
    lines = out.decode().split("\n")
    task_id, state = lines[0].split()
    assert state == "waiting"
    assert lines[1] == "succeeded 5"
    assert culex.Task(task_id, "foreign").result(timeout=1) == 5


def test_the_producer_imports_nothing_of_culex() -> None:
    tree = ast.parse(PRODUCER.read_text())
    imported = {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }
    assert imported == {"sys", "uuid", "redis"}
