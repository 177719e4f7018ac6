"""A type checker sees a job's params: a wrong param type is an error before anything runs.

``culex.Job`` is a ``dataclass_transform``: mypy builds each job's keyword constructor from
its annotations, as it does for a dataclass.
"""

from __future__ import annotations

import sys
import textwrap
from pathlib import Path

from mypy import api

SAMPLE = """
    from datetime import timedelta
    from typing import Any

    import culex


    class SendEmailJob(culex.QueuedJob):
        to: str
        subject: str = "Welcome"
        queue = "emails"  # class settings without annotations are not params
        max_retries = 2

        def perform(self) -> str:
            return self.subject


    class StoreJob(culex.QueuedJob):
        fields: dict[str, Any]  # plain JSON to culex, still a dict to mypy

        def perform(self) -> None: ...


    class Cleanup(culex.PeriodicJob):
        run_every = timedelta(minutes=1)

        def perform(self) -> None: ...


    async def main() -> None:
        SendEmailJob(to="a@b.c").enqueue()
        await SendEmailJob(to="a@b.c", subject="Hi").aenqueue(delay=3)
        culex.enqueue_many([SendEmailJob(to="a@b.c")])
        Cleanup()
        text: str = SendEmailJob(to="a@b.c").to
        SendEmailJob(to=1).enqueue()  # rejected
        SendEmailJob().enqueue()  # rejected
        SendEmailJob(to="a@b.c", cc="b@c.d").enqueue()  # rejected
        StoreJob(fields={"a": [1]}).enqueue()
        StoreJob(fields=[1]).enqueue()  # rejected
"""


def test_mypy_checks_params_where_the_job_is_made(tmp_path: Path) -> None:
    sample = tmp_path / "sample.py"
    sample.write_text(textwrap.dedent(SAMPLE))
    rejected = [
        str(number)
        for number, line in enumerate(sample.read_text().splitlines(), start=1)
        if line.endswith("# rejected")
    ]
    limit = sys.getrecursionlimit()
    try:
        out, _, status = api.run(
            ["--strict", "--no-incremental", "--cache-dir", str(tmp_path / "cache"), str(sample)]
        )
    finally:  # mypy raises the process's recursion limit: the tests after this one need it
        sys.setrecursionlimit(limit)
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert status == 1, out
    assert [line.split(":")[1] for line in errors] == rejected, out
    assert 'Argument "to" to "SendEmailJob" has incompatible type "int"' in errors[0]
    assert 'Missing named argument "to"' in errors[1]
    assert 'Unexpected keyword argument "cc"' in errors[2]
    assert 'Argument "fields" to "StoreJob" has incompatible type "list[int]"' in errors[3]
