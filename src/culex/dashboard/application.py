"""The dashboard's ASGI app: its routes, templates and state (on the app, nothing global)."""

from __future__ import annotations

from pathlib import Path

from starlette.applications import Starlette
from starlette.middleware import Middleware
from starlette.routing import BaseRoute, Mount, Route
from starlette.staticfiles import StaticFiles

from .. import config
from ..errors import ServerError, ServerUnavailable
from . import (
    actions,
    activity,
    durable_pages,
    outage,
    pages,
    security,
    templating,
    throughput,
    workflow_pages,
)

HERE = Path(__file__).resolve().parent


def app(
    settings: config.Settings | None = None,
    *,
    read_only: bool = False,
    basic_auth: tuple[str, str] | None = None,
    secret: str | None = None,
) -> Starlette:
    """The culex dashboard, an ASGI app to serve (``culex dashboard``) or to mount in your
    own (``app.mount("/culex", culex.dashboard.app())``) behind your own auth.

    ``settings``: the server to look at (default: culex's configured settings, read now).
    ``read_only``: no actions; every POST is refused with 403. ``basic_auth``: (user,
    password) that every request must give. ``secret``: the key of the CSRF tokens (at
    least 16 characters; default: random per app, so tokens end when the process does)."""
    if settings is not None and not isinstance(settings, config.Settings):
        raise TypeError(f"settings must be a culex.config.Settings, got {type(settings).__name__}")
    if not isinstance(read_only, bool):
        raise TypeError(f"read_only must be a bool, got {type(read_only).__name__}")
    credentials = security.check_credentials(basic_auth)
    key = security.check_secret(secret)
    dashboard = Starlette(
        routes=_routes(),
        middleware=[Middleware(security.Guard, credentials=credentials)],
        # (the server out of reach: a page that says so and reloads; another refusal:
        # pages.refused says the server's reason)
        exception_handlers={
            404: pages.not_found,
            ServerUnavailable: outage.unreachable,
            ServerError: pages.refused,
        },
    )
    dashboard.state.settings = settings or config.settings()
    dashboard.state.read_only = read_only
    dashboard.state.secret = key
    dashboard.state.templates = templating.templates()
    return dashboard


def _routes() -> list[BaseRoute]:
    return [
        Route("/", pages.overview, name="overview"),
        Route("/runners", pages.runners, name="runners"),
        Route("/series", throughput.series, name="series"),
        Route("/metrics", pages.metrics, name="metrics"),
        Route("/dead", pages.dead, name="dead"),
        Route("/periodic", pages.periodic, name="periodic"),
        Route("/periodic/trigger", actions.trigger, methods=["POST"], name="trigger"),
        Route(
            "/periodic/{action}",
            actions.periodic_pause,
            methods=["POST"],
            name="periodic_pause",
        ),
        # Queue names and task ids go in the query: either may hold "/", "?" or "#".
        Route("/queue", pages.queue, name="queue"),
        Route("/activity", activity.activity, name="activity"),
        Route("/queue/bulk", actions.bulk, methods=["POST"], name="bulk"),
        Route("/queue/{action}", actions.steer, methods=["POST"], name="steer"),
        Route("/task", pages.task, name="task"),
        Route("/task/text", pages.task_text, name="task_text"),
        Route("/task/signal", durable_pages.send_signal, methods=["POST"], name="signal"),
        Route("/task/{action}", actions.task_action, methods=["POST"], name="task_action"),
        # A workflow run, by its id (?id=): there is no list of runs to browse.
        Route("/workflow", workflow_pages.run, name="workflow"),
        Route(
            "/workflow/{action}",
            workflow_pages.run_action,
            methods=["POST"],
            name="workflow_action",
        ),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
