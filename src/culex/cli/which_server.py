"""Which server a command uses, said on stderr before it reads or steers anything there.

A command that reads (queues, stats, task, tasks, runners, dead, periodic, the dashboard,
metrics, workflow) or changes control state (pause, resume, limit, cancel, signal, dead retry
and purge, workflow cancel and retry) uses a server that runs already: with no ``--redis-url``
nor ``CULEX_REDIS_URL``, the embedded server of this folder (``.culex/``, or
``CULEX_DATA_DIR``) if it runs, else it refuses in one line. Starting a new, empty server
only to read it (or to pause a queue on it) would show nothing and hide that the user's
server is elsewhere. Commands that enqueue or run (``culex run``, ``culex demo``, ``culex
periodic trigger``, ``culex server start``) may start it."""

from __future__ import annotations

import argparse
import sys

from .. import config
from .._redis.address import masked
from ..errors import CulexError


def existing_server(args: argparse.Namespace, *, say: bool) -> None:
    """Point ``args.redis_url`` at the server the command is to use, one that runs already,
    and (if ``say``) write which one it is on stderr, its password masked. Raises
    CulexError when no server is named and no embedded server runs in this folder."""
    from ..server.embedded import EmbeddedServer, default_data_dir

    settings = config.settings_for(args.redis_url)
    if settings.redis_url:
        where = masked(settings.redis_url)
    else:
        server = EmbeddedServer(default_data_dir())
        if not server.running():
            raise CulexError(
                f"no culex server runs here (none in {server.data_dir}): point at yours with "
                "--redis-url URL or CULEX_REDIS_URL, or start this folder's with: culex "
                "server start"
            )
        args.redis_url = server.url
        where = f"the embedded server in {server.data_dir} ({server.url})"
    if say:
        print(f"Server: {where}", file=sys.stderr, flush=True)


def may_start_server(args: argparse.Namespace) -> bool:
    """Whether the command may start the embedded server: it has no --redis-url option
    (run, server, demo) or it enqueues (periodic trigger)."""
    if not hasattr(args, "redis_url") or getattr(args, "starts_server", False):
        return True
    words: list[str] = getattr(args, "words", None) or []
    return args.command.__name__ == "periodic_command" and words[:1] == ["trigger"]
