"""A queue's activity: its newest task events (docs/events.md), newest first, refreshed
live as the other pages are (static/app.js swaps the ``data-live`` part)."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..jobs.events import arecent_events
from .pages import queue_name
from .templating import render

SHOWN = 100  # events on the page


async def activity(request: Request) -> Response:
    """``/activity?queue=``: the queue's last SHOWN events (none while events are off)."""
    name = queue_name(request)
    settings = request.app.state.settings
    found = await arecent_events(name, SHOWN, settings=settings)
    return render(
        request,
        "activity.html",
        {"queue": name, "events": found, "shown": SHOWN, "on": settings.events, "page": "queues"},
    )
