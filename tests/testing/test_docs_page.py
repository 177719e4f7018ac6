"""docs/testing.md's examples run: its blocks in one namespace, then each test they define,
on the fixture, as pytest would call them."""

from __future__ import annotations

import asyncio
import inspect
import sys
import types
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

import culex
from culex.embedded import EmbeddedServer

PAGE = Path(__file__).resolve().parents[2] / "docs" / "testing.md"
MODULE = "culex_testing_docs_example"


def python_blocks(page: Path) -> list[str]:
    text = page.read_text()
    return [part.split("```", 1)[0] for part in text.split("```python\n")[1:]]


@pytest.fixture
def page_namespace() -> Iterator[dict[str, object]]:
    module = types.ModuleType(MODULE)
    sys.modules[MODULE] = module  # job classes resolve their annotations here
    try:
        for block in python_blocks(PAGE):
            exec(compile(block, str(PAGE), "exec"), module.__dict__)
        yield module.__dict__
    finally:
        del sys.modules[MODULE]
        for job in list(culex.registry):
            if job.__module__ == MODULE:
                culex.registry.remove(job)


def test_the_page_defines_tests(page_namespace: dict[str, object]) -> None:
    assert len(python_blocks(PAGE)) >= 5
    assert len(page_tests(page_namespace)) >= 5


def page_tests(namespace: dict[str, object]) -> list[str]:
    return [
        name for name, value in namespace.items() if name.startswith("test_") and callable(value)
    ]


def test_the_pages_tests_pass(
    page_namespace: dict[str, object], culex_server: EmbeddedServer
) -> None:
    with redis.Redis.from_url(culex_server.url) as client:
        for name in page_tests(page_namespace):
            function = page_namespace[name]
            assert callable(function)
            client.flushall()  # (as the fixture empties the server for each test)
            result = function(culex_server)
            if inspect.iscoroutine(result):
                asyncio.run(result)
