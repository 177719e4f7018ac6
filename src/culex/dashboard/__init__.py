"""The culex dashboard: queues, tasks, runners and dead tasks in a browser, live.

Needs the ``dashboard`` extra (``pip install 'culex[dashboard]'``); see docs/dashboard.md."""

from .application import app

__all__ = ["app"]
