"""/metrics writes the queues' gauges itself (prometheus_client's objects a sample cost
seconds at 100,000 queues): its text is the one prometheus_client gives, byte for byte."""

from __future__ import annotations

import pytest

pytest.importorskip("prometheus_client", reason="metrics need their extra: culex[metrics]")

from culex.operations import exposition
from culex.operations.stats import Counts


def test_the_text_is_prometheus_client_s_own() -> None:
    names = ["emails", 'a"quote', "back\\slash", "new\nline", "bad\udcffname", "émoji_✓"]
    counts = {
        name: {"waiting": 3 * i, "pending": 10**17, "scheduled": 0, "dead": i}
        for i, name in enumerate(names)
    }
    seconds = (0.0, 1.5, 1e-7, 86400.25, 3.0, 2e9)
    latency = dict(zip(names, seconds, strict=True))
    totals = {("emails", "SendJob"): Counts(succeeded=5, failed=1, dead=2)}
    snapshot = exposition.Snapshot(counts, latency, 4, totals)
    mine = exposition.rendered(snapshot)
    assert mine == exposition.prometheus_text(exposition.families(snapshot))
    assert b'culex_queue_tasks{queue="a\\"quote",state="waiting"} 3.0\n' in mine
    assert b"culex_runners 4.0\n" in mine


def test_the_numbers_at_the_edges_of_the_quick_ways_are_written_as_go_writes_them() -> None:
    """A count below 10**6 and a latency from 0 to 1e16 are written without prometheus_client
    (exposition.rendered): at and around those edges, the text is still its own."""
    counts = [0, 1, 999_999, 1_000_000, 1_234_567, 10**16, 10**17 + 3]
    seconds = [0.0, 5e-324, 0.1, 999_999.9, 1e6, 1_234_567.5, 123_456_789.125,
               9_999_999_999_999_998.0, 1e16, 1.5e300]  # fmt: skip
    names = [f"q{i}" for i in range(len(seconds))]
    snapshot = exposition.Snapshot(
        {
            name: dict(
                zip(("waiting", "pending", "scheduled", "dead"), counts[i % 4 :], strict=False)
            )
            for i, name in enumerate(names)
        },
        dict(zip(names, seconds, strict=True)),
        0,
        {},
    )
    mine = exposition.rendered(snapshot)
    assert mine == exposition.prometheus_text(exposition.families(snapshot))
    assert b'culex_queue_tasks{queue="q2",state="waiting"} 999999.0\n' in mine
    assert b'culex_queue_tasks{queue="q2",state="pending"} 1e+06\n' in mine
    assert b'culex_queue_latency_seconds{queue="q6"} 1.23456789125e+08\n' in mine
