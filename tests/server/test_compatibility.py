"""Releases and the runner registry: each runner records its release and the features it
serves, and ``culex runners`` warns of a feature in use on a queue that a live runner of
that queue cannot serve (a runner of an older culex, as after a rollback). The older
runner's record is written here with raw commands, as that culex's beat.lua left it."""

from __future__ import annotations

import contextvars
import re
import time
import tomllib
from pathlib import Path
from typing import Any

import pytest
import redis

import culex
from culex.cli import main
from culex.jobs import enqueue
from culex.operations import inspection
from culex.server import compatibility

from ..conftest import await_until, running

ROOT = Path(__file__).resolve().parents[2]
TENANT: contextvars.ContextVar[str] = contextvars.ContextVar("compat_tenant")


class CompatJob(culex.QueuedJob, abstract=True):
    """A job that does nothing: one class per queue below, each using one feature."""

    def perform(self) -> None:
        pass


class CompatControlsJob(CompatJob):
    queue = "c-controls"


class CompatGroupJob(CompatJob):
    queue = "c-groups"


class CompatNodeJob(CompatJob):
    queue = "c-workflows"


class CompatDurableJob(CompatJob):
    queue = "c-durable"


class CompatExpiringJob(CompatJob):
    queue = "c-expiry"


class CompatHeadersJob(CompatJob):
    queue = "c-headers"


class CompatSealedJob(CompatJob):
    queue = "c-encrypted"
    name: str


class CompatEventsJob(CompatJob):
    queue = "c-events"


class CompatPlainJob(CompatJob):
    queue = "c-plain"


@pytest.fixture(autouse=True)
def registry_forgotten() -> None:
    """This process's memory of the queues it has registered (which spares enqueue a
    command) is emptied with the server, so that each test's queues are known there."""
    enqueue._registered.clear()


# Each queue and the feature its tasks use (compatibility.FEATURES' names).
USES = {
    "c-controls": "controls",
    "c-groups": "groups",
    "c-workflows": "workflows",
    "c-durable": "durable",
    "c-expiry": "expiry",
    "c-headers": "headers",
    "c-encrypted": "encrypted",
    "c-events": "events",
}
QUEUES = [*USES, "c-plain"]


def plant_runner(r: redis.Redis, runner_id: str, queues: list[str], **fields: str) -> None:
    """A live runner's record as beat.lua writes it, in raw commands (a hash that expires
    with its lease, its id in the registry scored by that expiry). Without ``features``:
    as every culex before 0.10.0 wrote it (version 0.1.0, ``protocol`` from 0.4.0 on)."""
    now_ms = round(time.time() * 1000)
    key = f"culex:{{runners}}:runner:{runner_id}"
    record: dict[Any, Any] = {
        "id": runner_id, "host": "old-host", "pid": "41", "queues": ",".join(queues),
        "concurrency": "4", "version": "0.1.0", "started": str(now_ms), "beat": str(now_ms),
        "tasks": "[]", **fields,
    }  # fmt: skip
    r.hset(key, mapping=record)
    r.pexpire(key, 60_000)
    r.zadd("culex:{runners}", {runner_id: now_ms + 60_000})


def use_every_feature(r: redis.Redis) -> None:
    """A task of each feature in its queue, stored by this culex's producer (the durable
    one's record as step.lua leaves a task whose first step ran), and a plain one."""
    CompatControlsJob().enqueue()
    culex.pause("c-controls")
    CompatGroupJob().enqueue(group="g1")
    wf = culex.Workflow(name="compat")
    first = wf.add(CompatNodeJob(), name="first")
    wf.add(CompatNodeJob(), name="second", after=[first])
    wf.enqueue()
    durable = CompatDurableJob().enqueue()
    r.hset(f"culex:{{c-durable}}:task:{durable.id}", mapping={"steps": "1", "step:0": "{}"})
    CompatExpiringJob().enqueue(expires=3600)
    culex.configure(middleware=[culex.ContextMiddleware(TENANT)])
    contextvars.copy_context().run(lambda: (TENANT.set("t1"), CompatHeadersJob().enqueue()))
    culex.configure(middleware=[culex.EncryptedParams({"k1": bytes(32)}, current="k1")])
    CompatSealedJob(name="secret").enqueue()
    culex.configure(middleware=[], events=True)
    CompatEventsJob().enqueue()
    culex.configure(events=False)
    CompatPlainJob().enqueue()


def warned(out: str) -> set[tuple[str, str]]:
    """The (queue, feature title) of each warning line ``culex runners`` printed."""
    titles = {f.title: f.name for f in compatibility.FEATURES}
    found = set()
    for line in out.splitlines():
        if line.startswith("warning: "):
            match = re.match(r"warning: queue '([^']+)' uses (.+?) \((?:task|key) ", line)
            assert match, line
            found.add((match[1], titles[match[2]]))
    return found


def test_culex_runners_warns_of_each_feature_an_older_runner_cannot_serve(
    r: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    use_every_feature(r)
    plant_runner(r, "old-host:41:0a0a", QUEUES)  # (before 0.4.0: no protocol either)
    assert main(["runners"]) == 0
    out = capsys.readouterr().out
    assert warned(out) == set(USES.items())
    [line] = [x for x in out.splitlines() if "'c-encrypted'" in x]
    assert "; 1 runner(s) there cannot serve it (0.1.0 on old-host pid 41)" in line
    assert "older than 0.8.0 reads sealed params as the params: the task goes to dead" in line
    assert "docs/production.md" in line
    (found,) = [u for u in inspection.unserved(queues=["c-expiry"])]
    assert (found.queue, found.feature.name, found.seen[:5]) == ("c-expiry", "expiry", "task ")


def test_a_record_with_protocol_but_no_features_serves_pause_limits_and_groups_only(
    r: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    use_every_feature(r)
    plant_runner(r, "old-host:41:0b0b", QUEUES, protocol="1")  # (0.4.0 to 0.9.0)
    assert main(["runners"]) == 0
    served = {("c-groups", "groups"), ("c-controls", "controls")}
    assert warned(capsys.readouterr().out) == set(USES.items()) - served


def test_no_warning_where_every_runner_serves_the_features(
    r: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    use_every_feature(r)
    plant_runner(
        r, "new-host:7:0c0c", QUEUES, protocol="1", features=compatibility.SERVED,
        version=culex.__version__,
    )  # fmt: skip
    plant_runner(r, "old-host:41:0d0d", ["c-plain", "elsewhere"])  # (queues without them)
    assert main(["runners"]) == 0
    assert warned(capsys.readouterr().out) == set()
    assert inspection.unserved() == []


def test_rollback_check_says_what_to_drain_before_rolling_back_to_a_release(
    r: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    use_every_feature(r)
    assert main(["runners", "--rollback-check", "0.6.0"]) == 1  # (no runner needed)
    lines = capsys.readouterr().out.splitlines()
    newer = {
        (q, name)
        for q, name in USES.items()
        if name in ("expiry", "headers", "encrypted", "events")
    }
    assert warned("\n".join(f"warning: {x}" for x in lines)) == newer, lines
    assert any(x.endswith("Drain these tasks before a rollback below 0.7.0") for x in lines)
    assert main(["runners", "--rollback-check", "0.10.0"]) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        "nothing in use that a runner of 0.10.0 cannot serve"
    )
    assert main(["runners", "--rollback-check", "latest"]) == 2
    assert "a release is written like 0.4.0, got 'latest'" in capsys.readouterr().err


async def test_a_runner_records_its_release_and_the_features_it_serves(r: redis.Redis) -> None:
    culex.configure(lease=0.3)
    async with running(culex.Runner(run_from=["c-expiry"])):
        await await_until(lambda: inspection.runners() != [], what="the runner's first beat")
        (listed,) = await inspection.arunners()
    assert listed["version"] == culex.__version__ == compatibility.VERSION
    assert listed["features"].split(",") == [f.name for f in compatibility.FEATURES]


def test_one_version_for_the_package_the_changelog_and_the_registry() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert project["project"]["dynamic"] == ["version"]
    source = ROOT / project["tool"]["hatch"]["version"]["path"]
    # (hatchling's default pattern for [tool.hatch.version] path)
    pattern = r"(?im)^(__version__|VERSION) *= *([\'\"])v?(?P<version>.+?)\2"
    [found] = [m["version"] for m in re.finditer(pattern, source.read_text())]
    assert found == culex.__version__ == compatibility.VERSION
    changelog = (ROOT / "CHANGELOG.md").read_text()
    releases = re.findall(r"^## \[?(\d+\.\d+\.\d+)", changelog, re.M)
    assert releases[0] == found  # (the newest first)
    for feature in compatibility.FEATURES:  # (each feature's first release is one of them)
        assert feature.since in releases, feature
    assert "Copyright (c) 2026 the culex authors" in (ROOT / "LICENSE").read_text()
    assert project["project"]["license"] == "MIT"
