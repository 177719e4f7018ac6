"""culex only: its scripts in a tight loop with no runner around them, and its memory.

    python bench/limits.py fill COUNT          # bulk-enqueue COUNT tasks; memory per task
    python bench/limits.py drain COUNT         # claim + complete COUNT waiting tasks
    python bench/limits.py cycle COUNT         # enqueue + claim + complete at constant depth

``drain`` and ``cycle`` send culex's own EVALSHA calls (built by ``culex._redis.claims``
and ``culex._redis.reports``, so they follow the scripts' current keys and arguments) over
one connection: a claim of BATCH tasks, then one call that completes them all, as the
runner does. They report the rate the loop got, and the server CPU each task cost (INFO
cpu), whose inverse is what one server core could do.
Run with culex's interpreter, ``bench/`` on ``PYTHONPATH`` and ``BENCH_REDIS_URL`` set.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import redis
from adapters.culex import Noop
from adapters.record import URL
from child import answer
from server import server_cpu

import culex
from culex._redis import calls, claims, enqueuing, reports, scripts
from culex._redis.keys import queue_keys

BATCH = 100  # tasks per claim: what a runner with 100 free slots asks for
FILL_CHUNK = 10_000  # tasks per enqueue_many call while filling


def send(pipe: Any, call: calls.Call[Any]) -> None:
    assert call.script is not None
    pipe.execute_command("EVALSHA", call.script.sha, len(call.keys), *call.keys, *call.args)


def fill(client: redis.Redis, count: int) -> dict[str, Any]:
    """Enqueue ``count`` waiting tasks with enqueue_many; the memory they take."""
    culex.configure(redis_url=URL)
    before = int(client.info("memory")["used_memory"])
    start = time.perf_counter()
    for first in range(0, count, FILL_CHUNK):
        culex.enqueue_many([Noop(stamp=0.0) for _ in range(min(FILL_CHUNK, count - first))])
    elapsed = time.perf_counter() - start
    after = int(client.info("memory")["used_memory"])
    keys = queue_keys(culex.settings().prefix, Noop.queue)
    waiting = client.zcard(keys.waiting)
    one = client.zrange(keys.waiting, 0, 0)[0].decode()
    hash_bytes = int(client.memory_usage(keys.task(one), samples=0) or 0)
    zset_bytes = int(client.memory_usage(keys.waiting, samples=0) or 0)
    return {
        "rate": count / elapsed,
        "waiting": waiting,
        "used_memory_per_task": (after - before) / count,
        "task_hash_bytes": hash_bytes,
        "waiting_zset_bytes_per_task": zset_bytes / waiting,
        "memory_usage_per_task": hash_bytes + zset_bytes / waiting,
    }


def claim_and_complete(client: redis.Redis, pipe: Any, limit: int) -> int:
    """One claim of up to ``limit`` tasks, then one batched completion, as the runner does."""
    settings = culex.settings()
    keys = queue_keys(settings.prefix, Noop.queue)
    claim = claims.claim(
        keys,
        limit=limit,
        lease_ms=settings.lease_ms,
        promote_limit=1000,
        dead_ttl_ms=settings.failed_job_ttl_ms,
    )
    send(pipe, claim)
    reply = claim.parse(pipe.execute()[0])
    if reply.tasks:
        ttl_ms = settings.successful_job_ttl_ms  # a result of None keeps the hash this long
        done = [(task.id, task.attempt, "null", ttl_ms) for task in reply.tasks]
        send(pipe, reports.complete(keys, done))
        pipe.execute()
    return len(reply.tasks)


def timed(client: redis.Redis, count: int, step: Callable[[int], int]) -> dict[str, Any]:
    """Call ``step(done)`` until it has done ``count`` tasks; the rate and the server's CPU."""
    cpu = server_cpu(client)
    start = time.perf_counter()
    done = 0
    while done < count:
        got = step(done)
        if not got:
            raise SystemExit(f"the queue ran dry after {done} tasks")
        done += got
    elapsed = time.perf_counter() - start
    used = (server_cpu(client) - cpu) * 1e6 / count
    return {"rate": count / elapsed, "server_cpu_us_per_task": used, "server_limit": 1e6 / used}


def drain(client: redis.Redis, count: int) -> dict[str, Any]:
    """Claim and complete ``count`` waiting tasks, BATCH at a time."""
    pipe = client.pipeline(transaction=False)
    return timed(
        client, count, lambda done: claim_and_complete(client, pipe, min(BATCH, count - done))
    )


def cycle(client: redis.Redis, count: int) -> dict[str, Any]:
    """Enqueue BATCH (one pipeline), claim them, complete them; the depth stays put."""
    settings = culex.settings()
    keys = queue_keys(settings.prefix, Noop.queue)
    params = Noop(stamp=0.0).params_json()
    pipe = client.pipeline(transaction=False)

    def step(done: int) -> int:
        for i in range(BATCH):
            task_id = f"cycle-{done + i}"
            send(
                pipe,
                enqueuing.enqueue(
                    keys, task_id, "Noop", params, due_ms=None, delay_ms=0, max_retries=4
                ),
            )
        pipe.execute()
        return claim_and_complete(client, pipe, BATCH)

    return timed(client, count, step)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("what", choices=["fill", "drain", "cycle"])
    parser.add_argument("count", type=int)
    args = parser.parse_args()
    client = redis.Redis.from_url(URL)
    culex.configure(redis_url=URL)
    for script in scripts.ALL:
        client.script_load(script.source)
    result = {"fill": fill, "drain": drain, "cycle": cycle}[args.what](client, args.count)
    answer(result)


if __name__ == "__main__":
    main()
