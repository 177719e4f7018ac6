"""``culex events``: the task events of some queues (docs/events.md), recent ones and, with
``--follow``, new ones as they come."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Iterable
from datetime import timedelta

from .. import config
from .._redis.calls import shown
from ..jobs.events import EVENTS_OFF_HINT, KINDS, Event, EventsTrimmed, events, events_off
from ..operations.known_queues import queue_names
from ..server.procedures import run_sync
from .looking import window
from .seen_queues import seen_queues

RECENT = timedelta(minutes=10)  # what the command shows without --since


def since(text: str) -> str | timedelta:
    """--since: a time ago (10m, 2h, 1d, 90s) or an event id (1733100000000-0)."""
    if text[:-1].isdigit() and text[-1:] in "smhd":
        return timedelta(seconds=window(text))
    if not text.replace("-", "").isdigit():
        raise argparse.ArgumentTypeError(
            f"--since takes a time ago (10m, 2h, 1d) or an event id (1733100000000-0): {text!r}"
        )
    return text


def events_command(args: argparse.Namespace) -> int:
    """Print the events of the queues asked (every known queue when none is), one a line;
    with --follow, wait for new ones until Ctrl-C. A position the stream no longer keeps is
    said on stderr, and the command goes on from the oldest event kept; so is a queue with
    no stream at all (events are off for it: jobs.events.EventsOff)."""
    settings = config.settings_for(args.redis_url)
    # (--follow may start before the first task of a queue: a warning, and it waits)
    seen_queues(args.queue, settings, force=True if args.follow else None)
    queues = run_sync(queue_names(settings.prefix, args.queue or None), settings.redis_url)
    if not queues:
        print("no queue yet", file=sys.stderr)
        return 0
    off = run_sync(events_off(queues, settings.prefix), settings.redis_url)
    for queue in off:  # (said, not a silence that looks like an idle queue)
        print(f"culex: events are off for queue {shown(queue)}: {EVENTS_OFF_HINT}", file=sys.stderr)
    start: str | timedelta = args.since if args.since is not None else RECENT
    timeout = None if args.follow else 0.0
    columns = Columns(max(len(shown(queue)) for queue in queues))
    try:
        while True:
            try:
                found: Iterable[Event] = events(
                    queues, start, args.follow, timeout, settings=settings
                )
                if not args.follow:  # (all of them at hand: the job column as wide as needed)
                    found = list(found)
                    for event in found:
                        columns.fit(event)
                for event in found:
                    print(columns.line(event), flush=args.follow)
                return 0
            except EventsTrimmed as trimmed:
                print(f"culex: {trimmed}; going on from there", file=sys.stderr)
                start = "0"
    except KeyboardInterrupt:  # (--follow ends with Ctrl-C)
        return 0


class Columns:
    """The widths of the command's columns, so that they line up: the queue's as the
    longest queue name asked, the job's as the longest job type seen (with --follow, it
    widens when a longer one comes)."""

    def __init__(self, queue: int) -> None:
        self.queue = queue
        self.job = 0

    def fit(self, event: Event) -> None:
        self.queue = max(self.queue, len(shown(event.queue)))
        self.job = max(self.job, len(shown(event.job)))

    def line(self, event: Event) -> str:
        """One event: time (UTC, ms), queue, kind, attempt, job, id."""
        self.fit(event)
        at = event.at.strftime("%Y-%m-%d %H:%M:%S.") + f"{event.at.microsecond // 1000:03d}"
        return (
            f"{at}  {shown(event.queue):<{self.queue}}  {event.kind:<{KIND}}  "
            f"{event.attempt:>3}  {shown(event.job):<{self.job}}  {shown(event.task_id)}"
        )


KIND = max(len(kind) for kind in KINDS)
