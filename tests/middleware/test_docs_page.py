"""docs/middleware.md: the page's examples, in order, in one namespace, print what it says."""

from __future__ import annotations

import re

import pytest
import redis

from ..test_docs import DOCS, run_examples


def test_the_middleware_examples_run_and_print_what_the_page_says(
    r: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    run_examples("middleware.md")
    printed = capsys.readouterr().out
    said = re.findall(r"^```text\n(.*?)^```", (DOCS / "middleware.md").read_text(), re.S | re.M)
    assert printed == "".join(said)
