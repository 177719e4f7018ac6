"""Prometheus metrics: what Redis holds about the queues, in the Prometheus text format.

Optional (``pip install culex[metrics]``: prometheus-client). One scrape reads the queue
names and the server's clock; every count, latency, the runners and the counters
(culex.stats), 10,000 queues a round trip in calls of read_queues.lua of 1,000 queues each
(over 10,000 queues, in two parts at once); the last minute of counters, which the totals
do not hold yet. Every queue is read: a scrape wants every series (its cost at 100,000
queues: docs/metrics.md).
``render`` / ``arender`` give the text; :class:`CulexCollector` joins a registry of your
own; ``culex metrics`` serves it.
Names and labels are fixed (alerts are written against them): docs/metrics.md.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import signal
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from math import isfinite
from typing import Any, cast

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import CONTENT_TYPE_LATEST, generate_latest
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from .. import config
from .._redis import commands, reads
from .._redis.calls import Call, shown, text
from .._redis.keys import queue_base, queues_key
from .._redis.priority import ready_ms
from ..errors import CulexError
from ..server import configured
from ..server.procedures import Procedure, run_async, run_sync
from .inspection import BATCH, STATES
from .stats import DURATION_BUCKETS, Counts, totals_with_last_minute

__all__ = ["CONTENT_TYPE", "CulexCollector", "arender", "render", "serve"]

logger = logging.getLogger("culex")

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The Content-Type of :func:`render`'s text (the Prometheus text format)."""


@dataclass(frozen=True)
class Snapshot:
    """What one scrape read: per queue, its counts by state and its latency in seconds;
    how many runners are alive; per (queue, job), the counters since counting began."""

    counts: dict[str, dict[str, int]]
    latency: dict[str, float]
    runners: int
    totals: dict[tuple[str, str], Counts]


def snapshot_procedure(settings: config.Settings, cluster: bool = False) -> Procedure[Snapshot]:
    """Read a :class:`Snapshot`: the names, the clock and the runners; the queues, ROUND a
    round trip (:func:`queues_procedure`); the last minute of counters, when any was counted."""
    prefix = settings.prefix
    names, now = yield from names_procedure(prefix)
    counts, latency, read, runners, _ = yield from queues_procedure(
        prefix, names, now, cluster, True
    )
    totals = yield from totals_with_last_minute(prefix, read)
    return Snapshot(counts, latency, runners, totals)


def names_procedure(prefix: str) -> Procedure[tuple[list[str], int]]:
    """The known queues (sorted) and the server's clock (ms)."""
    names, now = yield from _checked(
        [commands.known_queues(queues_key(prefix)), commands.server_time()]
    )
    return names, now


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
    (:func:`_queue_lines`; None when a name is not a label as it is)."""
    counts: dict[str, dict[str, int]] = {}
    latency: dict[str, float] = {}
    read: dict[str, dict[str, str]] = {}
    tasks: list[str] = []
    latencies: list[str] = []
    plain = lines
    alive = 0
    if runners and not names:
        alive = (yield from _checked([commands.count_runners(prefix, now)]))[0]
    per_call = 1 if cluster else BATCH
    for start in range(0, len(names), ROUND):
        batch = names[start : start + ROUND]
        bases = [queue_base(prefix, queue) for queue in batch]
        also = [commands.count_runners(prefix, now)] if runners and not start else []
        replies = yield from _checked(
            [
                *also,
                *(
                    reads.read_queues(bases[i : i + per_call])
                    for i in range(0, len(bases), per_call)
                ),
            ]
        )
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
                tasks.append(_task_lines(label, waiting, pending, scheduled, dead))
                latencies.append(f'{LATENCY}{{queue="{label}"}} {_seconds(seconds)}\n')
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


def _checked(calls: list[Call[Any]]) -> Procedure[list[Any]]:
    """Send ``calls`` in one round trip; a refused one raises."""
    replies: list[Any] = yield calls
    for reply in replies:
        if isinstance(reply, Exception):
            raise reply
    return replies


def families(snapshot: Snapshot) -> list[Metric]:
    """The metric families of one snapshot, with their fixed names and labels. A queue
    name that is not UTF-8 is a label with U+FFFD for its bytes (two such names that read
    alike are one queue here: counts and counters added, the longer latency)."""
    snapshot = _readable(snapshot)
    tasks = GaugeMetricFamily(TASKS, TASKS_HELP, labels=["queue", "state"])
    latency = GaugeMetricFamily(LATENCY, LATENCY_HELP, labels=["queue"])
    for queue, row in snapshot.counts.items():
        for state in STATES:
            tasks.add_metric([queue, state], row[state])
        latency.add_metric([queue], snapshot.latency[queue])
    return [tasks, latency, *_others(snapshot)]


TASKS, TASKS_HELP = "culex_queue_tasks", "Tasks in each queue, by state"
LATENCY = "culex_queue_latency_seconds"
LATENCY_HELP = "How long the oldest ready task of each queue has waited (0: none waits)"


def _others(snapshot: Snapshot) -> list[Metric]:
    """The families after the queues' gauges: the runners, the outcomes and durations."""
    runners = GaugeMetricFamily(
        "culex_runners", "Runners alive (beating within their lease)", value=snapshot.runners
    )
    return [runners, *_outcomes(snapshot.totals)]


# A number as the text format writes it (3.0, +Inf, 1e+16), as generate_latest does.
_go = cast(Callable[[float], str], floatToGoString)


def _rendered(snapshot: Snapshot, parts: list[Lines] | None = None) -> bytes:
    """What ``_text(families(snapshot))`` gives, byte for byte
    (tests/operations/test_metrics_text.py), with the queues' gauges written here:
    prometheus_client makes objects for each of their samples, five a queue, which at
    100,000 queues took seconds of a scrape.
    ``parts``: those lines as written already for the snapshot's queues, part by part, in
    order (None, or a part's None: write them here)."""
    if parts is None or None in parts:
        snapshot = _readable(snapshot)
        parts = [_queue_lines(snapshot.counts, snapshot.latency)]
    tasks = [f"# HELP {TASKS} {TASKS_HELP}\n# TYPE {TASKS} gauge\n"]
    latency = [f"# HELP {LATENCY} {LATENCY_HELP}\n# TYPE {LATENCY} gauge\n"]
    for part in parts:
        assert part is not None
        tasks.append(part[0])
        latency.append(part[1])
    return "".join(tasks + latency).encode() + _text(_others(snapshot))


Lines = tuple[str, str] | None
"""Some queues' lines of culex_queue_tasks and of culex_queue_latency_seconds (None: not
written, as a name is not a label as it is: _readable)."""


def _queue_lines(counts: dict[str, dict[str, int]], latency: dict[str, float]) -> Lines:
    """The lines of culex_queue_tasks and of culex_queue_latency_seconds of these queues,
    their names taken as labels as they are."""
    tasks: list[str] = []
    latencies: list[str] = []
    for queue, row in counts.items():
        label = queue.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
        tasks.append(
            _task_lines(label, row["waiting"], row["pending"], row["scheduled"], row["dead"])
        )
        latencies.append(f'{LATENCY}{{queue="{label}"}} {_seconds(latency[queue])}\n')
    return "".join(tasks), "".join(latencies)


def _task_lines(label: str, waiting: int, pending: int, scheduled: int, dead: int) -> str:
    """A queue's four lines of culex_queue_tasks: one format string, of whole numbers when
    they are below 10**6 (written as Go writes them: 123.0), else of _go's text."""
    if (
        0 <= waiting < 10**6
        and 0 <= pending < 10**6
        and 0 <= scheduled < 10**6
        and 0 <= dead < 10**6
    ):
        return _SMALL(label, waiting, pending, scheduled, dead)
    return _LARGE(label, _go(waiting), _go(pending), _go(scheduled), _go(dead))


# A queue's four lines of culex_queue_tasks, for str.format(label, *counts in STATES order).
_TASK_LINES = "".join(
    f'{TASKS}{{{{queue="{{0}}",state="{state}"}}}} {{{i}}}.0\n'
    for i, state in enumerate(STATES, start=1)
)


_SMALL = _TASK_LINES.format
_LARGE = _TASK_LINES.replace(".0\n", "\n").format


def _seconds(value: float) -> str:
    """``_go(value)``, quicker from 0 to 10**6, where Go writes what Python's repr does
    (above, Go writes an exponent sooner: 1.2345678e+07)."""
    return repr(value) if 0 <= value < 1e6 else _go(value)


def _readable(snapshot: Snapshot) -> Snapshot:
    """The snapshot with its queue names as a label can hold them (shown())."""
    if all(shown(queue) == queue for queue in snapshot.counts):
        return snapshot
    counts: dict[str, dict[str, int]] = {}
    latency: dict[str, float] = {}
    for queue, row in snapshot.counts.items():
        label = shown(queue)
        before = counts.get(label, dict.fromkeys(row, 0))
        counts[label] = {state: before.get(state, 0) + n for state, n in row.items()}
        latency[label] = max(latency.get(label, 0.0), snapshot.latency[queue])
    totals: dict[tuple[str, str], Counts] = {}
    for (queue, job), found in snapshot.totals.items():
        totals[shown(queue), job] = totals.get((shown(queue), job), Counts()) + found
    return Snapshot(counts, latency, snapshot.runners, totals)


_BOUNDS = [str(float(bound)) for bound in DURATION_BUCKETS] + ["+Inf"]  # the le labels


def _outcomes(totals: dict[tuple[str, str], Counts]) -> list[Metric]:
    """culex_tasks_total and culex_task_duration_seconds, from the counters in Redis."""
    ended = CounterMetricFamily(
        "culex_tasks",  # (exposed as culex_tasks_total)
        "Attempts that ended, by outcome: succeeded, failed (to run again), dead",
        labels=["queue", "job", "outcome"],
    )
    durations = HistogramMetricFamily(
        "culex_task_duration_seconds",
        "Run time of the attempts a runner reported, claim to report",
        labels=["queue", "job"],
    )
    for (queue, job), counts in totals.items():
        for outcome in ("succeeded", "failed", "dead"):
            ended.add_metric([queue, job, outcome], getattr(counts, outcome))
        cumulative = list(itertools.accumulate(counts.durations))
        durations.add_metric(
            [queue, job], list(zip(_BOUNDS, cumulative, strict=True)), counts.duration_sum
        )
    return [ended, durations]


def render(settings: config.Settings | None = None) -> bytes:
    """The metrics now, in the Prometheus text format (Content-Type: ``CONTENT_TYPE``)."""
    return _rendered(*_read(settings or config.settings(), lines=True))


async def arender(settings: config.Settings | None = None) -> bytes:
    """The async twin of :func:`render`."""
    return _rendered(*await _aread(settings or config.settings()))


# A scrape of more than ROUND queues reads them in PARTS parts at once, on connections of
# their own: while the server runs one part's calls, the client folds the replies of
# another and writes its lines (the server's time and the client's overlap; one part
# after another, they add up). Not on a Cluster (its driver spreads the calls over the
# shards already).
PARTS = 2


def _read(settings: config.Settings, lines: bool) -> tuple[Snapshot, list[Lines]]:
    """What :func:`snapshot_procedure` reads, its queues read in parts at once; with ``lines``,
    each part's lines of the queues' gauges too (written as it is read; else None)."""
    url, prefix = settings.redis_url, settings.prefix
    cluster = configured.sync_driver(url).cluster
    names, now = run_sync(names_procedure(prefix), url)
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


async def _aread(settings: config.Settings) -> tuple[Snapshot, list[Lines]]:
    """The async twin of :func:`_read`, with the lines."""
    url, prefix = settings.redis_url, settings.prefix
    cluster = (await configured.async_driver(url)).cluster
    names, now = await run_async(names_procedure(prefix), url)
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


class CulexCollector(Collector):
    """A collector for a prometheus_client registry of your own: each scrape reads Redis
    (``registry.register(CulexCollector())``)."""

    def __init__(self, settings: config.Settings | None = None) -> None:
        self.settings = settings

    def collect(self) -> Iterator[Metric]:
        settings = self.settings or config.settings()
        yield from families(_read(settings, lines=False)[0])

    def describe(self) -> Iterable[Metric]:
        return []  # (no read when registered)


class _Read(Collector):
    """Families already read, as a collector (what generate_latest takes)."""

    def __init__(self, found: list[Metric]) -> None:
        self.found = found

    def collect(self) -> Iterable[Metric]:
        return self.found

    def describe(self) -> Iterable[Metric]:
        return []


def _text(found: list[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Read(found))
    return generate_latest(registry)


# -- culex metrics: an HTTP server of /metrics alone -------------------------------------


# How long a connection may keep quiet (a request not sent, a reply not read) before it
# is dropped: each connection has a thread of its own, so a slow one holds only its own.
CLIENT_TIMEOUT = 30.0


def serve(settings: config.Settings, host: str, port: int) -> None:
    """Serve ``GET /metrics`` on ``host:port`` (0: a free port) until SIGTERM or SIGINT;
    prints the address it serves. Each connection is served by a thread of its own, and
    dropped after CLIENT_TIMEOUT seconds of silence: an idle or slow client (a port
    scanner, a stuck proxy) blocks no scrape."""
    server = ThreadingHTTPServer((host, port), _handler(settings))
    server.daemon_threads = True  # (a connection still open does not hold up the exit)
    shown_host, shown_port = server.server_address[:2]

    # Both signals are handled here, not left to Python's default: a process started in
    # the background by a shell inherits SIGINT ignored, and SIGTERM is what a service
    # manager or a container runtime sends. The handler asks the loop to stop from a
    # thread of its own (shutdown() waits for the loop): an exception raised in the
    # handler would be swallowed, and the server kept serving, when the signal lands
    # while a scrape is answered (socketserver reports a handler's exceptions and goes on).
    def stop(signum: int, frame: object) -> None:
        threading.Thread(target=server.shutdown, name="culex-metrics-stop", daemon=True).start()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    print(f"serving http://{shown_host!s}:{shown_port}/metrics", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()


def _handler(settings: config.Settings) -> type[BaseHTTPRequestHandler]:
    class MetricsHandler(BaseHTTPRequestHandler):
        timeout = CLIENT_TIMEOUT  # (the connection's socket timeout)

        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self._reply(404, b"not found: culex serves /metrics\n", "text/plain")
                return
            try:
                body = render(settings)
            except CulexError as exc:  # the server is down or refuses: say so, not a trace
                logger.warning("metrics: %s", exc)
                self._reply(503, f"culex: {exc}\n".encode(), "text/plain")
                return
            self._reply(200, body, CONTENT_TYPE)

        def _reply(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            logger.debug("metrics: " + format, *args)

    return MetricsHandler
