"""culex commands that steer a queue: pause, resume, limit."""

from __future__ import annotations

import argparse
import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

from .. import config
from ..operations.queue_control import SET_AT_RUN_TIME, LimitInForce, limit, pause, resume
from ..server.compatibility import OlderRunnerWarning
from .seen_queues import seen_queues


@contextlib.contextmanager
def older_runners_said() -> Iterator[None]:
    """Print the warning that runners of an older culex ignore the change as a line of its
    own, after the command's line (compatibility.py)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", OlderRunnerWarning)
        lines: list[str] = []
        try:
            yield
        finally:
            for warned in caught:
                if issubclass(warned.category, OlderRunnerWarning):
                    lines.append(f"warning: {warned.message}")
                else:  # (any other warning, as Python would show it)
                    warnings.warn_explicit(
                        warned.message, warned.category, warned.filename, warned.lineno
                    )
    for line in lines:
        print(line)


def pause_command(args: argparse.Namespace) -> int:
    settings = config.settings_for(args.redis_url)
    seen_queues([args.queue], settings, args.force)
    with older_runners_said():
        pause(args.queue, settings)
        print(_summary(args.queue, settings))
    return 0


def resume_command(args: argparse.Namespace) -> int:
    settings = config.settings_for(args.redis_url)
    seen_queues([args.queue], settings, args.force)
    resume(args.queue, settings)
    print(_summary(args.queue, settings))
    return 0


def limit_command(args: argparse.Namespace) -> int:
    """Set the limits given (``none`` lifts one), or drop them all with --reset; then (or
    with neither) show every limit in force, its value and where it comes from."""
    from ..operations.queue_control import limits_in_force

    settings = config.settings_for(args.redis_url)
    seen_queues([args.queue], settings, args.force)
    changes: dict[str, Any] = {}  # (argparse's values, which limit() checks)
    for name in ("rate", "group_rate"):
        if getattr(args, name) is not None:
            changes[name] = None if getattr(args, name) == "none" else getattr(args, name)
    for name in ("concurrency", "group_concurrency"):
        if getattr(args, name) is not None:
            given = getattr(args, name)
            changes[name] = None if given == "none" else _whole(given)
    with older_runners_said():
        if changes or args.reset:
            limit(args.queue, reset=args.reset, settings=settings, **changes)
        paused, in_force = limits_in_force(settings, [args.queue])[args.queue]
        print(f"{args.queue}: {'paused' if paused else 'running'}")
        width = max(len(one.name) for one in in_force)
        value_width = max(len(one.value) for one in in_force)
        for one in in_force:
            print(f"  {one.name:<{width}}  {one.value:<{value_width}}  {one.source}".rstrip())
    return 0


def _summary(queue: str, settings: config.Settings) -> str:
    """One line, as read after the change: ``emails: paused; rate 50/s; concurrency 3
    declared by SendEmailJob`` (``culex limit QUEUE`` shows every limit with its source)."""
    from ..operations.queue_control import limits_in_force

    paused, in_force = limits_in_force(settings, [queue])[queue]
    limits = marks(False, in_force)
    return f"{queue}: {'paused' if paused else 'running'}" + (f"; {limits}" if limits else "")


def marks(paused: bool, in_force: list[LimitInForce]) -> str:
    """What ``culex queues`` adds to a queue's line: ``paused; rate 50/s; concurrency 3
    declared by SendEmailJob``, the pause and the limits in force, a limit set at run time
    as its value alone ("" for none)."""
    said = ["paused"] if paused else []
    for one in in_force:
        if one.set_or_declared:
            set_now = one.source == SET_AT_RUN_TIME
            said.append(f"{one.name} {one.value}" + ("" if set_now else f" {one.source}"))
    return "; ".join(said)


def _whole(text: str) -> object:
    """A concurrency flag's value: a whole number (checked by culex.limit), else the text
    itself, which culex.limit refuses with its own message."""
    return int(text) if text.isdigit() else text
