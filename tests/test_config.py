"""Settings: checks, and the precedence CLI flag > environment > code > default."""

from __future__ import annotations

import re

import pytest

import culex
from culex import config
from culex._redis.address import Address
from culex._redis.scripts import MOST


def test_defaults_are_mosquitos() -> None:
    s = culex.Settings()
    assert (s.idle_wait, s.successful_job_ttl, s.failed_job_ttl) == (0.1, 1.0, 86400.0)
    assert (s.run_cron_scheduler, s.run_from, s.lease, s.concurrency) == (True, (), 30.0, 10)


def test_precedence(monkeypatch: pytest.MonkeyPatch) -> None:
    try:
        culex.configure(concurrency=3, idle_wait=0.5, lease=10)
        monkeypatch.setenv("CULEX_CONCURRENCY", "5")
        monkeypatch.setenv("CULEX_LEASE", "20")
        config.reset()
        culex.configure(concurrency=3, idle_wait=0.5, lease=10)
        s = config.settings(lease=40)
        assert (s.idle_wait, s.concurrency, s.lease) == (0.5, 5, 40.0)
    finally:
        config.reset()


def test_the_command_line_wins_over_everything_for_the_whole_process(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CULEX_LEASE", "20")
    monkeypatch.setenv("CULEX_DURABLE_ENQUEUE", "no")
    config.reset()
    try:
        culex.configure(lease=10, idle_wait=0.5)
        config.set_flags({"lease": "40", "durable_enqueue": True, "concurrency": "7"})
        s = config.settings()
        assert (s.lease, s.durable_enqueue, s.concurrency, s.idle_wait) == (40.0, True, 7, 0.5)
        with pytest.raises(culex.ConfigurationError, match="command line: lease"):
            config.set_flags({"lease": "soon"})
        assert config.settings().lease == 40.0  # a refused set changes nothing
    finally:
        config.set_flags({})
        config.reset()
    assert config.settings().lease == 20.0


def test_bad_values_are_refused_with_clear_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(culex.ConfigurationError, match="unknown setting 'idle_time'"):
        culex.configure(idle_time=1)
    with pytest.raises(culex.ConfigurationError, match="concurrency"):
        culex.configure(concurrency=0)
    with pytest.raises(culex.ConfigurationError, match="redis_url"):
        culex.configure(redis_url="localhost:6379")
    with pytest.raises(culex.ConfigurationError, match="run_from"):
        culex.configure(run_from=["a b"])
    with pytest.raises(culex.ConfigurationError, match=r"^the argument concurrency must be"):
        culex.Runner(concurrency=0)
    monkeypatch.setenv("CULEX_IDLE_WAIT", "soon")
    config.reset()
    with pytest.raises(culex.ConfigurationError, match="environment: idle_wait"):
        config.settings()
    monkeypatch.delenv("CULEX_IDLE_WAIT")
    config.reset()


@pytest.mark.parametrize(
    "url",
    [
        "http://user:secret@host:6379",  # a scheme culex does not take
        "redis:/user:secret@host",  # one slash: no login that urlsplit sees
        "user:secret@host:6379",  # no scheme
        "redis://user:secret@[host",  # an unclosed [: urlsplit itself refuses it
        "redis://user:sec/ret@host",  # a / in the password, not percent-encoded
        "redis://user:secret@host:99999999",
        "redis+sentinel://user:secret@[s1/mymaster",
    ],
)
def test_a_redis_url_that_is_refused_never_shows_its_password(url: str) -> None:
    with pytest.raises(culex.ConfigurationError, match=r"redis_url|bad Redis URL") as refused:
        culex.configure(redis_url=url)  # (the scheme is checked here)
        Address.parse(url)  # (the rest where a connection is made)
    config.reset()
    assert "secret" not in str(refused.value) and "ret@" not in str(refused.value)
    assert "***@" in str(refused.value)


def test_a_huge_value_is_refused_with_a_short_error() -> None:
    for refuse in (
        lambda: culex.configure(concurrency="9" * 5000 + "x"),
        lambda: culex.configure(redis_url="x" * 100_000),
        lambda: culex.configure(run_from=["q" * 100_000]),
        lambda: culex.pause("q" * 100_000),
        lambda: culex.limit("emails", rate="1" * 100_000),
        lambda: type("HugeCronJob", (culex.PeriodicJob,), {"cron": "*" * 100_000}),
    ):
        with pytest.raises((culex.ConfigurationError, ValueError, TypeError)) as refused:
            refuse()
        assert len(str(refused.value)) < 500, str(refused.value)[:100]
    config.reset()


def test_run_from_takes_weights_and_keeps_plain_names_as_they_are(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert config.check({"run_from": "a,b:c"}, "t") == {"run_from": ("a", "b:c")}
    weighted = config.check({"run_from": ["critical:6", "default: 3", "low:1"]}, "t")
    assert weighted == {"run_from": ("critical:6", "default:3", "low")}
    assert config.queue_weights(weighted["run_from"]) == {"critical": 6, "default": 3, "low": 1}
    # A dict takes any queue name, even one that ends in a colon and a number.
    kept = config.check({"run_from": {"v:2": 1, "x": 1000}}, "t")["run_from"]
    assert config.queue_weights(kept) == {"v:2": 1, "x": 1000}
    monkeypatch.setenv("CULEX_RUN_FROM", "critical:6,default:3")
    monkeypatch.setenv("CULEX_STRICT_QUEUES", "yes")
    config.reset()
    try:
        s = config.settings()
        assert (s.run_from, s.strict_queues) == (("critical:6", "default:3"), True)
    finally:
        monkeypatch.undo()
        config.reset()


@pytest.mark.parametrize(
    ("run_from", "message"),
    [
        ("a:0", "the weight of queue 'a' must be a whole number from 1 to 1000, got 0"),
        ("a:1001", "got 1001"),
        ("a:1.5", "got '1.5'"),
        ("a:-2", "got '-2'"),
        ({"a": "6"}, "got '6'"),
        ({"a": True}, "got True"),
        ("a:", "'a:' has a colon but no weight after it"),
        ("a,b:2,a:3", "the queue 'a' is named twice"),
        (7, "must be a list of queue names"),
    ],
)
def test_bad_weights_are_refused_with_clear_errors(run_from: object, message: str) -> None:
    with pytest.raises(culex.ConfigurationError, match=f"run_from.*{re.escape(message)}"):
        culex.configure(run_from=run_from)


def test_durations_and_counts_stay_in_what_the_scripts_take() -> None:
    """A script takes a whole number up to 2^42 - 1 (lua/include/numbers.lua): a longer
    duration is sent as that (139 years), and a dead_max past it is refused here, not by
    the server at the first death."""
    s = config.settings(failed_job_ttl=1e12, successful_job_ttl=1e12, lease=1e12)
    assert (s.failed_job_ttl_ms, s.successful_job_ttl_ms, s.lease_ms) == (MOST, MOST, MOST)
    assert config.settings(dead_max=MOST).dead_max == MOST
    with pytest.raises(culex.ConfigurationError, match=f"dead_max must be .* from 1 to {MOST}"):
        config.settings(dead_max=MOST + 1)
