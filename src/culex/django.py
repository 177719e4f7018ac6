"""Django's database connections around each task (docs/django.md).

A Django request closes the connections that are too old or broken when it starts and when
it ends; a runner has no requests, so a task of a long-lived runner process would go on
using a connection the database closed hours ago ("server has gone away"). Jobs that use
the ORM take this mixin, which does what a request does, in the thread perform runs in:

    class SendReceiptJob(CloseOldConnections, culex.QueuedJob):
        ...
"""

from __future__ import annotations

from typing import Any

from django.db import close_old_connections


class CloseOldConnections:
    """Closes the thread's old or broken Django connections before and after perform.

    Put it before the job's base class. A job that defines its own ``before_perform`` or
    ``after_perform`` calls ``super()`` in it."""

    def before_perform(self) -> None:
        close_old_connections()
        parent: Any = super()
        parent.before_perform()

    def after_perform(self) -> None:
        try:
            parent: Any = super()
            parent.after_perform()
        finally:
            close_old_connections()
