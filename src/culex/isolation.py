"""``isolation = "process"``: run a sync perform in a child process that can be killed.

A thread cannot be stopped from outside, so a sync perform that overruns its ``timeout``
in the default thread isolation keeps its thread busy. In a child process it is killed at
the limit. The child is forked, so the job object and its class need no pickling.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .errors import JobFailure

if TYPE_CHECKING:
    from multiprocessing.connection import Connection

    from .job import Job


class ChildDied(Exception):
    """The child process ended without a word (killed, os._exit, a crash)."""


class ChildRaised(Exception):
    """perform raised in the child; the message is ``Type: text``."""


def run_in_process(job: Job, run: Callable[[Job], Any], timeout: float | None) -> str:
    """Run ``run(job)`` in a forked child; returns the result as JSON text.

    Raises TimeoutError (the child was killed), JobFailure, ChildRaised or ChildDied.
    """
    import multiprocessing  # here, not at the top: most runners never use it (its memory)

    context = multiprocessing.get_context("fork")
    receive, send = context.Pipe(duplex=False)
    child = context.Process(target=_child, args=(job, run, send), daemon=True)
    child.start()
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
        receive.close()
        child.join()
    if kind == "failure":
        reason, retry = payload
        raise JobFailure(reason, retry=retry)
    if kind == "error":
        raise ChildRaised(payload)
    return str(payload)


def _child(job: Job, run: Callable[[Job], Any], send: Connection) -> None:
    try:
        try:
            send.send(("ok", job.result_text(run(job))))
        except JobFailure as exc:
            send.send(("failure", (exc.reason, exc.retry)))
        except BaseException as exc:
            send.send(("error", f"{type(exc).__name__}: {exc}"))
        send.close()
    finally:
        # Leave at once: the parent's atexit handlers, threads and event loop are not ours.
        os._exit(0)
