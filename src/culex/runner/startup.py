"""What a runner says and checks as it starts: its record in the runner registry, the
queues it runs, and the server it runs on (a server that may evict keys is refused).

The record is what ``culex runners`` shows; the lease keeper's heartbeat keeps it
(culex.runner.lease).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
from collections.abc import Mapping

from .. import config
from .._redis import commands
from .._redis.drivers import AsyncDriverProtocol
from .._redis.keys import queue_keys
from ..errors import ConfigurationError, ServerError, ServerUnavailable
from ..jobs.registry import JobRegistry
from ..server.compatibility import PROTOCOL, SERVED, VERSION

logger = logging.getLogger("culex")

# A runner's state in its record: it takes tasks, or (quiet) it takes none and finishes
# those it runs.
RUNNING = "running"
QUIET = "quiet"


def runner_id() -> str:
    """A runner's name in the runner registry: host, pid and a random part (a pid is
    reused)."""
    return f"{socket.gethostname()}:{os.getpid()}:{os.urandom(4).hex()}"


def identity(runner: str, queues: list[str], concurrency: int, jobs: JobRegistry) -> dict[str, str]:
    """What the runner registry says of a runner (``culex runners``)."""
    return {
        "id": runner,
        "host": socket.gethostname(),
        "pid": str(os.getpid()),
        "queues": ",".join(queues),
        "concurrency": str(concurrency),
        "version": VERSION,
        "protocol": str(PROTOCOL),  # (what it honours: a record without it is older)
        "features": SERVED,  # (the task kinds it serves: compatibility.FEATURES)
        "started": str(round(time.time() * 1000)),
        "state": RUNNING,  # (QUIET once it takes no new task: SIGTSTP)
        # (what its job classes declare, per queue: culex limit shows it with its source)
        "limits": json.dumps({q: found for q in queues if (found := jobs.declared_limits(q))}),
    }


def queues_said(queues: list[str], weights: Mapping[str, int], strict: bool) -> str:
    """The queues as the log says them: with their weights, or in strict order."""
    if strict:
        return ", ".join(queues) + " (strict: in this order)"
    if len(set(weights.values())) > 1:
        return ", ".join(f"{q}:{w}" for q, w in weights.items()) + " (weighted)"
    return ", ".join(queues)


def warn_unserved(queues: list[str], jobs: JobRegistry) -> None:
    """Warn of the queues no job class the runner knows runs on."""
    served = set(jobs.queues())
    if unserved := [q for q in queues if q not in served]:
        logger.warning(
            "No job class this runner knows runs on %s: a task found there goes to dead as "
            "one of an unknown job type (check the queues and the module given to it)",
            ", ".join(unserved),
        )


async def say_paused(driver: AsyncDriverProtocol, prefix: str, queues: list[str]) -> None:
    """Warn of the queues that are paused as the runner starts: it takes nothing from
    them, and would look stuck."""
    controls = await driver.run_many(
        [commands.read_control(queue_keys(prefix, q)) for q in queues]
    )  # (one round trip; a control key of another type: its ServerError, skipped as
    # claim.lua skips it)
    paused = [
        queue
        for queue, control in zip(queues, controls, strict=True)
        if isinstance(control, dict) and control.get("paused") == "1"
    ]
    if paused:
        logger.warning(
            "Paused: %s (their tasks wait until resumed: culex resume QUEUE)", ", ".join(paused)
        )


async def check_server(driver: AsyncDriverProtocol, settings: config.Settings) -> None:
    """Refuse a server that may evict keys: eviction silently deletes queue state."""
    try:
        reply = await driver.run(commands.config_get("maxmemory-policy"))
    except ServerUnavailable:
        raise
    except ServerError as exc:  # CONFIG is often disabled on managed servers
        logger.warning("cannot read maxmemory-policy (%s); make sure it is noeviction", exc)
        return
    if reply in (None, "noeviction"):
        return
    message = (
        f"the server's maxmemory-policy is {reply!r}: it may evict queue keys and lose "
        "tasks. Set it to noeviction (CONFIG SET maxmemory-policy noeviction)"
    )
    if not settings.allow_eviction:
        raise ConfigurationError(f"{message}, or set allow_eviction=True to run anyway")
    logger.warning("DANGER: %s; running anyway because allow_eviction is set", message)
