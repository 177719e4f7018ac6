"""The Prometheus text of what a scrape read (a :class:`Snapshot`): the metric families,
with their fixed names and labels (alerts are written against them: docs/metrics.md), and
the queues' gauges written here line by line, byte for byte as prometheus_client writes
them (tests/operations/test_metrics_text.py): its objects a sample cost seconds at 100,000 queues.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import cast

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry
from prometheus_client.utils import floatToGoString

from .._redis.calls import shown
from .browsing import STATES
from .counters import DURATION_BUCKETS, Counts


@dataclass(frozen=True)
class Snapshot:
    """What one scrape read: per queue, its counts by state and its latency in seconds;
    how many runners are alive; per (queue, job), the counters since counting began."""

    counts: dict[str, dict[str, int]]
    latency: dict[str, float]
    runners: int
    totals: dict[tuple[str, str], Counts]


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


def rendered(snapshot: Snapshot, parts: list[Lines] | None = None) -> bytes:
    """What ``prometheus_text(families(snapshot))`` gives, byte for byte
    (tests/operations/test_metrics_text.py), with the queues' gauges written here: prometheus_client
    makes objects for each of their samples, five a queue, which at 100,000 queues took
    seconds of a scrape.
    ``parts``: those lines as written already for the snapshot's queues, part by part, in
    order (None, or a part's None: write them here)."""
    if parts is None or None in parts:
        snapshot = _readable(snapshot)
        parts = [queue_lines(snapshot.counts, snapshot.latency)]
    tasks = [f"# HELP {TASKS} {TASKS_HELP}\n# TYPE {TASKS} gauge\n"]
    latency = [f"# HELP {LATENCY} {LATENCY_HELP}\n# TYPE {LATENCY} gauge\n"]
    for part in parts:
        assert part is not None
        tasks.append(part[0])
        latency.append(part[1])
    return "".join(tasks + latency).encode() + prometheus_text(_others(snapshot))


Lines = tuple[str, str] | None
"""Some queues' lines of culex_queue_tasks and of culex_queue_latency_seconds (None: not
written, as a name is not a label as it is: _readable)."""


def queue_lines(counts: dict[str, dict[str, int]], latency: dict[str, float]) -> Lines:
    """The lines of culex_queue_tasks and of culex_queue_latency_seconds of these queues,
    their names taken as labels as they are."""
    tasks: list[str] = []
    latencies: list[str] = []
    for queue, row in counts.items():
        label = queue.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")
        tasks.append(
            task_lines(label, row["waiting"], row["pending"], row["scheduled"], row["dead"])
        )
        latencies.append(f'{LATENCY}{{queue="{label}"}} {seconds_text(latency[queue])}\n')
    return "".join(tasks), "".join(latencies)


def task_lines(label: str, waiting: int, pending: int, scheduled: int, dead: int) -> str:
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


def seconds_text(value: float) -> str:
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


class _Read(Collector):
    """Families already read, as a collector (what generate_latest takes)."""

    def __init__(self, found: list[Metric]) -> None:
        self.found = found

    def collect(self) -> Iterable[Metric]:
        return self.found

    def describe(self) -> Iterable[Metric]:
        return []


def prometheus_text(found: list[Metric]) -> bytes:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Read(found))
    return generate_latest(registry)
