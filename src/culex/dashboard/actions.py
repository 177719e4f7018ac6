"""The actions (POST): each checks read-only mode and its CSRF token first, acts through
culex's public procedures, and sends the browser back (303) with what it did."""

from __future__ import annotations

from starlette.datastructures import FormData
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from .._redis.interventions import CANCELLED, CANCELLING
from .._redis.keys import check_queue_name
from ..errors import short
from ..jobs import periodic
from ..operations import bulk as bulk_actions
from ..operations import queue_control
from ..server.procedures import run_async
from . import security
from .listing import MAX_LIMIT, Query
from .pages import ACTIONS, addressed_task, task_address
from .templating import path_for

CANCEL_REASON = "from the dashboard"


async def task_action(request: Request) -> Response:
    form = await request.form()
    refused = security.refusal(request, form.get(security.CSRF_FIELD))
    if refused is not None:
        return refused
    name, task_id = task_address(request)
    action = request.path_params["action"]
    task = addressed_task(request, name, task_id)
    if action == "retry":
        done = await task.aretry()
    elif action == "run_now":  # (a scheduled task: ready now, refused in any other state)
        done = await task.arun_now()
        if request.query_params.get("back") == "scheduled":  # (from the scheduled tab)
            url = path_for(request, "queue").include_query_params(
                queue=name, state="scheduled", done="run_now" if done else "refused", id=task_id
            )
            return RedirectResponse(str(url), status_code=303)
    elif action == "cancel":
        outcome = await run_async(task.cancel_procedure(CANCEL_REASON), task.url)
        if outcome == CANCELLING:  # a running task: its runner stops it
            action = "cancelling"
        done = outcome in (CANCELLED, CANCELLING)
    elif action == "delete":
        settings = request.app.state.settings
        count = await bulk_actions.aapply("delete", name, settings, ids=[task_id])
        url = path_for(request, "queue").include_query_params(
            queue=name, done="delete" if count else "refused", count=str(count)
        )
        return RedirectResponse(str(url), status_code=303)
    else:
        raise HTTPException(404, f"no such action: {action}")
    url = path_for(request, "task").include_query_params(
        queue=name, id=task_id, done=action if done else "refused"
    )
    return RedirectResponse(str(url), status_code=303)


async def bulk(request: Request) -> Response:
    """An action on the ticked tasks, or on every task the page's filter matches."""
    form = await request.form()
    refused = security.refusal(request, form.get(security.CSRF_FIELD))
    if refused is not None:
        return refused
    name = _form_queue(form)
    query = Query.parse({k: v for k, v in form.items() if isinstance(v, str)})
    asked = form.get("action")
    action = next((one for one in ACTIONS.get(query.state, ()) if one == asked), None)
    if action is None:
        raise HTTPException(400, f"{short(asked)} cannot be done to {query.state} tasks")
    ids = _ids(form)
    everything = form.get("scope") == "filter"
    if everything and query.searched:
        raise HTTPException(400, "a search or a kind of task is not acted on at once: tick them")
    if not ids and not everything:
        raise HTTPException(400, "tick some tasks first, or choose every matching task")
    count = await _apply(request, name, action, None if everything else ids)
    url = path_for(request, "queue").include_query_params(
        queue=name, **query.params(cursor=None), done=str(action), count=str(count)
    )
    return RedirectResponse(str(url), status_code=303)


async def _apply(
    request: Request, queue: str, action: bulk_actions.Action, ids: list[str] | None
) -> int:
    """``action`` on ``ids``, or (None) on every task the page's query matches."""
    query = Query.parse({k: v for k, v in (await request.form()).items() if isinstance(v, str)})
    return await bulk_actions.aapply(
        action,
        queue,
        request.app.state.settings,
        ids=ids,
        state=query.state,
        job=(query.job or None) if ids is None else None,
    )


def _ids(form: FormData) -> list[str]:
    ids = [value for value in form.getlist("id") if isinstance(value, str)]
    if len(ids) > MAX_LIMIT:
        raise HTTPException(400, f"at most {MAX_LIMIT} tasks at a time")
    return ids


async def trigger(request: Request) -> Response:
    """Enqueue a run of a periodic job now (its slots are left alone)."""
    form = await request.form()
    refused = security.refusal(request, form.get(security.CSRF_FIELD))
    if refused is not None:
        return refused
    name, job = _form_queue(form), form.get("job")
    if not isinstance(job, str):
        raise HTTPException(400, "which job? (a job field)")
    try:
        task = await periodic.atrigger(job, name, settings=request.app.state.settings)
    except (TypeError, ValueError, periodic.UnknownPeriodicJob) as exc:
        raise HTTPException(404, str(exc)) from None
    except periodic.PeriodicJobPaused as exc:
        raise HTTPException(409, str(exc)) from None
    url = path_for(request, "periodic").include_query_params(
        done="trigger", queue=task.queue, id=task.id
    )
    return RedirectResponse(str(url), status_code=303)


async def periodic_pause(request: Request) -> Response:
    """Pause or resume a periodic job (a paused one enqueues nothing until resumed)."""
    form = await request.form()
    refused = security.refusal(request, form.get(security.CSRF_FIELD))
    if refused is not None:
        return refused
    name, job, action = _form_queue(form), form.get("job"), request.path_params["action"]
    if not isinstance(job, str):
        raise HTTPException(400, "which job? (a job field)")
    if action not in ("pause", "resume"):
        raise HTTPException(404, f"no such action: {action}")
    act = periodic.apause if action == "pause" else periodic.aresume
    try:
        await act(job, name, settings=request.app.state.settings)
    except (TypeError, ValueError, periodic.UnknownPeriodicJob) as exc:
        raise HTTPException(404, str(exc)) from None
    url = path_for(request, "periodic").include_query_params(done=f"periodic_{action}", job=job)
    return RedirectResponse(str(url), status_code=303)


async def steer(request: Request) -> Response:
    """Pause or resume a queue (flow control: it keeps taking tasks, and runs none)."""
    form = await request.form()
    refused = security.refusal(request, form.get(security.CSRF_FIELD))
    if refused is not None:
        return refused
    name, action = _form_queue(form), request.path_params["action"]
    settings = request.app.state.settings
    if action == "pause":
        await queue_control.apause(name, settings)
    elif action == "resume":
        await queue_control.aresume(name, settings)
    else:
        raise HTTPException(404, f"no such action: {action}")
    url = path_for(request, "queue").include_query_params(queue=name, done=action)
    return RedirectResponse(str(url), status_code=303)


def _form_queue(form: FormData) -> str:
    try:
        return check_queue_name(form.get("queue", ""))
    except (TypeError, ValueError) as exc:
        raise HTTPException(404, str(exc)) from None
