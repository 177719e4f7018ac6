"""The throughput chart's data: the buckets summed per step, quiet steps as zeros, every
range answered."""

from __future__ import annotations

import json
import urllib.request

import pytest
import redis

from culex import config
from culex.operations import stats

pytest.importorskip("starlette", reason="the dashboard needs its extra: pip install -e '.[test]'")

from culex.dashboard import app
from culex.dashboard.throughput import columns_of

from .conftest import serve


def bucket(start: float, queue: str, job: str, ok: int, failed: int, dead: int) -> stats.Bucket:
    return stats.Bucket(start, queue, job, stats.Counts(succeeded=ok, failed=failed, dead=dead))


def test_columns_sum_every_queue_and_job_per_step_with_zeros_between() -> None:
    buckets = [
        bucket(600, "a", "J", 5, 1, 0),
        bucket(600, "b", "K", 2, 0, 1),
        bucket(720, "a", "J", 1, 0, 0),
        bucket(60, "a", "J", 9, 9, 9),  # before the range: left out
    ]
    columns = columns_of(buckets, since=590, until=750, step="minute")
    assert columns["t"] == [540, 600, 660, 720]
    assert columns["processed"] == [0, 9, 0, 1]
    assert columns["failed"] == [0, 1, 0, 0]
    assert columns["dead"] == [0, 1, 0, 0]
    assert columns["step"] == "minute"


def test_every_range_answers(r: redis.Redis) -> None:
    with serve(app(config.settings())) as url:
        for name in ("hour", "day", "week") * 3:
            with urllib.request.urlopen(f"{url}/series?range={name}") as answer:
                columns = json.loads(answer.read())
            assert columns["step"] == ("minute" if name == "hour" else "hour")
            assert len(columns["t"]) == {"hour": 61, "day": 25, "week": 169}[name]
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{url}/series?range=year")
        refused.value.close()
        assert refused.value.code == 400
