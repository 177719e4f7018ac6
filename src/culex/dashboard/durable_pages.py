"""The "Send signal" form of a task's page (POST ``/task/signal?queue=&id=``: CSRF-checked,
refused in read-only mode). What the page shows of a durable task is read in pages.task,
by culex.operations.durable_view (as ``culex task`` reads it)."""

from __future__ import annotations

import json

from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from . import pages, security
from .templating import path_for


async def send_signal(request: Request) -> Response:
    """Send the form's signal (``name``, and ``value``: JSON text, empty for null), then
    back to the task's page, which says the reply (``done=signal_<reply>``) or why nothing
    was sent (``signal_not_json``: the value is not JSON; ``signal_refused``: a name or a
    value culex takes not)."""
    form = await request.form()
    refused = security.refusal(request, form.get(security.CSRF_FIELD))
    if refused is not None:
        return refused
    name, task_id = pages.task_address(request)
    signal, text = form.get("name"), form.get("value")
    signal = signal if isinstance(signal, str) else ""
    text = text.strip() if isinstance(text, str) else ""
    try:
        value = json.loads(text) if text else None
    except (ValueError, RecursionError):
        return _back(request, name, task_id, "signal_not_json", signal)
    try:
        reply = await pages.addressed_task(request, name, task_id).asignal(signal, value)
    except (TypeError, ValueError):
        return _back(request, name, task_id, "signal_refused", signal)
    return _back(request, name, task_id, f"signal_{reply}", signal)


def _back(request: Request, queue: str, task_id: str, done: str, signal: str) -> Response:
    url = path_for(request, "task").include_query_params(
        queue=queue, id=task_id, done=done, signal=signal[:200]
    )
    return RedirectResponse(str(url), status_code=303)
