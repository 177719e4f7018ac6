"""The back-off every runner loop keeps, each its own."""

from __future__ import annotations

from culex.runner.backoff import Backoff


def test_each_failure_doubles_the_pause_up_to_the_bound_and_a_success_starts_over() -> None:
    backoff = Backoff(0.05, 0.3)
    assert [backoff.failed() for _ in range(5)] == [0.05, 0.1, 0.2, 0.3, 0.3]
    backoff.failures = 0  # a success
    assert backoff.failed() == 0.05
