"""``culex demo``: enqueue three example tasks, run them, show what happened, exit.

One succeeds, one fails once and succeeds on its retry, one is delayed by two seconds.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from datetime import timedelta

import culex
from culex import config, logs
from culex._redis.address import Address
from culex.jobs.task import task_name
from culex.server.embedded import default_data_dir

logger = logging.getLogger("culex")


class WelcomeJob(culex.QueuedJob):
    """Succeeds at once."""

    queue = "culex_demo"
    name: str

    def perform(self) -> str:
        self.log(f"welcome, {self.name}!")
        return f"welcomed {self.name}"


class FlakyJob(culex.QueuedJob):
    """Fails on its first attempt, succeeds on its retry."""

    queue = "culex_demo"

    def perform(self) -> str:
        if self.retry_count == 0:
            self.fail("the mail server is down (on purpose, to show a retry)")
        self.log(f"worked on attempt {self.attempt}")
        return "sent on retry"

    def reschedule_interval(self, retry_count: int) -> timedelta:
        return timedelta(seconds=1)  # the default is 2 s x retry_count²


class ReminderJob(culex.QueuedJob):
    """Runs two seconds after it is enqueued."""

    queue = "culex_demo"
    text: str

    async def perform(self) -> str:
        self.log(f"reminder: {self.text}")
        return "reminded"


async def _show() -> None:
    runner = culex.Runner(run_from=["culex_demo"], concurrency=4)
    running = asyncio.create_task(runner.arun())
    try:
        tasks = [
            await WelcomeJob(name="newcomer").aenqueue(),
            await FlakyJob().aenqueue(),
            await ReminderJob(text="culex keeps your tasks").aenqueue(delay=timedelta(seconds=2)),
        ]
        for task in tasks:
            logger.info("enqueued task %s", task_name(task.queue, task.id))
        for task in tasks:
            # (the state read once the result is in: a state read at enqueue time is stale
            # by the time anyone reads it, the runner having started or ended the task)
            result = await task.aresult(timeout=30)
            state = await task.astate()
            said = state.value if state is not None else "expired"
            logger.info("result of task %s (%s): %r", task_name(task.queue, task.id), said, result)
    except BaseException:  # (a bad URL, no server): the error is the enqueue's, said once
        running.cancel()
        with contextlib.suppress(BaseException):
            await running
        raise
    runner.stop()
    await running


def main() -> int:
    culex.configure(successful_job_ttl=60)
    asyncio.run(_show())
    logs.flush_all()  # the runner's last lines first (culex run writes them in batches)
    print(f"\n{_where(config.settings().redis_url)}")
    return 0


def _where(url: str | None) -> str:
    """Where the demo ran, said plainly (a password in the URL is not shown)."""
    if url is None:
        return (
            f"The demo ran on the embedded server in {default_data_dir()}; "
            "stop it with: culex server stop"
        )
    return f"The demo ran on the server at {Address.parse(url).shown} (CULEX_REDIS_URL / redis_url)"
