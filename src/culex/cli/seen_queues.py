"""The check every ``culex`` command that names a queue makes first: culex has seen it (a
task was enqueued to it, or a runner runs it), else one line that says so, with the known
names closest to it. A typo would otherwise read as an empty queue ("0 task(s)", exit 0),
or pause or limit a queue nothing runs while the meant one goes on."""

from __future__ import annotations

import difflib
import sys
from collections.abc import Iterable

from .. import config
from ..errors import CulexError


def seen_queues(
    queues: Iterable[str], settings: config.Settings, force: bool | None = None
) -> None:
    """Refuse a queue of ``queues`` that culex has never seen (not in ``<prefix>:queues``,
    where enqueues and runners name theirs), with the known names closest to it; one read
    of that set, after each name's own check. ``force`` is a command's --force: None for a
    command that only reads (it has none to offer); True: a warning on stderr and go on.
    (A read for the user's sake only: a change itself stays one atomic script, whatever
    the read found.)"""
    from .._redis import commands
    from .._redis.keys import check_queue_name, queues_key
    from ..server.procedures import one_call, run_sync

    asked = [check_queue_name(queue) for queue in queues]
    if not asked:
        return
    known = run_sync(
        one_call(commands.known_queues(queues_key(settings.prefix))), settings.redis_url
    )
    for queue in asked:
        if queue in known:
            continue
        close = difflib.get_close_matches(queue, known, n=3)
        said = f"culex has never seen a queue named {queue!r}" + (
            f" (did you mean {' or '.join(close)}?)"
            if close
            else f" (known: {len(known)} queue(s), see culex queues)"
        )
        if force is None:
            raise CulexError(said)
        if not force:
            raise CulexError(f"{said}; add --force to change it all the same")
        print(f"warning: {said}", file=sys.stderr)
