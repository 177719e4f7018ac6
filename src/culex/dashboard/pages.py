"""The pages (GET): each reads through culex's public procedures, never Redis itself."""

from __future__ import annotations

import contextlib
import time
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import PlainTextResponse, RedirectResponse, Response

from .._redis.calls import number
from .._redis.keys import check_queue_name
from ..jobs import task_logs
from ..jobs.failures import attempt_errors
from ..jobs.task import Task, check_id
from ..middleware.encryption import is_encrypted, shown_params
from ..operations import durable_view, inspection, queue_control, stats
from ..operations.browsing import retries
from ..operations.bulk import Action
from . import formatting, listing, workflow_pages
from .templating import path_for, render

# Which actions each state allows.
ACTIONS: dict[str, tuple[Action, ...]] = {
    "dead": ("retry", "delete"),
    "waiting": ("cancel", "delete"),
    "scheduled": ("cancel", "delete"),
}
# What each action does, as a confirmation names it, and whether it can be undone.
VERBS = {"retry": ("Retry", True), "delete": ("Delete", False), "cancel": ("Cancel", False)}

# The fields of a task's record that hold a time (ms since the epoch), in the order shown.
TIMES = ("enqueue_time", "due_at", "started_at", "failed_at", "finished_at", "retried_at", "slot",
         "retry_later_at")  # fmt: skip
# The fields shown whole as text by the "show all" links (never as HTML).
TEXT_FIELDS = ("params", "result", "last_error")


# The overview's queue table shows this many queues a page (by name, through ?after=).
QUEUES_SHOWN = 50


async def overview(request: Request) -> Response:
    """The queues, a page of them by name; the totals and the last hour are those of the
    page's queues (every queue, when one page holds them all): each read is bounded by the
    page, whatever the number of queues (docs/dashboard.md, "How fast")."""
    settings = request.app.state.settings
    shown = await inspection.aqueue_page(
        settings, after=request.query_params.get("after") or None, limit=QUEUES_SHOWN
    )
    names = shown.names
    counts = await inspection.aqueue_counts(settings, names) if names else {}
    latency = await inspection.aqueue_latency(settings, names) if names else {}
    controls = await queue_control.acontrols(settings, names) if names else {}
    totals = {state: sum(row[state] for row in counts.values()) for state in inspection.STATES}
    at_work = await inspection.arunners(settings)
    counted = nameable(names)
    hour = await stats.asummary(settings, queues=counted, window=3600) if counted else {}
    queues: list[dict[str, Any]] = [
        {
            "name": name,
            **row,
            "latency": latency.get(name, 0.0),
            "paused": name in controls and controls[name].paused,
            "hour": hour.get(name) or stats.Counts(),
        }
        for name, row in counts.items()
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
            "shown": shown,
            "after": request.query_params.get("after") or "",
            "page": "overview",
        },
    )


async def runners(request: Request) -> Response:
    settings = request.app.state.settings
    found = await inspection.arunners(settings)
    unserved = await inspection.aunserved(settings)
    now_ms = time.time() * 1000
    for runner in found:
        for task in runner["tasks"]:
            task["running_s"] = max(0.0, (now_ms - (task.get("started") or now_ms)) / 1000)
        # (the titles of the features in use that it cannot serve, for its card's badge)
        lacks = {
            one.feature.title: None
            for one in unserved
            for r in one.runners
            if r["id"] == runner["id"]
        }
        runner["lacks"] = list(lacks)
    return render(
        request, "runners.html", {"runners": found, "unserved": unserved, "page": "runners"}
    )


async def queue(request: Request) -> Response:
    name = queue_name(request)
    query = listing.Query.parse(request.query_params)
    if query.search and not query.cursor:
        found = await _search_id(request, name, query)
        if found is not None:
            return found
    settings = request.app.state.settings
    counts = (await inspection.aqueue_counts(settings, [name]))[name]
    # The dead tab offers the queues that hold dead tasks in a selector (DEAD_CHOICES first
    # by name): one ZCARD a queue, a round trip per batch of them.
    everyone: dict[str, dict[str, int]] = {}
    if query.state == "dead":
        held = await inspection.aqueues_holding("dead", settings, limit=DEAD_CHOICES)
        everyone = {q: {"dead": n} for q, n in held.items()}
        everyone[name] = counts
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
            "verbs": VERBS,
            "limits": listing.LIMITS,
            "page": "dead" if request.query_params.get("from_dead") else "queues",
            "unserved": await inspection.aunserved(settings, [name]),
            "no_runner": await inspection.ano_runner(settings, [name]),
        },
    )


async def periodic(request: Request) -> Response:
    """Every periodic job a runner's scheduler has recorded: schedule, next and last run."""
    rows = await inspection.aperiodic_jobs(request.app.state.settings)
    return render(request, "periodic.html", {"jobs": rows, "page": "periodic"})


# The dead tab's selector and the Dead page offer this many queues holding dead tasks.
DEAD_CHOICES = 500


async def dead(request: Request) -> Response:
    """Every queue's dead tasks, newest first (the DEAD_QUEUES queues with the most, of the
    first DEAD_CHOICES that hold any: one ZCARD a queue, so it stays bounded at 100,000
    queues), a page at a time; with ``?queue=``, the dead tab of that queue."""
    settings = request.app.state.settings
    counts = await inspection.aqueues_holding("dead", settings, limit=DEAD_CHOICES)
    chosen = request.query_params.get("queue")
    if chosen not in counts:
        query = listing.Query.parse({**request.query_params, "state": "dead"})
        try:
            found = await inspection.adead_everywhere(
                counts, settings,
                limit=query.limit, cursor=query.cursor,
            )  # fmt: skip
        except (TypeError, ValueError) as exc:
            raise HTTPException(400, str(exc)) from None
        with_dead = dict(sorted(counts.items()))
        return render(
            request,
            "dead.html",
            {"found": found, "with_dead": with_dead, "query": query, "limits": listing.LIMITS,
             "total": sum(with_dead.values()), "page": "dead"},
        )  # fmt: skip
    shown = formatting.readable(chosen)
    url = path_for(request, "queue").include_query_params(queue=shown, state="dead", from_dead=1)
    return RedirectResponse(str(url), status_code=303)


async def task(request: Request) -> Response:
    name, task_id = task_address(request)
    record = await addressed_task(request, name, task_id).ainfo()
    if not record:
        raise HTTPException(404, f"{name}<{task_id}>: no such task (never enqueued, or expired)")
    if is_encrypted(record.get("params", "")):  # (EncryptedParams': never shown)
        record["params"] = shown_params(record["params"])
    # (a time as stored when no date holds it: formatting.date)
    times = [(field, record[field]) for field in TIMES if record.get(field)]
    context: dict[str, Any] = {"queue": name, "task_id": task_id, "record": record}
    context["times"] = times
    context["workflow"] = workflow_pages.node_links(record)  # (None: no workflow node)
    context["durable"] = _durable(record)  # (None: no durable records)
    context["signalled"] = record.get("state") in SIGNALLED
    errors = attempt_errors(record.get("errors"))[::-1]  # (newest first)
    return render(
        request,
        "task.html",
        {
            **context,
            "progress": _progress(record),
            "retries": _retries(record),
            "errors": errors,
            "logs": task_logs.parse(record.get("logs")),
            "page": "queues",
        },
    )


def _retries(record: dict[str, str]) -> int:
    """The retries the task had (operations.browsing.retries), as its lists count them."""
    state, failures = record.get("state", ""), number(record.get("retry_count"))
    return retries(state, failures, record.get("last_error", ""))


# The states in which a signal can still reach a task (an ended one answers "ended"): its
# page offers the "Send signal" form (durable_pages.send_signal).
SIGNALLED = ("waiting", "scheduled", "pending")


def _durable(record: dict[str, str]) -> dict[str, Any] | None:
    """What the page shows of a durable task (None: it has none of it): its records, what
    it waits for, and the signals kept for it."""
    if not durable_view.is_durable(record):
        return None
    return {
        "records": durable_view.records(record),
        "waiting": durable_view.waiting_for(record),
        "kept": durable_view.kept_signals(record),
    }


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
    said = record.get(field, "")
    if field == "params" and is_encrypted(said):
        said = shown_params(said)
    return PlainTextResponse(said, headers={"cache-control": "no-store"})


async def metrics(request: Request) -> Response:
    """Prometheus text, as ``culex metrics`` serves it (needs prometheus-client)."""
    try:
        from ..operations import metrics as prometheus
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


async def _search_id(request: Request, name: str, query: listing.Query) -> Response | None:
    """A search that is a whole task id opens the task's page when the queue holds it (in
    any state); else None: the page lists the tasks of its state that match the text."""
    try:
        found = await inspection.afind_task(name, query.search, request.app.state.settings)
    except (TypeError, ValueError):
        return None  # (not an id: a text to look for)
    if found is None:
        return None
    url = path_for(request, "task").include_query_params(queue=name, id=found.id)
    return RedirectResponse(str(url), 303)


def nameable(names: list[str]) -> list[str]:
    """The names a queue may have among ``names`` (the registry may hold a foreign
    producer's others: the counters, read by name, pass them by)."""
    found = []
    for name in names:
        with contextlib.suppress(ValueError):
            found.append(check_queue_name(name))
    return found


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
