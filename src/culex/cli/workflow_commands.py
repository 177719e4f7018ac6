"""culex workflow: a workflow run shown (its record, its nodes' counts by state, and a
table of a page of its nodes: ``--limit``, ``--offset``, ``--state``), cancelled or
retried. The table's work is linear in the nodes it shows: each cell is bounded (a node's
upstreams are cut to a few names), so no row widens every other."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING

from .. import config
from ..errors import CulexError, short
from ..jobs.codecs import moment
from .tables import local_time, one_line, print_table

if TYPE_CHECKING:
    from ..operations.runs import RunOverview

ERROR_WIDTH = 80  # of a dead node's error in the table: its first line, cut

WORKFLOW_USAGE = (
    "culex workflow RUN_ID [--limit N] [--offset N] [--state STATE], or culex workflow "
    "(cancel | retry) RUN_ID"
)


def workflow_command(args: argparse.Namespace) -> int:
    """``culex workflow RUN_ID`` shows the run; ``cancel RUN_ID`` and ``retry RUN_ID`` act
    on it. A run with no record: one line, exit 1 (as ``culex task`` of a missing task)."""
    from ..jobs.task import check_id
    from ..operations import runs
    from ..workflows.run import WorkflowNotFound

    settings = config.settings_for(args.redis_url)
    words = args.words
    action = words[0] if words[0] in ("cancel", "retry") and len(words) > 1 else ""
    if len(words) != (2 if action else 1):
        raise CulexError(f"usage: {WORKFLOW_USAGE}")
    run_id = words[-1]
    page = _page_asked(args, action)
    try:  # (a run's id is made as a task's is)
        check_id(run_id)
    except ValueError:
        raise CulexError(
            "a workflow run id is 1 to 200 printable characters without spaces, as "
            f"WorkflowRun.id prints it: {short(run_id)}"
        ) from None
    try:
        if action == "cancel":
            return _cancel(run_id, settings)
        if action == "retry":
            count = runs.retry_run(run_id, settings)
            print(f"retrying workflow run {run_id}: {count} node(s) run again")
            return 0
        shown = runs.run_overview(run_id, settings)
    except WorkflowNotFound as exc:
        print(exc)
        return 1
    _show(shown, *page)
    return 0


def _page_asked(args: argparse.Namespace, action: str) -> tuple[int, int, str]:
    """--offset, --limit and --state, checked: (offset, limit, state)."""
    from ..operations.runs import NODE_STATES, PAGE

    limit = PAGE if args.limit is None else args.limit
    state = args.state or ""
    if action and (args.limit is not None or args.offset or state):
        raise CulexError(f"--limit, --offset and --state show a run: usage: {WORKFLOW_USAGE}")
    if limit < 1 or args.offset < 0:
        raise CulexError(
            f"--limit must be 1 or more and --offset 0 or more: {limit}, {args.offset}"
        )
    if state and state not in NODE_STATES:
        raise CulexError(f"--state is one of {', '.join(NODE_STATES)}, not {short(state)}")
    return args.offset, limit, state


def _cancel(run_id: str, settings: config.Settings) -> int:
    """Cancel the run; exit 1 when it had ended already (nothing to call off)."""
    from ..operations import runs

    if runs.cancel_run(run_id, settings):
        print(
            f"cancelling workflow run {run_id}: its nodes not started end dead, the running "
            "ones are asked to stop; the run ends cancelled"
        )
        return 0
    state = runs.run_overview(run_id, settings).state
    print(f"workflow run {run_id}: not cancelled, it is {state}")
    return 1


def _show(run: RunOverview, offset: int = 0, limit: int = 2000, only: str = "") -> None:
    """The run's facts, one a line (its nodes' counts by state among them), then a table of
    a page of its nodes by depth (those in state ``only``, if given), and where the page is
    when it is not all of them."""
    from ..operations.runs import after_shown

    counts = ", ".join(f"{count} {state}" for state, count in run.counts.items())
    state = run.state + (" (cancelling: waiting for its nodes to end)" if run.cancelling else "")
    facts = [
        ("run", run.id),
        ("name", run.name or "-"),
        ("state", state),
        ("created", _when(run.created_at)),
        ("started", _when(run.started_at)),
        ("ended", _when(run.ended_at)),
        ("nodes", f"{len(run.nodes)}: {counts}" if counts else "0"),
    ]
    if run.retries:
        facts.append(("retries", str(run.retries)))
    for name, value in facts:
        print(f"{name:<8} {value}")
    print()
    columns = ("node", "state", "queue", "task id", "attempts", "started", "ended", "after",
               "error")  # fmt: skip
    page = run.page(offset, limit, only)
    rows = [
        dict(zip(columns, (node.name, node.state, node.queue, node.task_id, str(node.attempts),
                           _when(node.started_at), _when(node.ended_at),
                           after_shown(node.after), one_line(node.error, ERROR_WIDTH)),
                 strict=True))
        for node in page
    ]  # fmt: skip
    # (the error column, why a dead node died, on a page that shows a dead node)
    print_table(columns if any(node.error for node in page) else columns[:-1], rows)
    total = run.counts.get(only, 0) if only else len(run.nodes)
    if len(page) < total:
        shown = f"{offset + 1}-{offset + len(page)}" if page else "none"
        following = offset + len(page)
        more = f"; next: --offset {following}" if following < total else ""
        among = f" {only}" if only else ""
        print(f"\nnodes {shown} of {total}{among} shown (--limit {limit}){more}")


def _when(ms: int | None) -> str:
    """A time of the record, in this machine's zone ("-": none; as stored when no date
    holds it)."""
    if ms is None:
        return "-"
    when = moment(ms)
    return f"{ms} ms" if when is None else local_time(when)
