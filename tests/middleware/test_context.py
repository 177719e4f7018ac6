"""ContextMiddleware: context variables set by the producer reach perform, a task enqueued
inside perform carries them on (the nested enqueue that must not lose the tenant), a retry
keeps them, and values that would not come back equal are refused at enqueue."""

from __future__ import annotations

import contextvars
import json
from typing import Any

import pytest
import redis

import culex
from culex.testing import drain

from .jobs import MwContextJob, MwProcessJob, locale, seen, tenant


def _configure() -> None:
    # (a succeeded task's hash kept a minute: the test reads it after the run)
    culex.configure(middleware=[culex.ContextMiddleware(tenant, locale)], successful_job_ttl=60)


def test_the_producers_context_reaches_perform_and_a_nested_enqueue(r: redis.Redis) -> None:
    _configure()
    context = contextvars.copy_context()
    context.run(tenant.set, "acme")
    context.run(locale.set, {"lang": "fr", "rtl": False})
    task = context.run(MwContextJob(nested=True).enqueue)
    stored = r.hget(f"culex:{{mw_context}}:task:{task.id}", "headers")
    assert stored is not None
    assert json.loads(stored) == {"ctx.tenant": '"acme"', "ctx.locale": '{"lang":"fr","rtl":false}'}
    assert tenant.get("none") == "none"  # (set in the copied context only)
    attempts = drain("mw_context")
    assert [a.result for a in attempts] == [["acme", {"lang": "fr", "rtl": False}]] * 2
    assert [entry[1] for entry in seen] == [True, False]  # the parent, then its child
    assert tenant.get("none") == "none"  # (reset once perform ended)


def test_a_retry_keeps_the_context_and_the_headers_are_written_once(r: redis.Redis) -> None:
    _configure()
    context = contextvars.copy_context()
    context.run(tenant.set, "globex")
    task = context.run(MwContextJob(fail_first=True).enqueue)
    key = f"culex:{{mw_context}}:task:{task.id}"
    before = r.hget(key, "headers")
    attempts = drain("mw_context", fail_fast=False)
    assert [a.outcome for a in attempts] == ["failed", "succeeded"]
    assert attempts[1].result == ["globex", "none"]  # (locale was not set: left alone)
    assert before is not None and r.hget(key, "headers") == before
    # enqueued again under its id: nothing changes, the first headers stay
    context.run(tenant.set, "initech")
    again = context.run(MwContextJob().enqueue, id="mw-ctx-same")
    context.run(tenant.set, "umbrella")
    context.run(MwContextJob().enqueue, id="mw-ctx-same")
    stored = r.hget(f"culex:{{mw_context}}:task:{again.id}", "headers")
    assert stored is not None and json.loads(stored) == {"ctx.tenant": '"initech"'}


def test_a_process_job_gets_the_context_in_its_child(r: redis.Redis) -> None:
    _configure()
    context = contextvars.copy_context()
    context.run(tenant.set, "hooli")
    context.run(MwProcessJob().enqueue)
    (attempt,) = drain("mw_process")
    assert attempt.result[2] == "hooli"


@pytest.mark.parametrize(
    "value, error",
    [
        ((1, 2), TypeError),  # a tuple would come back a list
        ({1: "a"}, TypeError),
        (float("nan"), ValueError),
        (object(), TypeError),
        ([b"bytes"], TypeError),
    ],
)
def test_a_value_json_would_not_give_back_is_refused_at_enqueue(
    r: redis.Redis, value: Any, error: type[Exception]
) -> None:
    _configure()
    context = contextvars.copy_context()
    context.run(locale.set, value)
    with pytest.raises(error, match="ContextMiddleware: locale"):
        context.run(MwContextJob().enqueue)
    assert r.keys("culex:{mw_context}:task:*") == []


def test_context_middleware_takes_context_variables_only() -> None:
    with pytest.raises(TypeError, match=r"contextvars\.ContextVar"):
        culex.ContextMiddleware("tenant")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="two variables named"):
        culex.ContextMiddleware(tenant, contextvars.ContextVar("tenant"))
