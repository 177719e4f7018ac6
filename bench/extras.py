"""E and "know the limit": culex only, with the same server and task as the table.

- A via ``aenqueue`` (the async producer call) and B with the per-task INFO lines off;
- B with 2 and 4 runner processes;
- for each backlog (1,000 and 1,000,000 waiting tasks): memory per waiting task, bulk
  enqueue of 20k more, a runner draining 20k of them (after its start-up), and culex's
  scripts cycling enqueue + claim + complete at that depth (``limits.py cycle``);
- the limit: culex's claim and complete scripts in a tight loop (``limits.py drain``),
  with the server CPU each task costs.
"""

from __future__ import annotations

from functools import partial
from typing import Any

import redis
from scenarios import Sizes, System, attempt_into, drain


def limits(system: System, what: str, count: int) -> dict[str, Any]:
    """Run ``limits.py`` with culex's interpreter; its JSON result."""
    return system.script("limits.py", what, str(count), timeout=1800)


def backlog(system: System, client: redis.Redis, depth: int, n: int) -> dict[str, Any]:
    client.flushall()
    result: dict[str, Any] = {"fill": limits(system, "fill", depth)}
    result["bulk_enqueue"] = system.produce("many", n)
    result["drain"] = drain(system, client, n, log_name=f"backlog-{depth}")
    result["cycle"] = limits(system, "cycle", n)
    client.flushall()
    return result


def measure(system: System, client: redis.Redis, sizes: Sizes) -> dict[str, Any]:
    n = sizes.enqueue
    results: dict[str, Any] = {}
    attempt = partial(attempt_into, results, "culex")

    client.flushall()
    attempt("A_async", lambda: system.produce("one", n, producer="AsyncProducer"))
    quiet = system.extra["WORKER_QUIET"]
    for name, processes, template in (
        ("B_quiet", 1, quiet),
        ("B_2", 2, None),
        ("B_4", 4, None),
    ):
        client.flushall()
        system.produce("many", n)
        attempt(
            name,
            lambda p=processes, t=template, k=name: drain(
                system, client, n, processes=p, template=t, log_name=k
            ),
        )
    client.flushall()
    limits(system, "fill", n)
    attempt("limit", lambda: limits(system, "drain", n))
    for depth in sizes.backlog:
        attempt(f"backlog_{depth}", lambda d=depth: backlog(system, client, d, n))
    client.flushall()
    return results
