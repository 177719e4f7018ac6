"""``isolation = "process"``: run a sync perform in a child process that can be killed.

A thread cannot be stopped from outside, so a sync perform that overruns its ``timeout``
in the default thread isolation keeps its thread busy. In a child process it is killed at
the limit, and killed when a stopping runner hands its task back. The child is forked, so
the job object and its class need no pickling.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ..errors import AttemptOver, JobFailure, RetryLater
from ..jobs import retry_policy
from ..jobs.failures import traceback_of
from ..jobs.task_logs import send_now, unbeaten

if TYPE_CHECKING:
    from multiprocessing.connection import Connection
    from multiprocessing.process import BaseProcess

    from ..jobs.job import Job

KILL_WAIT = 5.0  # seconds to wait for a SIGKILLed child to be gone

# The children running now, by task id: a stopping runner kills those it hands back.
_children: dict[str, BaseProcess] = {}


class ChildDied(Exception):
    """The child process ended without a word (killed, os._exit, a crash)."""


class ChildRaised(Exception):
    """perform raised in the child; the message is ``Type: text``, ``traceback`` the
    child's (culex.jobs.failures.traceback_of), ``retries`` whether the job's ``retry_on``
    lets it retry (decided in the child, which has the exception: culex.jobs.retry_policy)."""

    def __init__(self, message: str, traceback: str = "", retries: bool = True) -> None:
        super().__init__(message)
        self.traceback = traceback
        self.retries = retries


def run_in_process(job: Job, run: Callable[[Job], Any], timeout: float | None) -> str:
    """Run ``run(job)`` in a forked child; returns the result as JSON text.

    Raises TimeoutError (the child was killed), JobFailure, RetryLater, AttemptOver, ChildRaised or
    ChildDied.
    """
    import multiprocessing  # here, not at the top: most runners never use it (its memory)

    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(job, run, send), daemon=True)
    child.start()
    _children[job.task_id] = child
    send.close()
    try:
        if not receive.poll(timeout):
            child.kill()
            raise TimeoutError
        kind, payload = receive.recv()
    except EOFError:
        child.join()
        raise ChildDied(f"the process running the task died (exit code {child.exitcode})") from None
    finally:
        _children.pop(job.task_id, None)
        receive.close()
        child.join()
    if kind == "failure":
        reason, retry = payload
        raise JobFailure(reason, retry=retry)
    if kind == "later":
        raise RetryLater(timedelta(milliseconds=payload))
    if kind == "over":
        raise AttemptOver(payload)
    if kind == "error":
        raise ChildRaised(*payload)
    return str(payload)


def kill(task_ids: Iterable[str] | None = None) -> None:
    """Kill the children running the given tasks (None: every child) and wait until they
    are gone, so that none of them still works once its task is handed back."""
    chosen = list(_children) if task_ids is None else [i for i in task_ids if i in _children]
    killed = [child for child in (_children.get(i) for i in chosen) if child is not None]
    for child in killed:
        child.kill()
    for child in killed:
        child.join(KILL_WAIT)


def _child(job: Job, run: Callable[[Job], Any], send: Connection) -> None:
    try:
        if job.log_keep_ is not None:  # (the child sends its own lines: task_logs.py)
            if job.log_buffer_ is not None:
                job.log_buffer_ = job.log_buffer_.fresh()
            job.log_keep_, job.log_direct_ = unbeaten, True
        message: tuple[str, Any]
        try:
            message = ("ok", job.result_text(run(job)))
        except JobFailure as exc:
            message = ("failure", (exc.reason, exc.retry))
        except RetryLater as exc:
            message = ("later", getattr(exc, "delay_ms", None))
        except AttemptOver as exc:
            message = ("over", exc.why)
        except BaseException as exc:
            told = f"{type(exc).__name__}: {exc}"
            message = ("error", (told, traceback_of(exc), retry_policy.retries(job, exc)))
        _lines_sent(job)
        send.send(message)
        send.close()
    finally:
        # Leave at once: the parent's atexit handlers, threads and event loop are not ours.
        os._exit(0)


def _lines_sent(job: Job) -> None:
    """The child's last log lines, sent before its outcome is."""
    if job.log_buffer_ is not None:
        send_now(job.log_buffer_, job.reporting_, job.task_id)
