"""The framework guides (docs/django.md, fastapi.md, flask.md) are whole projects: each
test writes a page's files where their first lines say, and runs them as a user would: the
web side in one process, ``culex run`` in another, against the test server."""

from __future__ import annotations

import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from .conftest import wait_until

DOCS = Path(__file__).resolve().parent.parent / "docs"


def write_project(page: str, folder: Path) -> list[Path]:
    """Each ```python block of ``page`` whose first line is ``# some/file.py``, written to
    that file under ``folder`` (with the empty ``__init__.py`` a package needs)."""
    text = (DOCS / page).read_text()
    written = []
    for block in re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M):
        first = block.splitlines()[0]
        if not re.fullmatch(r"# [\w/]+\.py", first):
            continue
        path = folder / first[2:]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(block)
        (path.parent / "__init__.py").touch()
        written.append(path)
    return written


def python(folder: Path, code: str, **env: str) -> str:
    """Run ``code`` with the project on the path; its stdout (a failure shows stderr)."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(folder), **env},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def project_tests(folder: Path, **env: str) -> None:
    """The project's own tests (its page's ``tests/`` files), run by pytest in the project's
    folder with culex's plugin, as the user runs them: they pass."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(folder), **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert " passed" in done.stdout


@contextmanager
def runner(folder: Path, module: str, **env: str) -> Iterator[subprocess.Popen[str]]:
    """``culex run MODULE`` in the project's folder, for the block."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "culex", "run", module, "--grace-period", "1"],
        cwd=folder,
        env={**os.environ, "PYTHONPATH": str(folder), **env},
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        yield proc
    finally:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        assert proc.returncode == 0, err


def test_the_django_guide_runs(r: redis.Redis, url: str, tmp_path: Path) -> None:
    pytest.importorskip("django", reason="the Django guide's test needs Django")
    files = write_project("django.md", tmp_path)
    assert {p.name for p in files} >= {"settings.py", "jobs.py", "views.py", "runner.py"}
    env = {"REDIS_URL": url, "DJANGO_SETTINGS_MODULE": "mysite.settings"}
    python(tmp_path, "import django.core.management as m; m.execute_from_command_line("
           "['django-admin', 'migrate', '--run-syncdb', '-v', '0'])", **env)  # fmt: skip
    placed = python(
        tmp_path,
        """
        import django
        django.setup()
        from django.db import transaction
        from django.test import Client
        from shop.jobs import SendReceiptJob
        from shop.models import Order

        # A transaction rolled back enqueues nothing; the view's, committed, enqueues.
        with transaction.atomic():
            order = Order.objects.create(email="gone@example.com")
            transaction.on_commit(lambda: SendReceiptJob(order_id=order.pk).enqueue())
            transaction.set_rollback(True)
        print(Client().post("/orders", {"email": "ann@example.com"}).json()["order"])
        """,
        **env,
    )
    order = int(placed)
    keys = r.keys("*{send_receipt_job}:task:*")
    assert len(keys) == 1 and r.zcard("culex:{send_receipt_job}:waiting") == 1

    def receipt_sent() -> bool:
        with sqlite3.connect(tmp_path / "db.sqlite3") as db:
            row = db.execute("select receipt_sent from shop_order where id = ?", (order,))
            return bool(row.fetchone()[0])

    assert not receipt_sent()
    with runner(tmp_path, "shop.runner", **env):
        wait_until(receipt_sent, timeout=30, what="the runner to send the receipt")
    assert r.hget(keys[0], "state") in (b"succeeded", None)  # (None: its ttl passed)
    project_tests(tmp_path, **env)


def with_runner(page: str, folder: Path, module: str, client_code: str, **env: str) -> str:
    """The page's project, ``culex run MODULE`` running, and ``client_code`` run beside it
    (the web side, with ``env``): its stdout."""
    write_project(page, folder)
    with runner(folder, module):
        return python(folder, client_code, **env)


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
