"""Fixtures of the chaos suite; the ``long`` marker for its long runs (skipped by default).

The long runs: ``CULEX_CHAOS_LONG=1 pytest tests/chaos -m long -s`` (several minutes each).
"""

from __future__ import annotations

import os
import random
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import culex
from culex import config
from culex.server.embedded import EmbeddedServer

from ..conftest import suite_binary
from . import chaos_jobs
from .fleet import Fleet
from .ledger import Ledger

LONG_ENV = "CULEX_CHAOS_LONG"
SEED_ENV = "CULEX_CHAOS_SEED"

# The test process only enqueues these jobs; runners in this process (other test modules)
# must not think they serve them.
for _job in chaos_jobs.JOBS:
    culex.registry.remove(_job)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        f"long: a long chaos run (minutes), skipped unless {LONG_ENV}=1; "
        f"run them with `{LONG_ENV}=1 pytest tests/chaos -m long -s`",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if os.environ.get(LONG_ENV) == "1":
        return
    skip = pytest.mark.skip(reason=f"a long chaos run: set {LONG_ENV}=1 and select -m long")
    for item in items:
        if "long" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def rng() -> random.Random:
    """The faults' dice; print their seed so a run can be replayed (CULEX_CHAOS_SEED)."""
    seed = int(os.environ.get(SEED_ENV) or random.randrange(2**32))
    print(f"chaos seed: {seed} (replay with {SEED_ENV}={seed})")
    return random.Random(seed)


@pytest.fixture
def own_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[EmbeddedServer]:
    """A server for this test alone; the test process's culex settings point at it."""
    server = EmbeddedServer(tmp_path / "valkey", binary=suite_binary())
    url = server.ensure_running()
    monkeypatch.setenv("CULEX_REDIS_URL", url)
    config.reset()
    try:
        yield server
    finally:
        server.stop()
        monkeypatch.undo()
        config.reset()


@pytest.fixture
def ledger(tmp_path: Path) -> Iterator[Ledger]:
    kept = Ledger(tmp_path / "ledger")
    try:
        yield kept
    finally:
        kept.close()


@pytest.fixture
def fleets(ledger: Ledger, tmp_path: Path) -> Iterator[Callable[..., Fleet]]:
    """Make fleets of runner processes; every process they started is killed at the end."""
    made: list[Fleet] = []

    def make(redis_url: str, **options: Any) -> Fleet:
        fleet = Fleet(ledger, redis_url, tmp_path / f"fleet-{len(made)}", **options)
        made.append(fleet)
        return fleet

    try:
        yield make
    finally:
        for fleet in made:
            fleet.close()
