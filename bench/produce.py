"""The producer side of one scenario for one system, run with the system's interpreter.

    python bench/produce.py SYSTEM SCENARIO COUNT [--producer NAME]

Scenarios: ``one`` (COUNT enqueue calls, timed), ``at_once`` (COUNT enqueue calls made
by 100 coroutines, or 8 threads for a sync producer, at once), ``many`` (one bulk call of
COUNT tasks, timed), ``trickle`` (COUNT tasks 10 ms apart, each stamped with its enqueue time) and
``delayed`` (COUNT tasks due in 2 s, enqueued evenly over 2 s, each stamped with its due
time). ``trickle`` and ``delayed`` first wait until a running worker has done one warm-up
task. Prints one JSON object on the last line of stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib
import inspect
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
from adapters.record import DONE, URL
from child import answer

TRICKLE_GAP = 0.010  # seconds between two enqueues in the pick-up latency scenario
DELAY = 2.0  # seconds from enqueue to due in the lateness scenario
SPREAD = 2.0  # the delayed enqueues are spread over this many seconds
WARM_UP_TIMEOUT = 120.0


async def call(fn: Callable[..., Any], *args: Any) -> Any:
    result = fn(*args)
    if inspect.isawaitable(result):
        result = await result
    return result


async def wait_for_worker(producer: Any) -> float:
    """Enqueue one counted task and wait until it ran: the worker is up and listening."""
    client = redis.Redis.from_url(URL)
    start = time.perf_counter()
    await call(producer.one, 0.0, 0.0)
    while int(client.get(DONE) or 0) < 1:
        if time.perf_counter() - start > WARM_UP_TIMEOUT:
            raise TimeoutError("the worker did not run the warm-up task")
        await asyncio.sleep(0.005)
    client.close()
    return time.perf_counter() - start


async def paced(producer: Any, count: int, gap: float, delay: float) -> dict[str, Any]:
    """Enqueue ``count`` tasks ``gap`` seconds apart; stamps are enqueue or due times."""
    warm_up = await wait_for_worker(producer)
    begin = time.perf_counter()
    for i in range(count):
        pause = begin + i * gap - time.perf_counter()
        if pause > 0:
            await asyncio.sleep(pause)
        now = time.time()
        await call(producer.one, now + delay, delay)
    return {"warm_up_s": warm_up, "enqueue_span_s": time.perf_counter() - begin}


COROUTINES = 100  # an async producer's callers at once in ``at_once`` (a web app's handlers)
THREADS = 8  # a sync producer's (a threaded web server's workers)


async def at_once(one: Callable[..., Any], count: int) -> dict[str, Any]:
    """``count`` enqueues made by many callers at once: COROUTINES coroutines awaiting
    ``one`` in loops for an async producer, THREADS threads calling it for a sync one."""
    if inspect.iscoroutinefunction(one):

        async def caller() -> None:
            for _ in range(count // COROUTINES):
                await one(0.0, 0.0)

        start = time.perf_counter()
        await asyncio.gather(*(caller() for _ in range(COROUTINES)))
        return {
            "rate": count / (time.perf_counter() - start),
            "callers": f"{COROUTINES} coroutines",
        }

    def loop() -> None:
        for _ in range(count // THREADS):
            one(0.0, 0.0)

    threads = [threading.Thread(target=loop) for _ in range(THREADS)]
    start = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {"rate": count / (time.perf_counter() - start), "callers": f"{THREADS} threads"}


async def scenario(producer: Any, name: str, count: int) -> dict[str, Any]:
    if name == "one":
        one = producer.one
        start = time.perf_counter()
        if inspect.iscoroutinefunction(one):
            for _ in range(count):
                await one(0.0, 0.0)
        else:  # a sync producer: a plain loop, no coroutine per call
            for _ in range(count):
                one(0.0, 0.0)
        return {"rate": count / (time.perf_counter() - start)}
    if name == "at_once":
        return await at_once(producer.one, count)
    if name == "many":
        if producer.many is None:
            return {"na": "no bulk enqueue API"}
        stamps = [0.0] * count
        start = time.perf_counter()
        note = await call(producer.many, stamps)
        return {"rate": count / (time.perf_counter() - start), "note": note}
    if name == "trickle":
        return await paced(producer, count, TRICKLE_GAP, 0.0)
    if name == "delayed":
        return await paced(producer, count, SPREAD / count, DELAY)
    raise SystemExit(f"unknown scenario {name}")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("system")
    parser.add_argument("scenario")
    parser.add_argument("count", type=int)
    parser.add_argument("--producer", default="Producer", help="the adapter's producer class")
    args = parser.parse_args()
    adapter = importlib.import_module(f"adapters.{args.system}")
    producer = getattr(adapter, args.producer)()
    try:
        if hasattr(producer, "__aenter__"):
            async with producer:
                result = await scenario(producer, args.scenario, args.count)
        else:
            with producer:
                result = await scenario(producer, args.scenario, args.count)
    except NotImplementedError as exc:
        result = {"na": str(exc)}
    answer(result)


if __name__ == "__main__":
    asyncio.run(main())
