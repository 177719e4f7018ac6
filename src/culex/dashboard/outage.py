"""What the dashboard answers while its Redis server cannot be reached (refused, timed
out, loading, a login refused...): 503 and why, with the server's URL masked; a page for a
browser (it loads itself again every few seconds, so it comes back by itself once the
server answers), JSON for the JSON endpoints, text for the text ones. Every request tries
the server anew: nothing to restart. One log line per failure, no traceback."""

from __future__ import annotations

import logging

from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response

from ..errors import ServerUnavailable
from .templating import render

logger = logging.getLogger("culex.dashboard")

RETRY_AFTER = 5  # seconds: how soon a browser showing the page loads it again

# The routes that answer JSON, and those that answer text (the others answer HTML).
JSON_ROUTES = frozenset({"series"})
TEXT_ROUTES = frozenset({"metrics", "task_text"})


async def unreachable(request: Request, exc: Exception) -> Response:
    """The exception handler of ServerUnavailable, for every route."""
    reason = str(exc) if isinstance(exc, ServerUnavailable) else "the Redis server is down"
    logger.warning("%s %s: %s", request.method, request.url.path, reason)
    headers = {"retry-after": str(RETRY_AFTER), "cache-control": "no-store"}
    route = _route_name(request)
    if route in JSON_ROUTES or "application/json" in request.headers.get("accept", ""):
        return JSONResponse({"error": reason}, 503, headers=headers)
    if route in TEXT_ROUTES:
        return PlainTextResponse(f"culex: {reason}\n", 503, headers=headers)
    response = render(
        request, "unreachable.html", {"detail": reason, "page": "", "retry": RETRY_AFTER}, 503
    )
    response.headers.update({**headers, "refresh": str(RETRY_AFTER)})
    return response


def _route_name(request: Request) -> str:
    route = request.scope.get("route")
    return str(getattr(route, "name", "") or "")
