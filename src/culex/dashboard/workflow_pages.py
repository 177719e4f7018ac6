"""The workflow run page (GET ``/workflow?id=``), its Cancel and Retry (POST), and what a
node's task page shows of its run. Runs are read and steered through operations/runs.py,
never Redis itself; there is no list of runs (nothing grows with the runs ever made), so
a run is opened by its id: from a node's task page, or the overview's "open run" form."""

from __future__ import annotations

import json
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from ..jobs.task import check_id
from ..operations import inspection, runs
from ..workflows.run import WorkflowError, WorkflowNotFound
from . import security
from .templating import path_for, render


async def run(request: Request) -> Response:
    """A run: its record, its counts by state, its nodes a row per depth, Cancel, Retry. A
    run of more than runs.PAGE nodes shows them a page at a time (``?offset=``)."""
    run_id = _run_id(request)
    offset = _offset(request)
    shown = await _overview(request, run_id)
    nodes = shown.page(offset, runs.PAGE)
    paged = {
        "levels": runs.levels(nodes),
        "offset": offset,
        "shown": len(nodes),
        "previous": max(0, offset - runs.PAGE) if offset else None,
        "next": offset + runs.PAGE if offset + runs.PAGE < len(shown.nodes) else None,
    }
    # (a running run whose nodes wait on a queue no runner serves: said, as its wait says it)
    ended = ("succeeded", "dead", runs.EXPIRED)
    left = sorted({n.queue for n in shown.nodes if n.state not in ended})
    settings = request.app.state.settings
    no_runner = await inspection.ano_runner(settings, left) if shown.state == "running" else []
    return render(
        request,
        "workflow.html",
        {"run": shown, "page": "", "paged": paged, "no_runner": no_runner},
    )


async def run_action(request: Request) -> Response:
    """Cancel (a running run) or retry (a run ended failed or cancelled), then back to the
    run's page, which says what was done (``done=run_cancel``, ``run_retry`` or
    ``run_refused``: the run was no longer in a state that allows it)."""
    form = await request.form()
    refused = security.refusal(request, form.get(security.CSRF_FIELD))
    if refused is not None:
        return refused
    run_id = _run_id(request)
    action = request.path_params["action"]
    settings = request.app.state.settings
    count: dict[str, str] = {}
    try:
        if action == "cancel":
            done = await runs.acancel_run(run_id, settings)
        elif action == "retry":
            count["count"] = str(await runs.aretry_run(run_id, settings))
            done = True
        else:
            raise HTTPException(404, f"no such action: {action}")
    except WorkflowNotFound as exc:
        raise HTTPException(404, str(exc)) from None
    except WorkflowError:  # (a retry of a run that has not ended)
        done = False
    url = path_for(request, "workflow").include_query_params(
        id=run_id, done=f"run_{action}" if done else "run_refused", **count
    )
    return RedirectResponse(str(url), status_code=303)


def node_links(record: dict[str, str]) -> dict[str, Any] | None:
    """What a task page shows of the task's workflow run (None: it is no workflow node):
    the run's id, the node's name, its upstreams (queue, id, name) and its downstreams
    (queue, id), as its hash's ``up`` and ``down`` hold them. A list that is not such JSON
    (a foreign producer's) is shown as none, never a page that fails."""
    run_id = record.get("run")
    if not run_id:
        return None
    return {
        "run": run_id,
        "node": record.get("node", ""),
        "up": _pairs(record.get("up"), 3),
        "down": _pairs(record.get("down"), 2),
    }


def _pairs(text: str | None, size: int) -> list[list[str]]:
    try:
        found = json.loads(text or "[]")
    except (ValueError, RecursionError):
        return []
    if not isinstance(found, list):
        return []
    return [
        [*item[:size], *[""] * (size - len(item[:size]))]  # (a name missing: "")
        for item in found
        if isinstance(item, list) and len(item) >= 2 and all(isinstance(p, str) for p in item)
    ]


async def _overview(request: Request, run_id: str) -> runs.RunOverview:
    try:
        return await runs.arun_overview(run_id, request.app.state.settings)
    except WorkflowNotFound as exc:
        raise HTTPException(404, str(exc)) from None


def _offset(request: Request) -> int:
    """The page's first node (``?offset=``, 0 when not given), checked."""
    given = request.query_params.get("offset", "0").strip() or "0"
    if not given.isdigit() or len(given) > 9:
        raise HTTPException(404, f"offset is a whole number from 0: {given[:40]!r}")
    return int(given)


def _run_id(request: Request) -> str:
    """The run a page or an action is about (``?id=``), checked."""
    given = request.query_params.get("id", "").strip()
    try:
        return check_id(given)
    except ValueError:
        raise HTTPException(
            404, f"no workflow run id given, or not one: {given[:200]!r} (open a run by its id)"
        ) from None
