"""What the enqueue keeps from one task to the next (a header's member text, a context
variable's quoted value) gives the same text as writing it anew, and never lets through
what the checks refuse: a str subclass equal to a kept value, a name out of bounds."""

from __future__ import annotations

import contextvars
import json
from typing import Any

import pytest

import culex
from culex.middleware.hooks import MAX_HEADER_NAME, headers_text


class Tagged(str):
    """A str subclass: headers refuse it, even equal to a header kept before."""


class KeptJob(culex.QueuedJob):
    queue = "mw_kept"

    def perform(self) -> None:
        pass


def _json(headers: dict[str, str]) -> str:
    return json.dumps(headers, ensure_ascii=False, separators=(",", ":"))


@pytest.mark.parametrize(
    "headers",
    [
        {"by": "bench-user"},
        {"ctx.tenant": '"acme"', "q": 'a "quoted" \\ back\\slash'},
        {"control": "a\nb\tc\x00d\x1f", "é名": "ünïcode ✓", "empty": ""},
        {"n" * MAX_HEADER_NAME: "v" * 2000},  # (too long to keep: written each time)
    ],
)
def test_headers_are_written_as_json_writes_them_the_first_time_and_after(
    headers: dict[str, str],
) -> None:
    job = KeptJob()
    assert headers_text(headers, job) == _json(headers)
    assert headers_text(dict(headers), job) == _json(headers)  # (the kept members)
    changed = {name: value + "!" for name, value in headers.items()}
    assert headers_text(changed, job) == _json(changed)


def test_headers_of_two_kinds_in_turns_are_each_written_as_they_are() -> None:
    job = KeptJob()
    one, two = {"by": "ann"}, {"by": "ann", "to": "bob"}
    for headers in (one, two, one, dict(one), two, {"to": "bob", "by": "ann"}):
        assert headers_text(headers, job) == _json(headers)


def test_a_header_kept_before_is_checked_again_when_its_objects_change() -> None:
    job = KeptJob()
    assert headers_text({"by": "someone"}, job) == '{"by":"someone"}'
    with pytest.raises(TypeError, match="a header is str to str"):
        headers_text({"by": Tagged("someone")}, job)
    with pytest.raises(TypeError, match="a header is str to str"):
        headers_text({Tagged("by"): "someone"}, job)
    with pytest.raises(ValueError, match="a header name has 1 to"):
        headers_text({"": "someone"}, job)
    with pytest.raises(ValueError, match="a header name has 1 to"):
        headers_text({"n" * (MAX_HEADER_NAME + 1): "someone"}, job)
    with pytest.raises(ValueError, match="more than 100"):
        headers_text({f"h{i}": "someone" for i in range(101)}, job)


def test_context_values_kept_quoted_are_the_values_set_now() -> None:
    tenant: contextvars.ContextVar[Any] = contextvars.ContextVar("kept_tenant")
    middleware = culex.ContextMiddleware(tenant)
    job = KeptJob()

    def enqueued(value: Any, headers: dict[str, str]) -> None:
        tenant.set(value)
        middleware.on_enqueue(job, headers)

    def written(value: Any) -> dict[str, str]:
        headers: dict[str, str] = {}
        contextvars.copy_context().run(enqueued, value, headers)
        return headers

    acme = "acme"
    assert written(acme) == written(acme) == {"ctx.kept_tenant": '"acme"'}
    assert written("globex") == {"ctx.kept_tenant": '"globex"'}
    assert written(["a"]) == {"ctx.kept_tenant": '["a"]'}
    with pytest.raises(TypeError, match="a context value is str"):
        written(Tagged("globex"))  # (equal to the value kept: refused all the same)
