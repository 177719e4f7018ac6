"""What one scrape of the metrics reads from Redis, as a Snapshot (exposition.py): the
queue names and the server's clock; every count, latency, the runners and the counters
(culex.stats), 10,000 queues a round trip in calls of read_queues.lua of 1,000 queues each
(over 10,000 queues, in two parts at once); the last minute of counters, which the totals
do not hold yet. The queues' lines of the text are written as each round is read
(exposition.py), so that no scrape holds every queue's reply at once.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from math import isfinite

from .. import config
from .._redis import commands, reads
from .._redis.calls import shown, text
from .._redis.keys import queue_base
from .._redis.priority import ready_ms
from ..server import configured
from ..server.procedures import Procedure, raised, run_async, run_sync
from .exposition import LATENCY, Lines, Snapshot, seconds_text, task_lines
from .known_queues import names_and_now
from .queues import BATCH
from .stats import totals_with_last_minute


def snapshot_procedure(settings: config.Settings, cluster: bool = False) -> Procedure[Snapshot]:
    """Read a :class:`Snapshot`: the names, the clock and the runners; the queues, ROUND a
    round trip (:func:`queues_procedure`); the last minute of counters, when any was counted."""
    prefix = settings.prefix
    names, now = yield from names_and_now(prefix, None)
    counts, latency, read, runners, _ = yield from queues_procedure(
        prefix, names, now, cluster, True
    )
    totals = yield from totals_with_last_minute(prefix, read)
    return Snapshot(counts, latency, runners, totals)


Figures = tuple[
    dict[str, dict[str, int]], dict[str, float], dict[str, dict[str, str]], int, "Lines"
]


def queues_procedure(
    prefix: str, names: list[str], now: int, cluster: bool, runners: bool, lines: bool = False
) -> Procedure[Figures]:
    """Per queue of ``names``: its counts by state, its latency in seconds (by ``now``,
    the server's clock in ms) and its counters since counting began (only the queues that
    have them), ROUND queues a round trip, in calls of read_queues.lua of BATCH queues (the
    server runs one while the client reads the reply of the one before; on a Cluster,
    ``cluster``: one queue a call, as a script's keys must share a slot). Each round's
    replies are folded before the next is sent: neither end holds them all at once. With
    ``runners``, the runners alive too (read with the first round), else 0. With
    ``lines``, the queues' lines of the text too, written as each round is folded
    (exposition.py's queue_lines; None when a name is not a label as it is)."""
    counts: dict[str, dict[str, int]] = {}
    latency: dict[str, float] = {}
    read: dict[str, dict[str, str]] = {}
    tasks: list[str] = []
    latencies: list[str] = []
    plain = lines
    alive = 0
    if runners and not names:
        alive = raised((yield [commands.count_runners(prefix, now)]))[0]
    per_call = 1 if cluster else BATCH
    for start in range(0, len(names), ROUND):
        batch = names[start : start + ROUND]
        bases = [queue_base(prefix, queue) for queue in batch]
        also = [commands.count_runners(prefix, now)] if runners and not start else []
        calls = [reads.read_queues(bases[i : i + per_call]) for i in range(0, len(bases), per_call)]
        replies = raised((yield [*also, *calls]))
        if also:
            alive, *replies = replies
        flat = replies[0] if len(replies) == 1 else list(itertools.chain.from_iterable(replies))
        at = 0
        for queue in batch:
            waiting, pending, scheduled, dead, grouped, head, grouped_head, n = flat[at : at + 8]
            at += 8
            waiting += grouped
            counts[queue] = {
                "waiting": waiting,
                "pending": pending,
                "scheduled": scheduled,
                "dead": dead,
            }
            oldest = _ready(head, grouped_head)
            seconds = latency[queue] = 0.0 if oldest is None else max(0.0, (now - oldest) / 1000)
            if n:
                fields = flat[at : at + n]
                at += n
                read[queue] = {
                    text(name): shown(value)
                    for name, value in zip(fields[::2], fields[1::2], strict=True)
                }
            if plain:
                if not queue.isascii() and shown(queue) != queue:
                    plain = False
                    continue
                label = queue.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
                tasks.append(task_lines(label, waiting, pending, scheduled, dead))
                latencies.append(f'{LATENCY}{{queue="{label}"}} {seconds_text(seconds)}\n')
    written = ("".join(tasks), "".join(latencies)) if plain else None
    return counts, latency, read, alive, written


ROUND = 10 * BATCH  # queues read in one round trip


def _ready(first: bytes, first_grouped: bytes) -> int | None:
    """When the task that runs next became ready (ms), from the first scores of waiting
    and of the groups' ready tasks as read_queues.lua gives them (b"" for an empty set);
    None when none is ready. A score of -inf or +inf (stored by a foreign producer) holds
    no time."""
    found = None
    for score in (first, first_grouped):
        if score and isfinite(value := float(score)):
            ready = ready_ms(value)
            found = ready if found is None else min(found, ready)
    return found


# A scrape of more than ROUND queues reads them in PARTS parts at once, on connections of
# their own: while the server runs one part's calls, the client folds the replies of
# another and writes its lines (the server's time and the client's overlap; one part
# after another, they add up). Not on a Cluster (its driver spreads the calls over the
# shards already).
PARTS = 2


def read(settings: config.Settings, lines: bool) -> tuple[Snapshot, list[Lines]]:
    """What :func:`snapshot_procedure` reads, its queues read in parts at once; with ``lines``,
    each part's lines of the queues' gauges too (written as it is read; else None)."""
    url, prefix = settings.redis_url, settings.prefix
    cluster = configured.sync_driver(url).cluster
    names, now = run_sync(names_and_now(prefix, None), url)
    parts = _parts(names, cluster)

    def part(i: int) -> Figures:
        return run_sync(queues_procedure(prefix, parts[i], now, cluster, not i, lines), url)

    if len(parts) == 1:
        found = [part(0)]
    else:
        with ThreadPoolExecutor(len(parts), thread_name_prefix="culex-metrics") as pool:
            found = list(pool.map(part, range(len(parts))))
    counts, latency, read, runners = _joined(found)
    totals = run_sync(totals_with_last_minute(prefix, read), url)
    return Snapshot(counts, latency, runners, totals), [written for *_, written in found]


async def aread(settings: config.Settings) -> tuple[Snapshot, list[Lines]]:
    """The async twin of :func:`read`, with the lines."""
    url, prefix = settings.redis_url, settings.prefix
    cluster = (await configured.async_driver(url)).cluster
    names, now = await run_async(names_and_now(prefix, None), url)
    found = await asyncio.gather(
        *(
            run_async(queues_procedure(prefix, part, now, cluster, not i, True), url)
            for i, part in enumerate(_parts(names, cluster))
        )
    )
    counts, latency, read, runners = _joined(found)
    totals = await run_async(totals_with_last_minute(prefix, read), url)
    return Snapshot(counts, latency, runners, totals), [written for *_, written in found]


def _parts(names: list[str], cluster: bool) -> list[list[str]]:
    """``names`` in PARTS runs of whole rounds (one run: ROUND names or fewer, or a
    Cluster)."""
    if cluster or len(names) <= ROUND:
        return [names]
    rounds = -(-len(names) // ROUND)
    size = -(-rounds // PARTS) * ROUND
    return [names[start : start + size] for start in range(0, len(names), size)]


def _joined(
    parts: Iterable[Figures],
) -> tuple[dict[str, dict[str, int]], dict[str, float], dict[str, dict[str, str]], int]:
    """The reads of the parts as one, in order (the runners read with the first)."""
    counts: dict[str, dict[str, int]] = {}
    latency: dict[str, float] = {}
    read: dict[str, dict[str, str]] = {}
    runners = 0
    for i, (part_counts, part_latency, part_read, alive, _) in enumerate(parts):
        counts.update(part_counts)
        latency.update(part_latency)
        read.update(part_read)
        runners = alive if not i else runners
    return counts, latency, read, runners
