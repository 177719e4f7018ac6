"""The pages (GET): each reads through culex's public flows, never Redis itself."""

from __future__ import annotations

import time
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from .. import inspection, queue_control, stats
from .._redis.keys import check_queue_name
from ..errors import short
from ..failures import attempt_errors
from ..task import Task, check_id
from . import formatting, listing
from .templating import path_for, render

# Which actions each state allows.
ACTIONS = {
    "dead": ("retry", "delete"),
    "waiting": ("cancel", "delete"),
    "scheduled": ("cancel", "delete"),
}

# The fields of a task's record that hold a time (ms since the epoch), in the order shown.
TIMES = ("enqueue_time", "due_at", "started_at", "failed_at", "finished_at", "retried_at", "slot",
         "retry_later_at")  # fmt: skip
# The fields shown whole as text by the "show all" links (never as HTML).
TEXT_FIELDS = ("params", "result", "last_error")


async def overview(request: Request) -> Response:
    settings = request.app.state.settings
    counts = await inspection.aqueue_counts(settings)
    latency = await inspection.aqueue_latency(settings, list(counts)) if counts else {}
    controls = await queue_control.acontrols(settings, list(counts)) if counts else {}
    totals = {state: sum(row[state] for row in counts.values()) for state in inspection.STATES}
    at_work = await inspection.arunners(settings)
    hour = await stats.asummary(settings, window=3600)
    queues: list[dict[str, Any]] = [
        {
            "name": name,
            **row,
            "latency": latency.get(name, 0.0),
            "paused": name in controls and controls[name].paused,
            "hour": hour.get(name) or stats.Counts(),
        }
        for name, row in sorted(counts.items())
    ]
    last_hour = sum(hour.values(), stats.Counts())
    return render(
        request,
        "overview.html",
        {
            "queues": queues,
            "totals": totals,
            "runners": at_work,
            "last_hour": last_hour,
            "page": "overview",
        },
    )


async def runners(request: Request) -> Response:
    found = await inspection.arunners(request.app.state.settings)
    now_ms = time.time() * 1000
    for runner in found:
        for task in runner["tasks"]:
            task["running_s"] = max(0.0, (now_ms - (task.get("started") or now_ms)) / 1000)
    return render(request, "runners.html", {"runners": found, "page": "runners"})


async def queue(request: Request) -> Response:
    name = queue_name(request)
    query = listing.Query.parse(request.query_params)
    if query.search:
        return await _search_id(request, name, query)
    settings = request.app.state.settings
    # The dead tab offers every queue in a selector: it reads them all.
    everyone = await inspection.aqueue_counts(settings, None if query.state == "dead" else [name])
    counts = everyone.get(name) or (await inspection.aqueue_counts(settings, [name]))[name]
    control = (await queue_control.acontrols(settings, [name]))[name]
    _, in_force = (await queue_control.alimits_in_force(settings, [name]))[name]
    return render(
        request,
        "queue.html",
        {
            "queue": name,
            "control": control,
            "in_force": [one for one in in_force if one.set_or_declared],
            "counts": counts,
            "all_counts": everyone if query.state == "dead" else {},
            "query": query,
            "listing": await listing.page(name, query, settings),
            "actions": ACTIONS,
            "limits": listing.LIMITS,
            "page": "dead" if request.query_params.get("from_dead") else "queues",
        },
    )


async def periodic(request: Request) -> Response:
    """Every periodic job a runner's scheduler has recorded: schedule, next and last run."""
    rows = await inspection.aperiodic_jobs(request.app.state.settings)
    return render(request, "periodic.html", {"jobs": rows, "page": "periodic"})


async def dead(request: Request) -> Response:
    """Every queue's dead tasks: the dead tab of the chosen queue (the first with any)."""
    counts = await inspection.aqueue_counts(request.app.state.settings)
    chosen = request.query_params.get("queue")
    if chosen not in counts:
        # (a queue whose name is not UTF-8 last: its page, at its name as shown, finds none)
        with_dead = sorted(
            (formatting.readable(q) != q, q) for q, row in counts.items() if row["dead"]
        )
        chosen = with_dead[0][1] if with_dead else None
    if chosen is None:
        return render(request, "dead.html", {"counts": counts, "page": "dead"})
    shown = formatting.readable(chosen)
    url = path_for(request, "queue").include_query_params(queue=shown, state="dead", from_dead=1)
    return RedirectResponse(str(url), status_code=303)


async def task(request: Request) -> Response:
    name, task_id = task_address(request)
    record = await addressed_task(request, name, task_id).ainfo()
    if not record:
        raise HTTPException(404, f"{name}<{task_id}>: no such task (never enqueued, or expired)")
    # (a time as stored when no date holds it: formatting.date)
    times = [(field, record[field]) for field in TIMES if record.get(field)]
    context = {"queue": name, "task_id": task_id, "record": record, "times": times}
    errors = attempt_errors(record.get("errors"))[::-1]  # (newest first)
    return render(
        request,
        "task.html",
        {**context, "progress": _progress(record), "errors": errors, "page": "queues"},
    )


def _progress(record: dict[str, str]) -> dict[str, Any] | None:
    """The task's last progress as the page shows it (None: none reported): a percentage
    from 0 to 100 and its label, the job's message, and when it was reported (ms)."""
    try:
        fraction = float(record.get("progress", ""))
    except ValueError:
        return None
    if not 0 <= fraction <= 1:  # (also NaN: progress.lua stores none of these)
        return None
    at = record.get("progress_at", "")
    return {
        "percent": round(fraction * 100, 1),
        "label": f"{fraction:.0%}",
        "message": record.get("progress_message", ""),
        "at": at if at.isdigit() else None,
    }


async def task_text(request: Request) -> Response:
    """One long field of a task, whole, as plain text (the "show all" of params, errors)."""
    name, task_id = task_address(request)
    field = request.query_params.get("field", "")
    if field not in TEXT_FIELDS:
        raise HTTPException(404, f"no such field: {field}")
    record = await addressed_task(request, name, task_id).ainfo()
    if not record:
        raise HTTPException(404, f"{name}<{task_id}>: no such task (never enqueued, or expired)")
    return PlainTextResponse(record.get(field, ""), headers={"cache-control": "no-store"})


async def metrics(request: Request) -> Response:
    """Prometheus text, as ``culex metrics`` serves it (needs prometheus-client)."""
    try:
        from .. import metrics as prometheus
    except ImportError as exc:
        return PlainTextResponse(
            f"/metrics needs prometheus-client ({exc}): pip install 'culex[dashboard]'", 501
        )
    text = await prometheus.arender(request.app.state.settings)
    return Response(text, media_type=prometheus.CONTENT_TYPE)


async def not_found(request: Request, exc: Exception) -> Response:
    detail = exc.detail if isinstance(exc, HTTPException) else "not found"
    return render(request, "missing.html", {"detail": detail, "page": ""}, status=404)


async def refused(request: Request, exc: Exception) -> Response:
    """A read Redis refused (down, or a key of another type where culex keeps a hash or a
    set, as another program may have written it): a 503 that says why, not a bare 500."""
    return render(request, "refused.html", {"detail": str(exc), "page": ""}, status=503)


async def _search_id(request: Request, name: str, query: listing.Query) -> Response:
    """A search by id opens the task's page when the queue holds it."""
    try:
        found = await inspection.afind_task(name, query.search, request.app.state.settings)
    except (TypeError, ValueError) as exc:
        raise HTTPException(404, str(exc)) from None
    if found is None:
        raise HTTPException(
            404, f"no task {short(query.search)} in {name} (never enqueued, or expired)"
        )
    url = path_for(request, "task").include_query_params(queue=name, id=found.id)
    return RedirectResponse(str(url), 303)


def queue_name(request: Request) -> str:
    """The queue a page or an action is about (``?queue=``), checked."""
    try:
        return check_queue_name(request.query_params.get("queue", ""))
    except ValueError as exc:
        raise HTTPException(404, str(exc)) from None


def addressed_task(request: Request, queue: str, task_id: str) -> Task:
    """A handle on a task, on the app's server and under its prefix."""
    settings = request.app.state.settings
    return Task(task_id, queue, settings.redis_url, prefix=settings.prefix)


def task_address(request: Request) -> tuple[str, str]:
    """The queue and id of the task a page or an action is about (``?queue=&id=``)."""
    name = queue_name(request)
    try:
        return name, check_id(request.query_params.get("id", ""))
    except ValueError as exc:
        raise HTTPException(404, str(exc)) from None
