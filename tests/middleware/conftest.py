"""Each test starts with no middleware and an empty record of what the hooks saw."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from culex import config

from . import jobs


@pytest.fixture(autouse=True)
def fresh() -> Iterator[None]:
    jobs.seen.clear()
    yield
    config.reset()
    jobs.seen.clear()
