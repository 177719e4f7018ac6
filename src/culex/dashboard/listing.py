"""A queue page's list of tasks: the query in its URL (state, order, page, job type, search,
kind) and the page of rows it reads through ``inspection.atasks``, bounded (at most
MAX_LIMIT rows, and with a filter at most ``browsing.EXAMINE`` ids looked at a page)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import TypedDict, Unpack

from starlette.exceptions import HTTPException

from .. import config
from ..operations import inspection
from ..operations.inspection import LISTED, TaskPage

LIMITS = (25, 50, 100)
MAX_LIMIT = max(LIMITS)
# The states listed in the order they run by default (the task to run next first: waiting's
# priority then ready time, scheduled's due time); the others newest first.
RUN_ORDER = ("waiting", "scheduled")
KINDS = ("retrying", "delayed")  # of scheduled tasks: after a failure or stall, or not


class QueryChanges(TypedDict, total=False):
    """The fields of a :class:`Query` that :meth:`Query.params` may change (any of them)."""

    state: str
    newest_first: bool
    cursor: str | None
    limit: int
    job: str
    search: str
    kind: str


@dataclass(frozen=True)
class Query:
    """What a queue page lists, from its URL; a bad value is a 400, not a guess."""

    state: str = "waiting"
    newest_first: bool = True
    cursor: str | None = None
    limit: int = 50
    job: str = ""
    search: str = ""
    kind: str = ""

    @classmethod
    def parse(cls, params: Mapping[str, str]) -> Query:
        state = params.get("state", "waiting")
        if state not in LISTED:
            raise HTTPException(400, f"state must be one of {', '.join(LISTED)}")
        order = params.get("order") or ("oldest" if state in RUN_ORDER else "newest")
        if order not in ("newest", "oldest"):
            raise HTTPException(400, "order must be newest or oldest")
        cursor = params.get("cursor") or None
        if cursor is not None and (len(cursor) > 200 or not cursor.isprintable()):
            raise HTTPException(400, "bad cursor")
        try:
            limit = int(params.get("limit", "50"))
        except ValueError:
            raise HTTPException(400, "limit must be a whole number") from None
        kind = params.get("kind", "")
        if kind and kind not in KINDS:
            raise HTTPException(400, f"kind must be one of {', '.join(KINDS)}")
        search = params.get("q", "").strip()[:200]
        if not search.isprintable():
            raise HTTPException(400, "a search must be printable text")
        return cls(
            state=state,
            newest_first=order == "newest",
            cursor=cursor,
            limit=min(max(limit, 1), MAX_LIMIT),
            job=params.get("job", "").strip()[:200],
            search=search,
            kind=kind,
        )

    @property
    def filtered(self) -> bool:
        """Whether rows are picked one by one (a page then looks at a bounded number)."""
        return bool(self.job or self.search or self.kind)

    @property
    def searched(self) -> bool:
        """Whether the page is narrowed beyond what a bulk action on every match can do."""
        return bool(self.search or self.kind)

    def params(self, **changes: Unpack[QueryChanges]) -> dict[str, str]:
        """This query as URL parameters, with ``changes`` (cursor=None drops the page)."""
        query = replace(self, **changes)
        found = {
            "state": query.state,
            "order": "newest" if query.newest_first else "oldest",
            "limit": str(query.limit),
            "job": query.job,
            "q": query.search,
            "kind": query.kind,
            "cursor": query.cursor or "",
        }
        return {key: value for key, value in found.items() if value}


async def page(queue: str, query: Query, settings: config.Settings) -> TaskPage:
    """The rows the query asks for (a bad cursor is a 400)."""
    try:
        return await inspection.atasks(
            queue,
            query.state,
            settings,
            newest_first=query.newest_first,
            cursor=query.cursor,
            limit=query.limit,
            job=query.job or None,
            search=query.search or None,
            kind=query.kind or None,
        )
    except (TypeError, ValueError) as exc:
        raise HTTPException(400, str(exc)) from None
