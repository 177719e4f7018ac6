"""docs/wire-format.md against what it describes: the scripts' headers, a real server, the
codecs, and producers and runners that are not culex (docs/examples/), each in its own
process."""

from __future__ import annotations

import argparse
import ast
import asyncio
import enum
import json
import re
import shlex
import subprocess
import sys
from datetime import UTC, date, datetime, time, timedelta, timezone
from decimal import Decimal
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
import redis

import culex
from culex import config
from culex.cli.looking import runners_command
from culex.jobs.serialization import codec_for
from culex.operations import inspection

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


def imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text())
    return {
        alias.name.split(".")[0]
        for node in ast.walk(tree)
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in (
            node.names if isinstance(node, ast.Import) else [ast.alias(node.module or "")]
        )
    }


def test_the_producer_imports_nothing_of_culex() -> None:
    assert imports(PRODUCER) == {"sys", "uuid", "redis"}


RUNNER = ROOT / "docs" / "examples" / "foreign_runner.py"
LUA = ENQUEUE_LUA.parent


class FirstTryFailsJob(culex.QueuedJob):  # the foreign runner fails its first attempt
    queue = "foreign"
    max_retries = 1

    def perform(self) -> str:
        return "ok"


class NeverWorksJob(culex.QueuedJob):  # ... and always fails this one
    queue = "foreign"
    max_retries = 0

    def perform(self) -> None:
        pass


def test_a_foreign_runner_runs_culex_tasks(r: redis.Redis, url: str) -> None:
    """culex enqueues; the example runner, in its own process, runs them: a delayed task
    and a retry (nothing signals either: its wait ends at the claim's next_ms, as its
    idle_wait of 60 s is never reached), the hash's max_retries, a job that raises, and a
    job type it does not know."""
    added = AddJob(a=2, b=3).enqueue()
    later = AddJob(a=5, b=5).enqueue(delay=0.2)
    flaky = FirstTryFailsJob().enqueue()
    broken = NeverWorksJob().enqueue()
    r.eval(
        ENQUEUE_LUA.read_text(), 4, "culex:{foreign}:task:x1", "culex:{foreign}:waiting",
        "culex:{foreign}:scheduled", "culex:{foreign}:signal", "x1", "NopeJob", "foreign", "{}",
        "", 0, 4,
    )  # fmt: skip
    command = [sys.executable, "-I", str(RUNNER), url, str(LUA), "foreign", "5", "60"]
    out = subprocess.run(command, capture_output=True, timeout=50, check=True).stdout.decode()
    lines = out.splitlines()
    assert sorted(lines) == sorted(
        [f"{added.id} succeeded", f"{later.id} succeeded", f"{flaky.id} scheduled",
         f"{flaky.id} succeeded", f"{broken.id} dead", "x1 dead"]
    )  # fmt: skip
    assert (added.result(timeout=1), later.result(timeout=1)) == (5, 10)
    assert flaky.result(timeout=1) == "ok"
    assert r.hmget(f"culex:{{foreign}}:task:{flaky.id}", "attempt", "retry_count") == [b"2", b"1"]
    assert r.hmget(f"culex:{{foreign}}:task:{broken.id}", "state", "last_error") == [
        b"dead",
        b"ValueError: always fails",
    ]
    assert (
        r.hget("culex:{foreign}:task:x1", "last_error") == b"broken task: unknown job type NopeJob"
    )
    assert r.sismember("culex:queues", "foreign")
    assert r.zcard("culex:{runners}") == 0  # it left the registry


def test_the_runner_imports_nothing_of_culex() -> None:
    assert imports(RUNNER) == {"json", "os", "socket", "sys", "time", "uuid", "redis"}


# -- the scripts' headers and the page's table --------------------------------------------

# How the page names a key that a header describes without its <prefix>:{<queue>}: form.
NAMED = {
    "task hash": "task:<id>",
    "signal list": "signal",
    "the state's zset": "<state>",
    "from: the set": "<state>",
    "runners zset": "<prefix>:{runners}",
    "runner hash": "<prefix>:{runners}:runner:<id>",
    "queue keys start": "<prefix>:{<queue>}:",
}


def header(source: str) -> str:
    """A script's opening comment: the lines before its first blank line (after a first
    line of script flags, ``#!lua ...``, if it has one)."""
    lines = source.split("\n")
    if lines[0].startswith("#!"):
        lines = lines[1:]
    return "\n".join(lines).lstrip("\n").split("\n\n", 1)[0]


def header_keys(source: str) -> list[str]:
    """Each KEYS[n] of a script's header, named as the page's table names it: the part
    after <prefix>:{<queue>}: where the header writes the key out (``task:``, ``done:<id>``),
    else by what it is (``waiting zset``: ``waiting``)."""
    names = []
    for what in re.findall(r"^-- KEYS\[\d+\]\s+(.*)$", header(source), re.MULTILINE):
        named = [name for lead, name in NAMED.items() if what.startswith(lead)]
        written = re.search(r"<prefix>:\{<queue>\}:(\S+)", what)
        elsewhere = re.search(r"<prefix>:\{(?!<queue>\})[^}]+\}:\S+", what)  # a run's slot
        zset = re.match(r"(\w+) zset\b", what)
        if named:
            names.append(named[0])
        elif written:
            names.append(written[1])
        elif elsewhere:
            names.append(elsewhere[0])
        elif zset:
            names.append(zset[1])
        else:
            raise AssertionError(f"a key the page has no name for: {what!r} (add it to NAMED)")
    return names


def header_argv(source: str) -> list[tuple[str, str]]:
    """Each ARGV[n] of a script's header: its number (``2..`` for a repeated tail) and the
    first word of what it is (``lease_ms``, ``pairs``, ``quadruples``)."""
    found = re.findall(r"^-- ARGV\[(\d+(?:\.\.)?)\]\s+(\w+)", header(source), re.MULTILINE)
    return [(number, word) for number, word in found]


def table() -> dict[str, tuple[list[str], list[tuple[str, str]]]]:
    """The page's table of scripts: each script's KEYS names and its ARGV (number, first
    word), in order."""
    rows = re.findall(r"^\| `(\w+)\.lua` \| (.*?) \| (.*?) \|", PAGE.read_text(), re.MULTILINE)
    listed = {}
    for name, keys, argv in rows:
        numbered = [re.fullmatch(r"(\d+) `(.+)`", item) for item in keys.split("<br>")]
        assert all(numbered), f"{name}: each KEYS item is a number and a `key`"
        assert [m[1] for m in numbered if m] == [str(n + 1) for n in range(len(numbered))], name
        args = [re.match(r"(\S+) (\w+)", a) for a in argv.split("<br>") if a != "(none)"]
        assert all(args), f"{name}: each ARGV item is a number and a name"
        listed[name] = ([m[2] for m in numbered if m], [(m[1], m[2]) for m in args if m])
    return listed


def test_the_page_lists_every_script_with_the_keys_and_argv_of_its_header() -> None:
    sources = shipped()
    listed = table()
    assert sorted(listed) == sorted(sources)
    for name, (keys, argv) in listed.items():
        said = contract(sources[name])
        assert (len(keys), [n for n, _ in argv]) == (said.keys, said.argv), name
        assert keys == header_keys(sources[name]), name
        assert argv == header_argv(sources[name]), name


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
        keys = [named(k) for k in words[1 : count + 1]]
        if name == "browse" and keys[0] in ("waiting", "scheduled", "pending", "dead"):
            keys[0] = "<state>"  # (browse reads the set of the state it is given)
        # (a call may leave out the optional last KEYS: the header's contract counts them)
        assert keys == listed[name][0][: len(keys)], name
        assert contract(sources[name]).takes(count, len(words) - 1 - count), (name, words)


def named(key: str) -> str:
    """A key as sent (culex:{emails}:task:t1) as the table names it (task:<id>)."""
    if key.startswith(("culex:{runners}", "<prefix>:{runners}")):
        return re.sub(r"^[^:]+:\{runners\}(:runner:).+", r"<prefix>:{runners}\1<id>", key).replace(
            "culex:{runners}", "<prefix>:{runners}"
        )
    if key.startswith(("culex:{run:", "culex:{workflows}")):  # a workflow run's slot, or theirs
        return re.sub(r"^culex:\{run:[^}]+\}", "<prefix>:{run:<id>}", key).replace(
            "culex:{workflows}", "<prefix>:{workflows}"
        )
    name = key.split("}:", 1)[1]
    return re.sub(r"^(task|done):.+", r"\1:<id>", name)


def test_the_runner_loop_sends_every_key_of_the_runners_scripts() -> None:
    """The loop a foreign runner copies sends each script with all its KEYS: one that leaves
    out complete's, fail's or reclaim's cancels key leaves ids behind in cancels."""
    sources = shipped()
    loop = PAGE.read_text().split("## A runner in another language", 1)[1].split("\n## ", 1)[0]
    loop = re.sub(r"\\\n\s*", "", loop)
    sent = {name: int(count) for name, count in re.findall(r"EVALSHA <(\w+)> (\d+) ", loop)}
    runner_side = {"claim", "complete", "fail", "retry_later", "progress", "heartbeat"}
    assert set(sent) >= runner_side | {"reclaim", "release"}
    for name, count in sent.items():
        assert count == contract(sources[name]).keys, name
    # claim's reply: each task's fields as the header lists them, in the loop and the table
    fields = re.search(r"each task is\n--\s+\{([^}]*)\}", sources["claim"])
    assert fields, "claim's header lists a task's fields"
    task = "{" + fields[1] + "}"
    assert f"-> {{now_us, next_ms, {task}, ...}}" in loop
    assert f"each task `{task}`" in PAGE.read_text()


# -- the session, sent as written --------------------------------------------------------


def session() -> list[tuple[list[str], str]]:
    """Every redis> call of the page, in its order, each with the reply line the page
    gives it."""
    text = re.sub(r"\\\n\s*", "", PAGE.read_text())
    steps: list[tuple[list[str], str]] = []
    for line in text.splitlines():
        if line.startswith("redis> "):
            steps.append((shlex.split(line.removeprefix("redis> ")), ""))
        elif line.startswith("-> "):
            words, reply = steps[-1]
            assert not reply, f"two replies for {words}"
            steps[-1] = (words, line.removeprefix("-> "))
    assert steps and all(reply for _, reply in steps)
    return steps


ANY_STRING, ANY_INTEGER = "\x00a string", "\x00an integer"


def expected(reply: str) -> Any:
    """A reply line as data: "<name>" stands for any string, <name> for any integer."""
    reply = re.sub(r'"<\w+>"', lambda _: json.dumps(ANY_STRING), reply)
    return json.loads(re.sub(r"<\w+>", lambda _: json.dumps(ANY_INTEGER), reply))


def matches(want: Any, got: Any) -> bool:
    if want == ANY_STRING:
        return isinstance(got, bytes)
    if want == ANY_INTEGER:
        return type(got) is int
    if isinstance(want, list):
        return (
            isinstance(got, list)
            and len(got) == len(want)
            and all(matches(w, g) for w, g in zip(want, got, strict=True))
        )
    if isinstance(want, str):
        return isinstance(got, bytes) and got.decode() == want
    return type(got) is type(want) and bool(got == want)


def test_each_call_of_the_session_does_what_the_page_says(r: redis.Redis, url: str) -> None:
    sources = shipped()
    raw = redis.Redis.from_url(url)
    raw.response_callbacks.clear()  # the server's replies as they are, no conversion
    for words, reply in session():
        words = [
            sources[m[1]] if (m := re.fullmatch(r"\$\(cat (\w+)\.lua\)", w)) else w for w in words
        ]
        got = raw.execute_command(*words)
        shown = [w if len(w) < 80 else w[:20] + "..." for w in words]
        assert matches(expected(reply), got), (shown, reply, got)
    # The registry record the session wrote is one culex's tools read.
    settings = config.settings_for(url)
    (runner,) = inspection.runners(settings)
    assert (runner["id"], runner["queues"], runner["version"]) == (
        "node-1",
        ["emails"],
        "node-runner/0.1",
    )
    assert "emails" in inspection.queue_counts(settings)


def test_culex_runners_shows_the_record_the_page_describes(
    r: redis.Redis, url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = shipped()
    raw = redis.Redis.from_url(url)
    for words, _ in session():
        if words[:2] == ["EVAL", "$(cat beat.lua)"]:
            raw.execute_command("EVAL", sources["beat"], *words[2:])
    assert runners_command(argparse.Namespace(redis_url=url, rollback_check=None)) == 0
    out = capsys.readouterr().out
    assert "node-1  pid 4242  queues emails  busy 1/10" in out
    assert "emails<t6> SendEmailJob (attempt 1)" in out


# -- params ------------------------------------------------------------------------------


class Color(enum.Enum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


NAMES = {
    "UTC": UTC, "date": date, "datetime": datetime, "time": time, "timedelta": timedelta,
    "timezone": timezone, "Decimal": Decimal, "UUID": UUID, "Color": Color, "Level": Level,
}  # fmt: skip


def params_table() -> list[tuple[str, str, str]]:
    """Each example row of the page's params table: the declared type as written, the
    value (Python) and its JSON."""
    section = PAGE.read_text().split("## Params and results", 1)[1].split("\n## ", 1)[0]
    rows = []
    for line in section.splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip())[1:-1]]
        if len(cells) != 4 or not cells[2].startswith("`"):
            continue
        value = cells[2].split("` (", 1)[0].strip("`")
        rows.append((cells[0], value, cells[3].strip("`")))
    return rows


ENUMS = {"an `Enum`": Color, "an `IntEnum`": Level}


def test_every_param_example_is_what_the_codecs_write_and_read() -> None:
    rows = params_table()
    assert len(rows) >= 23
    for declared, value_text, data_text in rows:
        annotation = declared.strip("`").replace("\\|", "|")
        tp = ENUMS.get(declared) or eval(annotation, NAMES)  # (the page's own text)
        value = eval(value_text, NAMES)
        codec = codec_for(tp)
        data = json.loads(data_text)
        assert codec.encode(codec.validate(value, "")) == data, (declared, value_text)
        back = codec.decode(data, "")
        assert back == value and type(back) is type(value), (declared, data_text)


def test_the_page_names_no_file_outside_the_repository() -> None:
    text = PAGE.read_text()
    assert "seed" not in text.lower()
