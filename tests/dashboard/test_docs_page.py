"""docs/dashboard.md's examples run, in order, and the apps they build serve the pages."""

from __future__ import annotations

import base64
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import redis

pytest.importorskip("fastapi", reason="the page's example needs fastapi: pip install -e '.[test]'")

from ..test_docs import python_blocks
from .conftest import serve

PAGE = Path(__file__).resolve().parent.parent.parent / "docs" / "dashboard.md"


def test_the_examples_run_and_serve(r: redis.Redis) -> None:
    blocks = python_blocks(PAGE)
    assert len(blocks) == 2
    namespace: dict[str, Any] = {}
    for block in blocks:
        exec(compile(block, str(PAGE), "exec"), namespace)
    assert namespace["eu"].state.read_only and namespace["eu"].state.settings.redis_url
    staff = {"Authorization": "Basic " + base64.b64encode(b"me:correct horse").decode()}
    with serve(namespace["api"]) as url:
        assert fetch(f"{url}/culex/")[0] == fetch(f"{url}/admin/culex/")[0] == 401
        status, page = fetch(f"{url}/culex/", staff)
        assert status == 200 and "Overview · culex" in page and 'id="read-only"' not in page
        assert 'href="/culex/runners"' in page  # links keep their own mount's prefix
        status, admin = fetch(f"{url}/admin/culex/", staff)
        assert status == 200 and 'id="read-only"' in admin
        assert 'href="/admin/culex/runners"' in admin


def fetch(address: str, headers: dict[str, str] | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(address, headers=headers or {})) as got:
            return int(got.status), got.read().decode()
    except urllib.error.HTTPError as refused:
        refused.close()
        return refused.code, ""
