"""``culex run`` with a job module that configures middleware: the module's
``culex.configure(middleware=...)`` applies to the producer that imports it and to the
runner process that imports it (headers, context, around_perform, on_dead, encryption)."""

from __future__ import annotations

import contextvars
import importlib
import json
import os
import signal
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest
import redis

import culex

from ..cli.test_cli import Stderr, culex_command
from ..conftest import wait_until

JOBS = textwrap.dedent(
    """
    import contextvars
    import os

    import redis

    import culex

    tenant = contextvars.ContextVar("tenant")


    class Audit(culex.Middleware):
        def on_enqueue(self, job, headers):
            headers["pid"] = str(os.getpid())

        def around_perform(self, job, call_next):
            return {"wrapped": call_next(), "runner": os.getpid()}

        def on_dead(self, job, error):
            with redis.Redis.from_url(os.environ["CULEX_REDIS_URL"]) as r:
                r.rpush("test:dead", f"{type(job).__name__}: {error}")


    class MwRunJob(culex.QueuedJob):
        queue = "mw_run"
        max_retries = 0
        secret: str = ""
        broken: bool = False

        def perform(self):
            if self.broken:
                raise RuntimeError("no")
            return [self.headers.get("pid"), tenant.get("none"), self.secret]


    culex.configure(
        middleware=[
            Audit(),
            culex.ContextMiddleware(tenant),
            culex.EncryptedParams(keys={"k1": b"0" * 32}, current="k1"),
        ]
    )
    """
)


@pytest.fixture
def jobs(tmp_path: Path) -> Iterator[ModuleType]:
    """The job module, imported by this process too (the producer)."""
    (tmp_path / "mw_run_jobs.py").write_text(JOBS)
    sys.path.insert(0, str(tmp_path))
    try:
        yield importlib.import_module("mw_run_jobs")
    finally:
        sys.path.remove(str(tmp_path))
        module = sys.modules.pop("mw_run_jobs", None)
        if module is not None:
            culex.registry.remove(module.MwRunJob)


def test_culex_run_applies_the_job_modules_middleware(
    r: redis.Redis, tmp_path: Path, jobs: ModuleType
) -> None:
    # (the module configured this process's middleware when the fixture imported it)
    context = contextvars.copy_context()
    context.run(jobs.tenant.set, "acme")
    task = context.run(jobs.MwRunJob(secret="s3cr3t").enqueue)
    failing = context.run(jobs.MwRunJob(broken=True).enqueue)
    params, headers = r.hmget(f"culex:{{mw_run}}:task:{task.id}", ["params", "headers"])
    assert isinstance(params, bytes) and isinstance(headers, bytes)
    assert b"s3cr3t" not in params and params.startswith(b'{"$encrypted"')
    assert json.loads(headers)["ctx.tenant"] == '"acme"'
    proc = subprocess.Popen(
        culex_command("run", "mw_run_jobs"), cwd=tmp_path, stderr=subprocess.PIPE, text=True
    )
    log = Stderr(proc)
    try:
        result = task.result(timeout=30)
        wait_until(lambda: r.llen("test:dead"), what="on_dead in the runner process")
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(30)
        log.text()
    assert result == {"wrapped": [str(os.getpid()), "acme", "s3cr3t"], "runner": proc.pid}
    assert r.lrange("test:dead", 0, -1) == [b"MwRunJob: no"]
    assert failing.state() is culex.TaskState.DEAD
