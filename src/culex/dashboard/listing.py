"""A queue page's list of tasks: the query in its URL (state, order, page, filters) and the
page of rows it reads, bounded (at most MAX_LIMIT rows a page)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from starlette.exceptions import HTTPException

from .. import config, dead
from ..inspection import STATES

LIMITS = (25, 50, 100)
MAX_LIMIT = max(LIMITS)
# Whether a list can be filtered by job type.
FILTER_BY_JOB = False


@dataclass(frozen=True)
class Row:
    """One task in a list, as the templates show it."""

    id: str
    job: str
    at_ms: float  # when it entered its state (died, due, ...), ms since the epoch
    retry_count: int
    attempt: int
    error: str


@dataclass(frozen=True)
class Page:
    rows: list[Row] | None  # None: this state cannot be listed here
    next_cursor: str | None


@dataclass(frozen=True)
class Query:
    """What a queue page lists, from its URL; a bad value is a 400, not a guess."""

    state: str = "waiting"
    newest_first: bool = True
    cursor: str | None = None
    limit: int = 50
    job: str = ""
    search: str = ""

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> Query:
        state = params.get("state", "waiting")
        if state not in STATES:
            raise HTTPException(400, f"state must be one of {', '.join(STATES)}")
        order = params.get("order", "newest")
        if order not in ("newest", "oldest"):
            raise HTTPException(400, "order must be newest or oldest")
        cursor = params.get("cursor") or None
        if cursor is not None and (len(cursor) > 200 or not cursor.isprintable()):
            raise HTTPException(400, "bad cursor")
        try:
            limit = int(params.get("limit", "50"))
        except ValueError:
            raise HTTPException(400, "limit must be a whole number") from None
        return cls(
            state=state,
            newest_first=order == "newest",
            cursor=cursor,
            limit=min(max(limit, 1), MAX_LIMIT),
            job=params.get("job", "").strip()[:200],
            search=params.get("q", "").strip()[:200],
        )

    def params(self, **changes: object) -> dict[str, str]:
        """This query as URL parameters, with ``changes`` (cursor=None drops the page)."""
        query = replace(self, **changes)  # type: ignore[arg-type]
        found = {
            "state": query.state,
            "order": "newest" if query.newest_first else "oldest",
            "limit": str(query.limit),
            "job": query.job,
            "cursor": query.cursor or "",
        }
        return {key: value for key, value in found.items() if value}


async def page(queue: str, query: Query, settings: config.Settings) -> Page:
    """The rows the query asks for."""
    if query.state != "dead":
        return Page(rows=None, next_cursor=None)
    offset = int(query.cursor) if query.cursor and query.cursor.isdigit() else 0
    # One more than shown: whether there is a next page.
    found = await dead.adead_tasks(queue, query.limit + 1, offset=offset, settings=settings)
    rows = [
        Row(
            id=t.id,
            job=t.type,
            at_ms=t.died_at.timestamp() * 1000,
            retry_count=t.retry_count,
            attempt=t.attempt,
            error=t.error,
        )
        for t in found[: query.limit]
    ]
    more = len(found) > query.limit
    return Page(rows=rows, next_cursor=str(offset + query.limit) if more else None)
