"""Pages from templates: one Jinja environment per app, autoescaped everywhere."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
from starlette.applications import Starlette
from starlette.datastructures import URL
from starlette.requests import Request
from starlette.responses import Response
from starlette.templating import Jinja2Templates

from ..operations import runs
from . import formatting, security

HERE = Path(__file__).resolve().parent


def templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,  # every page, every value: nothing a task carries is marked safe
        undefined=jinja2.StrictUndefined,
        # (every value as a page can hold it: bytes a producer wrote that are not UTF-8 are
        # shown as U+FFFD, never a page that fails to encode)
        finalize=formatting.readable,
    )
    env.filters.update(
        date=formatting.date,
        ago=formatting.ago,
        span=formatting.span,
        cut=formatting.cut,
        first_line=formatting.first_line,
        pretty_json=formatting.pretty_json,
        after_shown=runs.after_shown,  # (a node's upstreams: a few names, then how many more)
        folded=formatting.folded_traceback,
    )
    env.globals["url_for"] = _url_for
    return Jinja2Templates(env=env)


def path_for(request: Request, name: str, **params: str) -> URL:
    """The URL of a route of this dashboard as a path under its mount's prefix, with no
    scheme or host (right behind a proxy whatever Host it sends). Looked up in the
    dashboard's own routes: ``request.url_for`` would search the outermost app's, where
    another mount may hold a route of the same name."""
    dashboard: Starlette = request.scope["app"]
    inner = dashboard.router.url_path_for(name, **params)
    return URL(request.scope.get("root_path", "").rstrip("/") + str(inner))


class _ReadableURL(URL):
    """A URL whose query takes any text a record holds (formatting.readable): a queue name
    or an id that is not UTF-8 links to its name as shown, not to a page that fails."""

    def include_query_params(self, **params: Any) -> URL:
        readable = {name: formatting.readable(value) for name, value in params.items()}
        return URL(str(super().include_query_params(**readable)))


@jinja2.pass_context
def _url_for(context: dict[str, Any], name: str, /, **params: str) -> URL:
    return _ReadableURL(str(path_for(context["request"], name, **params)))


def render(request: Request, name: str, context: dict[str, Any], status: int = 200) -> Response:
    """A page from its template, with what every page needs (the CSRF token, read-only)."""
    templates: Jinja2Templates = request.app.state.templates
    response = templates.TemplateResponse(
        request,
        name,
        {
            **context,
            "csrf": security.csrf_token(request),
            "csrf_field": security.CSRF_FIELD,
            "read_only": request.app.state.read_only,
        },
        status_code=status,
    )
    security.set_cookie(request, response)
    response.headers["cache-control"] = "no-store"
    return response
