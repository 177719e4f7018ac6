"""/metrics writes the queues' gauges itself (prometheus_client's objects a sample cost
seconds at 100,000 queues): its text is the one prometheus_client gives, byte for byte."""

from __future__ import annotations

import pytest

pytest.importorskip("prometheus_client", reason="metrics need their extra: culex[metrics]")

from culex import metrics
from culex.stats import Counts


def test_the_text_is_prometheus_client_s_own() -> None:
    names = ["emails", 'a"quote', "back\\slash", "new\nline", "bad\udcffname", "émoji_✓"]
    counts = {
        name: {"waiting": 3 * i, "pending": 10**17, "scheduled": 0, "dead": i}
        for i, name in enumerate(names)
    }
    seconds = (0.0, 1.5, 1e-7, 86400.25, 3.0, 2e9)
    latency = dict(zip(names, seconds, strict=True))
    totals = {("emails", "SendJob"): Counts(succeeded=5, failed=1, dead=2)}
    snapshot = metrics.Snapshot(counts, latency, 4, totals)
    mine = metrics._rendered(snapshot)
    assert mine == metrics._text(metrics.families(snapshot))
    assert b'culex_queue_tasks{queue="a\\"quote",state="waiting"} 3.0\n' in mine
    assert b"culex_runners 4.0\n" in mine
