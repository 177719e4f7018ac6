"""culex.operations.stats: the counters read back per queue and job, by minute, hour, window and in
total; what a runner's work adds to them."""

from __future__ import annotations

import re
import sys
import types
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import redis

import culex
from culex._redis import commands
from culex._redis.calls import Call
from culex._redis.keys import QueueKeys, queue_keys
from culex.cli import main
from culex.operations import counters, stats
from culex.operations.stats import DURATION_BUCKETS, Bucket, Counts

from ..conftest import running, server_ms

DOCS = Path(__file__).resolve().parents[2] / "docs"

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)


class CountedJob(culex.QueuedJob):
    """Succeeds, or fails for good when told to."""

    queue = "counted"
    max_retries = 0
    ok: bool

    async def perform(self) -> None:
        if not self.ok:
            self.fail("told to", retry=False)


def durations(**at: int) -> tuple[int, ...]:
    """A histogram with counts at bucket indexes: durations(b3=2)."""
    out = [0] * (len(DURATION_BUCKETS) + 1)
    for name, n in at.items():
        out[int(name[1:])] = n
    return tuple(out)


def add(r: redis.Redis, key: str, **fields: int) -> None:
    """Counters as the scripts write them (`job__field` stands for `job|field`)."""
    for name, n in fields.items():
        r.hincrby(key, name.replace("__", "|"), n)


def counted(r: redis.Redis, keys: QueueKeys, minute: int, latest: int, **fields: int) -> None:
    """Counts of ``minute`` as the scripts leave them once ``latest`` is the last minute
    counted: in the minute's bucket and, for an earlier minute, folded into its hour and
    the totals (include/stats.lua). A read whose window holds whole hours reads those
    hours' buckets, and the minute not folded yet: a count written only to its minute's
    bucket would be missed, when the last hour's window is one whole hour (at xx:59)."""
    add(r, keys.stats_minute(minute), **fields)
    if minute < latest:
        add(r, keys.stats_hour(minute - minute % 3600), **fields)
        add(r, keys.stats_total, **fields)
    r.hset(keys.stats_total, "minute", latest)


# -- Counts ------------------------------------------------------------------------------------


def test_counts_add_and_processed() -> None:
    a = Counts(succeeded=2, failed=1, duration_sum=0.5, durations=durations(b3=3))
    b = Counts(dead=1, duration_sum=1.0, durations=durations(b3=1, b14=1))
    total = a + b
    assert total == Counts(2, 1, 1, 1.5, durations(b3=4, b14=1))
    assert total.processed == 4 and Counts().processed == 0
    assert Counts().durations == (0,) * 15 and len(DURATION_BUCKETS) == 14
    assert total.mean_duration == 1.5 / 5 and Counts().mean_duration is None


def test_duration_quantile_interpolates_inside_its_bucket() -> None:
    # 10 runs in (0.025, 0.05], 10 in (0.05, 0.1]
    counts = Counts(succeeded=20, durations=durations(b3=10, b4=10))
    assert counts.duration_quantile(0.5) == pytest.approx(0.05)
    assert counts.duration_quantile(0.75) == pytest.approx(0.075)
    assert counts.duration_quantile(0.0) == pytest.approx(0.025)
    assert Counts(durations=durations(b14=3)).duration_quantile(0.95) == 300.0
    assert Counts().duration_quantile(0.95) is None
    with pytest.raises(ValueError, match="between 0 and 1"):
        counts.duration_quantile(95)


def test_parse_counters_reads_job_names_with_bars_and_skips_unknown_fields() -> None:
    found = counters.parse_counters(
        {"a|b|s": "1", "a|b|ms": "1500", "a|b|s7": "2", "a|b|f14": "1", "x|d": "1", "junk": "9"}
        | {"x|s15": "5", "x|q": "5", "x|": "5"}
    )
    assert found == {
        "a|b": Counts(succeeded=3, failed=1, duration_sum=1.5, durations=durations(b7=2, b14=1)),
        "x": Counts(dead=1),
    }


def test_window_buckets_read_whole_hours_from_hours_and_the_edges_from_minutes() -> None:
    now = 10 * 3600 + 30 * 60 + 15  # 10:30:15
    hours, minutes = stats.window_buckets(now, 3600)  # 09:31 .. 10:30
    assert hours == [] and minutes == list(range(9 * 3600 + 31 * 60, 10 * 3600 + 31 * 60, 60))
    hours, minutes = stats.window_buckets(now, 3 * 3600)  # 07:31 .. 10:30
    assert hours == [8 * 3600, 9 * 3600]
    assert minutes == [*range(7 * 3600 + 31 * 60, 8 * 3600, 60), *range(10 * 3600, now - 14, 60)]
    assert len(minutes) * 60 + len(hours) * 3600 == 3 * 3600
    # minutes are kept 2 days: a longer window starts at its first minute's hour
    hours, minutes = stats.window_buckets(now, 3 * 86400)
    assert hours[0] == now - 3 * 86400 + 45 - 31 * 60 and len(hours) == 72
    assert minutes == list(range(10 * 3600, 10 * 3600 + 31 * 60, 60))


# -- reads -------------------------------------------------------------------------------------


def test_series_lists_non_empty_buckets_oldest_first(r: redis.Redis) -> None:
    a, b = queue_keys("culex", "a"), queue_keys("culex", "b")
    t0 = 1_700_000_040  # a minute's start
    add(r, a.stats_minute(t0), J__s1=2, J__ms=30)
    add(r, b.stats_minute(t0 - 60), J__d=1)
    add(r, a.stats_minute(t0 + 120), K__f=1)
    add(r, a.stats_minute(t0 + 180), J__s=5)  # after the range
    r.sadd("culex:queues", "a", "b")
    found = stats.series(since=t0 - 30, until=t0 + 150)
    assert found == [
        Bucket(t0 - 60.0, "b", "J", Counts(dead=1)),
        Bucket(float(t0), "a", "J", Counts(2, 0, 0, 0.03, durations(b1=2))),
        Bucket(t0 + 120.0, "a", "K", Counts(failed=1)),
    ]
    since = datetime.fromtimestamp(t0, UTC)
    assert [
        b.start for b in stats.series(queues=["b"], since=since - timedelta(minutes=1), until=since)
    ] == [t0 - 60.0]
    add(r, a.stats_hour(t0 - t0 % 3600), J__s=7)
    hourly = stats.series(queues=["a"], since=t0, until=t0 + 86400, step="hour")
    assert hourly == [Bucket(float(t0 - t0 % 3600), "a", "J", Counts(succeeded=7))]


def test_series_until_defaults_to_the_servers_now(r: redis.Redis) -> None:
    a = queue_keys("culex", "a")
    now = server_ms(r) // 1000
    add(r, a.stats_minute(now - now % 60), J__s=1)
    assert len(stats.series(queues=["a"], since=now - 60)) == 1
    with pytest.raises(ValueError, match="too long"):
        stats.series(queues=["a"], since=now - 3 * 86400)


def test_series_refuses_bad_arguments_before_any_read() -> None:
    with pytest.raises(ValueError, match="too long"):
        stats.series(since=0, until=2 * 86400 + 1)
    with pytest.raises(ValueError, match="too long"):
        stats.series(since=0, until=8 * 86400, step="hour")
    with pytest.raises(ValueError, match="before since"):
        stats.series(since=100, until=50)
    with pytest.raises(ValueError, match="step"):
        stats.series(since=0, until=60, step="day")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="since"):
        stats.series(since="yesterday")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="list of queue names"):
        stats.series(queues="a", since=0, until=60)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="braces"):
        stats.totals(queues=["a{b}"])
    with pytest.raises(TypeError, match="settings"):
        stats.totals("redis://x")  # type: ignore[arg-type]
    for window in (0, -5, 8 * 86400, timedelta(days=8)):
        with pytest.raises(ValueError, match="window"):
            stats.summary(window=window)
    with pytest.raises(TypeError, match="window"):
        stats.summary(window="1h")  # type: ignore[arg-type]


@pytest.mark.parametrize("at", ["now", "an hour's last minute"])
def test_summary_sums_the_window_per_queue(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch, at: str
) -> None:
    a = queue_keys("culex", "a")
    now = server_ms(r) // 1000
    if at != "now":  # the last hour is then one whole hour: its bucket is read, not minutes
        now = now - now % 3600 + 3599
        clock = Call((), ("TIME",), lambda _: now * 1000)
        monkeypatch.setattr(commands, "server_time", lambda: clock)
    minute = now - now % 60
    counted(r, a, minute, minute, J__s=2, K__d=1)
    counted(r, a, minute - 600, minute, J__f=3)  # 10 minutes ago
    r.sadd("culex:queues", "a", "idle")
    assert stats.summary(window=timedelta(minutes=5)) == {
        "a": Counts(succeeded=2, dead=1),
        "idle": Counts(),
    }
    assert stats.summary(queues=["a"])["a"] == Counts(succeeded=2, failed=3, dead=1)
    assert stats.job_summary(queues=["a"]) == {
        ("a", "J"): Counts(succeeded=2, failed=3),
        ("a", "K"): Counts(dead=1),
    }


def test_reads_add_the_minute_that_its_hour_and_the_totals_do_not_hold_yet(
    r: redis.Redis,
) -> None:
    a = queue_keys("culex", "a")
    now = server_ms(r) // 1000
    hour = now - now % 3600 - 7200  # 2 hours ago: read whole by a 4 h window
    add(r, a.stats_hour(hour), J__s=5)  # its minutes folded so far
    add(r, a.stats_minute(hour + 60), J__s=2)  # one of them
    add(r, a.stats_minute(hour + 120), K__d=3)  # the last minute counted: not folded yet
    add(r, a.stats_total, J__s=5)
    r.hset(a.stats_total, "minute", hour + 120)
    assert stats.totals(queues=["a"]) == {
        ("a", "J"): Counts(succeeded=5),
        ("a", "K"): Counts(dead=3),
    }
    assert stats.summary(queues=["a"], window=4 * 3600)["a"] == Counts(succeeded=5, dead=3)
    assert stats.series(queues=["a"], since=hour, until=hour + 3599, step="hour") == [
        Bucket(float(hour), "a", "J", Counts(succeeded=5)),
        Bucket(float(hour), "a", "K", Counts(dead=3)),
    ]
    assert len(stats.series(queues=["a"], since=hour, until=hour + 3599)) == 2  # (minutes)


async def test_a_runners_work_is_counted_and_read_by_every_read(r: redis.Redis) -> None:
    for ok in (True, True, False):
        await CountedJob(ok=ok).aenqueue()
    last = await CountedJob(ok=True).aenqueue()
    async with running(culex.Runner(run_from=["counted"])):
        await last.aresult(timeout=10)
        for _ in range(100):  # (the failed one may be reported after the last success)
            found = await stats.atotals()
            if found.get(("counted", "CountedJob"), Counts()).processed == 4:
                break
    counts = found[("counted", "CountedJob")]
    assert (counts.succeeded, counts.failed, counts.dead) == (3, 0, 1)
    assert sum(counts.durations) == 4 and counts.duration_sum >= 0
    assert (await stats.asummary())["counted"] == counts
    assert await stats.ajob_summary(queues=["counted"]) == {("counted", "CountedJob"): counts}
    since = datetime.now(UTC) - timedelta(minutes=2)
    minutes = await stats.aseries(since=since, queues=["counted"])
    assert sum((b.counts for b in minutes), Counts()) == counts
    hours = stats.series(since=since, step="hour")
    assert sum((b.counts for b in hours), Counts()) == counts


# -- culex stats -------------------------------------------------------------------------------


def test_culex_stats_prints_each_queue_and_job(
    r: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    a = queue_keys("culex", "a")
    now = server_ms(r) // 1000
    minute = now - now % 60
    counted(r, a, minute, minute, J__s3=18, J__d4=2, J__ms=1200, K__f=10)
    r.sadd("culex:queues", "a", "b")
    assert main(["stats"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "the last 1h"
    assert out[1].split() == [
        "queue", "processed", "succeeded", "failed", "dead", "tasks/min", "mean", "p95"
    ]  # fmt: skip
    # 30 in an hour; 20 timed, 60 ms on average; the 19th of 20 is in (50, 100] ms
    assert out[2].split() == ["a", "30", "18", "10", "2", "0.5", "60.0ms", "75.0ms"]
    assert out[3].split() == ["b", "0", "0", "0", "0", "0.0", "-", "-"]
    assert main(["stats", "--jobs", "--queue", "a", "--window", "15m"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "the last 15m" and out[1].split()[:2] == ["queue", "job"]
    assert [line.split()[:3] for line in out[2:]] == [["a", "J", "20"], ["a", "K", "10"]]
    with pytest.raises(SystemExit):
        main(["stats", "--window", "1w"])
    assert "a window is a whole number" in capsys.readouterr().err


def test_the_examples_of_the_metrics_page_run(
    r: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    """The Python blocks of docs/metrics.md's "Counters in Redis", in order, in one
    namespace, against the test server; each commented output is printed."""
    page = (DOCS / "metrics.md").read_text()
    section = page.split("## Counters in Redis\n", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"^```python\n(.*?)^```", section, flags=re.S | re.M)
    assert blocks
    module = types.ModuleType("culex_metrics_example")
    sys.modules[module.__name__] = module  # job classes resolve their annotations here
    try:
        for block in blocks:
            exec(compile(block, "metrics.md", "exec"), module.__dict__)
    finally:
        del sys.modules[module.__name__]
        for job in list(culex.registry):
            if job.__module__ == module.__name__:
                culex.registry.remove(job)
    expected = [
        line.split("# ", 1)[1].strip()
        for block in blocks
        for line in block.splitlines()
        if line.startswith("print(") and "# " in line
    ]
    assert capsys.readouterr().out.splitlines() == expected
