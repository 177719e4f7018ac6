"""A producer that is not culex: plain redis-py and the documented script, in its own process."""

from __future__ import annotations

import ast
import asyncio
import re
import shlex
import subprocess
import sys
from pathlib import Path

import redis

import culex

from ._redis.test_protocol import contract, shipped
from .conftest import running

ROOT = Path(__file__).resolve().parent.parent
PRODUCER = ROOT / "docs" / "examples" / "foreign_producer.py"
PAGE = ROOT / "docs" / "wire-format.md"
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


def table() -> dict[str, tuple[list[str], list[str]]]:
    """The page's table of scripts: each script's KEYS names and ARGV numbers, in order."""
    rows = re.findall(r"^\| `(\w+)\.lua` \| (.*?) \| (.*?) \|", PAGE.read_text(), re.MULTILINE)
    listed = {}
    for name, keys, argv in rows:
        numbered = [re.fullmatch(r"(\d+) `(.+)`", item) for item in keys.split("<br>")]
        assert all(numbered), f"{name}: each KEYS item is a number and a `key`"
        assert [m[1] for m in numbered if m] == [str(n + 1) for n in range(len(numbered))], name
        listed[name] = (
            [m[2] for m in numbered if m],
            [a.split()[0] for a in argv.split("<br>") if a != "(none)"],
        )
    return listed


def test_the_page_lists_every_script_with_the_keys_and_argv_of_its_header() -> None:
    sources = shipped()
    listed = table()
    assert sorted(listed) == sorted(sources)
    for name, (keys, argv) in listed.items():
        header = contract(sources[name])
        assert (len(keys), argv) == (header.keys, header.argv), name


def test_the_page_sends_each_script_as_its_header_and_the_table_say() -> None:
    """Every EVAL and EVALSHA line of the page: KEYS named and ordered as in the table (the
    optional last ones may be left out), as many KEYS and ARGV as the header takes."""
    sources, listed = shipped(), table()
    page = re.sub(r"\\\n\s*", "", PAGE.read_text())  # join the lines a backslash continues
    calls = re.findall(r'EVAL(?:SHA <(\w+)>| "\$\(cat (\w+)\.lua\)") (.*)', page)
    assert {a or b for a, b, _ in calls} >= {"enqueue", "claim", "complete", "fail", "reclaim"}
    for by_sha, by_text, rest in calls:
        name = by_sha or by_text
        words = [w for w in shlex.split(rest) if w != "..."]
        count = int(words[0])
        keys = [re.sub(r"^task:.+", "task:<id>", k.split("}:", 1)[1]) for k in words[1 : count + 1]]
        # (a call may leave out the optional last KEYS: the header's contract counts them)
        assert keys == listed[name][0][: len(keys)], name
        assert contract(sources[name]).takes(count, len(words) - 1 - count), (name, words)
