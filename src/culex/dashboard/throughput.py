"""The overview's throughput chart: processed, failed and dead per minute over the last
hour, or per hour over the last day or week, from culex's counters (``culex.stats``)."""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from ..operations import inspection, stats
from .pages import QUEUES_SHOWN, nameable

# range name -> (its length in seconds, the step of its buckets)
RANGES: dict[str, tuple[int, stats.Step]] = {
    "hour": (3600, "minute"),
    "day": (86400, "hour"),
    "week": (7 * 86400, "hour"),
}
STEP_SECONDS = {"minute": 60, "hour": 3600}
SERIES = ("processed", "failed", "dead")


async def series(request: Request) -> Response:
    """The chart's data as JSON columns: ``t`` (each bucket's start, epoch seconds) and a
    count per bucket for each of processed, failed and dead (``?queue=``, or the queues of
    the overview's page from ``?after=``: every queue when one page holds them all)."""
    name = request.query_params.get("range", "hour")
    if name not in RANGES:
        raise HTTPException(400, f"range must be one of {', '.join(RANGES)}")
    queue = request.query_params.get("queue") or None
    length, step = RANGES[name]
    settings = request.app.state.settings
    if queue is None:  # (the queues of the overview's page: bounded, whatever their number)
        after = request.query_params.get("after") or None
        shown = await inspection.aqueue_page(settings, after=after, limit=QUEUES_SHOWN)
        queues = nameable(shown.names)
    else:
        queues = [queue]
    until = time.time()
    try:
        buckets = await stats.aseries(
            settings,
            queues=queues,
            since=until - length,
            # (given, not the server's now: a week from a moment ago is more than a week)
            until=until,
            step=step,
        )
    except (TypeError, ValueError) as exc:
        raise HTTPException(400, str(exc)) from None
    columns = columns_of(buckets, until - length, until, step)
    return JSONResponse(columns, headers={"cache-control": "no-store"})


def columns_of(
    buckets: Iterable[stats.Bucket], since: float, until: float, step: str
) -> dict[str, Any]:
    """Buckets summed over queues and jobs, one row per step from ``since`` to ``until``
    (a step that counted nothing is a 0, so the lines do not jump over quiet minutes)."""
    size = STEP_SECONDS[step]
    first = int(since // size) * size
    starts = list(range(first, int(until // size) * size + 1, size))
    at = {start: i for i, start in enumerate(starts)}
    columns: dict[str, Any] = {"t": starts, **{name: [0] * len(starts) for name in SERIES}}
    for bucket in buckets:
        i = at.get(int(bucket.start // size) * size)
        if i is None:
            continue
        counts = bucket.counts
        columns["processed"][i] += counts.processed
        columns["failed"][i] += counts.failed
        columns["dead"][i] += counts.dead
    columns["step"] = step
    # The last step holds ``until``: it is still counting (the chart leaves it out of its
    # lines, which would dip at every refresh; its counts are here all the same).
    columns["partial"] = until < starts[-1] + size
    return columns
