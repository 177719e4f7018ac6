"""Settings: checks, and the precedence CLI flag > environment > code > default."""

from __future__ import annotations

import pytest

import culex
from culex import config


def test_defaults_are_the_seeds() -> None:
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
    monkeypatch.setenv("CULEX_IDLE_WAIT", "soon")
    config.reset()
    with pytest.raises(culex.ConfigurationError, match="environment: idle_wait"):
        config.settings()
    monkeypatch.delenv("CULEX_IDLE_WAIT")
    config.reset()
