"""culex.django beyond its guide (docs/django.md, which tests/test_guides.py runs as a
reader does): the connections a task opened are closed around it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest


def python(folder: Path, code: str, **env: str) -> str:
    """Run ``code`` with the project on the path; its stdout (a failure shows stderr)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(folder), *sys.path]), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_django_connections_are_closed_around_each_task(url: str, tmp_path: Path) -> None:
    pytest.importorskip("django", reason="the Django guide's test needs Django")
    out = python(
        tmp_path,
        """
        import asyncio
        import django
        from django.conf import settings
        settings.configure(DATABASES={"default": {
            "ENGINE": "django.db.backends.sqlite3", "NAME": "db.sqlite3"}})
        django.setup()
        from django.db import connections
        import culex
        from culex.django import CloseOldConnections

        seen = {}

        class PlainJob(culex.QueuedJob):
            queue = "django"
            def perform(self) -> None:
                seen["plain"] = connections["default"]  # (this thread's)
                seen["plain"].ensure_connection()

        class ClosingJob(CloseOldConnections, culex.QueuedJob):
            queue = "django"
            def perform(self) -> None:
                seen["closing"] = connections["default"]
                seen["closing"].ensure_connection()

        async def main() -> None:
            runner = culex.Runner(concurrency=1)
            running = asyncio.create_task(runner.arun())
            await (await PlainJob().aenqueue()).aresult(timeout=20)
            print("plain", seen["plain"].connection is None)
            await (await ClosingJob().aenqueue()).aresult(timeout=20)
            print("closing", seen["closing"].connection is None)
            runner.stop()
            await running

        asyncio.run(main())
        """,
    )
    # The connection a task opened stays open without the mixin, and is closed with it.
    assert out.split("\n")[:2] == ["plain False", "closing True"]
