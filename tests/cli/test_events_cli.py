"""Task events from real ``culex run`` processes, and ``culex events`` as a user runs it."""

from __future__ import annotations

import os
import signal
import subprocess
import textwrap
from pathlib import Path

import pytest
import redis

import culex

from .test_cli import culex_command

JOBS = textwrap.dedent(
    """
    import culex

    class EventsCliJob(culex.QueuedJob):
        queue = "events_cli"
        max_retries = 1
        n: int

        def reschedule_interval(self, retry_count):
            return 0

        def perform(self) -> int:
            if self.n < 0 and self.attempt == 1:
                raise RuntimeError("the first attempt of a negative n fails")
            return self.n
    """
)


def enqueue(n: int) -> culex.Task:
    """Enqueue EventsCliJob by name (the class lives in the runner's module only)."""
    from culex._redis import commands
    from culex._redis.enqueuing import enqueue as enqueue_call
    from culex._redis.keys import queue_keys, queues_key
    from culex.jobs.task import new_id
    from culex.server.procedures import one_call, run_sync

    task_id = new_id()
    call = enqueue_call(
        queue_keys("culex", "events_cli"), task_id, "EventsCliJob", f'{{"n": {n}}}',
        due_ms=None, delay_ms=0, max_retries=1, drawn=True, events=True,
    )  # fmt: skip
    run_sync(one_call(call))
    run_sync(one_call(commands.register_queue(queues_key("culex"), "events_cli")))  # (as enqueue)
    return culex.Task(task_id, "events_cli")


def events_out(*args: str) -> list[list[str]]:
    done = subprocess.run(culex_command("events", *args), capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return [line.split() for line in done.stdout.splitlines()]


def test_runner_processes_write_each_change_and_culex_events_prints_them(
    r: redis.Redis, tmp_path: Path
) -> None:
    (tmp_path / "events_cli_jobs.py").write_text(JOBS)
    env = {**os.environ, "CULEX_EVENTS": "1", "CULEX_GRACE_PERIOD": "0.2"}
    runners = [
        subprocess.Popen(culex_command("run", "events_cli_jobs"), cwd=tmp_path, env=env)
        for _ in range(2)
    ]
    try:
        ok, flaky = enqueue(3), enqueue(-1)
        assert ok.result(timeout=30) == 3 and flaky.result(timeout=30) == -1
    finally:
        for runner in runners:
            runner.send_signal(signal.SIGTERM)
        for runner in runners:
            runner.wait(timeout=30)
    found = list(culex.events(["events_cli"], since="0", follow=False))
    assert [(e.kind, e.attempt) for e in found if e.task_id == ok.id] == [
        ("enqueued", 0), ("started", 1), ("succeeded", 1),
    ]  # fmt: skip
    assert [(e.kind, e.attempt) for e in found if e.task_id == flaky.id] == [
        ("enqueued", 0), ("started", 1), ("failed", 1), ("started", 2), ("succeeded", 2),
    ]  # fmt: skip
    # the command: one line per event (date, time, queue, kind, attempt, job, id)
    lines = events_out("events_cli")
    assert [(w[2], w[3], w[4], w[5], w[6]) for w in lines if w[6] == ok.id] == [
        ("events_cli", "enqueued", "0", "EventsCliJob", ok.id),
        ("events_cli", "started", "1", "EventsCliJob", ok.id),
        ("events_cli", "succeeded", "1", "EventsCliJob", ok.id),
    ]
    assert len(events_out()) == len(lines) == len(found)  # (no queue: every known one)
    assert events_out("events_cli", "--since", found[-2].id) == lines[-1:]


def test_follow_prints_new_events_until_interrupted(r: redis.Redis) -> None:
    culex.configure(events=True)
    with subprocess.Popen(
        culex_command("events", "events_cli", "--follow", "--since", "1-0"),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as follow:
        try:
            task = enqueue(1)
            assert follow.stdout is not None
            first = follow.stdout.readline().split()
            assert (first[3], first[6]) == ("enqueued", task.id)
        finally:
            follow.send_signal(signal.SIGINT)
            assert follow.wait(timeout=30) == 0


def test_a_trimmed_position_is_said_and_the_command_goes_on(r: redis.Redis) -> None:
    enqueue(1)
    mark = next(iter(culex.events(["events_cli"], since="0", follow=False))).id
    last = enqueue(2)
    r.xtrim("culex:{events_cli}:events", maxlen=1, approximate=False)
    done = subprocess.run(
        culex_command("events", "events_cli", "--since", mark), capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert "trimmed" in done.stderr
    assert [line.split()[6] for line in done.stdout.splitlines()] == [last.id]


@pytest.mark.parametrize("bad", ["yesterday", "10x", "-5m"])
def test_a_bad_since_is_refused_clearly(bad: str) -> None:
    done = subprocess.run(
        culex_command("events", "q", "--since", bad), capture_output=True, text=True
    )
    assert done.returncode == 2 and "--since" in done.stderr


def test_culex_events_says_a_queue_has_its_events_off(r: redis.Redis) -> None:
    culex.configure(events=False)
    from culex._redis.keys import queue_keys

    r.sadd("culex:queues", "events_cli")  # (a known queue, whose tasks wrote no event)
    done = subprocess.run(culex_command("events", "events_cli"), capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == ""
    assert "events are off for queue events_cli" in done.stderr
    assert "CULEX_EVENTS=1" in done.stderr
    enqueue(1)  # (with events on)
    assert r.exists(queue_keys("culex", "events_cli").events)
    done = subprocess.run(culex_command("events", "events_cli"), capture_output=True, text=True)
    assert "events are off" not in done.stderr and "enqueued" in done.stdout
