"""Helpers for testing code that uses culex, on a real server.

The pytest plugin (``culex.testing.plugin``, loaded by pytest when culex is installed)
gives the ``culex_server`` fixture: a private server for the test session, emptied before
each test. With it:

>>> SendEmailJob(to="a@b.c").enqueue()
>>> [task] = enqueued(SendEmailJob, to="a@b.c")
>>> [ran] = drain()                   # runs it here, through the runner's own scripts
>>> perform_now(SendEmailJob(to="a@b.c"))   # perform alone, with the real codecs

See docs/testing.md.
"""

from .attempts import Attempt, AttemptFailed, DrainError, DrainTimeout
from .draining import adrain, drain
from .enqueued_tasks import aenqueued, enqueued
from .perform import aperform_now, perform_now
from .periodic import arun_periodic, run_periodic

__all__ = [
    "Attempt",
    "AttemptFailed",
    "DrainError",
    "DrainTimeout",
    "adrain",
    "aenqueued",
    "aperform_now",
    "arun_periodic",
    "drain",
    "enqueued",
    "perform_now",
    "run_periodic",
]
