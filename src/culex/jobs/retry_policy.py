"""A job class's retry policy beyond max_retries and reschedule_interval: which exceptions
retry (``retry_on``), a random jitter on each delay (``retry_jitter``) and a cap on it
(``max_retry_delay``). declaration.py checks the attributes when the class is defined; the
runner's failure path (culex.runner.attempt) applies them, the one place a retry delay is
decided (and the child of an ``isolation = "process"`` job, which alone has the exception,
says whether it retries: culex.runner.isolation).
"""

from __future__ import annotations

import random

from .. import config
from ..errors import JobFailure
from .declaration import JobDeclaration


def retries(job: type[JobDeclaration] | JobDeclaration, raised: BaseException) -> bool:
    """Whether ``raised``, which ended an attempt of ``job``, may retry: always with no
    ``retry_on`` (None), and for a ``JobFailure`` (``self.fail()``: the job's own decision,
    which its ``retry=`` says); else only an instance of one of ``retry_on``'s classes."""
    retry_on = job.retry_on
    return retry_on is None or isinstance(raised, (JobFailure, *retry_on))


def shaped_delay_ms(job: JobDeclaration, delay_ms: int) -> int:
    """``delay_ms`` (from ``reschedule_interval``) capped at ``max_retry_delay`` and, with
    ``retry_jitter``, drawn at random from half of it to all of it (the cap first, so that
    a jittered delay stays within the cap)."""
    if job.max_retry_delay is not None:
        cap = round(config.seconds(job.max_retry_delay, "max_retry_delay") * 1000)
        delay_ms = min(delay_ms, cap)
    if job.retry_jitter and delay_ms > 1:
        delay_ms = random.randint(delay_ms - delay_ms // 2, delay_ms)
    return delay_ms
