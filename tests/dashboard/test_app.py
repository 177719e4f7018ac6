"""culex.dashboard.app() and culex dashboard refuse bad input with a clear error."""

from __future__ import annotations

import asyncio
import base64
import os
import re
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import redis

import culex
from culex import cli, config, logs

from ..conftest import wait_until

pytest.importorskip("starlette", reason="the dashboard needs its extra: pip install -e '.[test]'")

from culex.dashboard import app


def test_app_keeps_its_state_on_itself() -> None:
    first = app(config.Settings(prefix="one"), read_only=True)
    second = app(config.Settings(prefix="two"))
    assert (first.state.settings.prefix, first.state.read_only) == ("one", True)
    assert (second.state.settings.prefix, second.state.read_only) == ("two", False)
    assert first.state.secret != second.state.secret  # random per app when not given
    assert app(secret="s" * 16).state.secret == b"s" * 16


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"settings": {"redis_url": "x"}}, TypeError, "settings must be a culex.config.Settings"),
        ({"read_only": "yes"}, TypeError, "read_only must be a bool"),
        ({"basic_auth": ("ops",)}, ValueError, "basic_auth must be a (user, password)"),
        ({"basic_auth": ("ops", "")}, ValueError, "basic_auth must be a (user, password)"),
        ({"basic_auth": "ops:pw"}, ValueError, "basic_auth must be a (user, password)"),
        ({"basic_auth": ("o:ps", "pw")}, ValueError, "cannot hold ':'"),
        ({"secret": "short"}, ValueError, "at least 16 characters"),
        ({"secret": b"x" * 20}, ValueError, "secret must be a str"),
    ],
)
def test_app_refuses_bad_input(kwargs: dict[str, object], error: type, message: str) -> None:
    with pytest.raises(error) as refused:
        app(**kwargs)  # type: ignore[arg-type]
    assert message in str(refused.value)


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--basic-auth", "ops"], "--basic-auth takes USER:PASSWORD"),
        (["--basic-auth", ":pw"], "--basic-auth takes USER:PASSWORD"),
        (["--port", "70000"], "--port must be 1 to 65535"),
    ],
)
def test_culex_dashboard_refuses_bad_flags(
    flags: list[str],
    message: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setattr(logs, "configure", lambda *args, **kwargs: None)
    assert cli.main(["dashboard", *flags]) == 2
    assert message in capsys.readouterr().err


def test_culex_dashboard_serves_the_app(url: str, tmp_path: Path) -> None:
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    command = [sys.executable, "-m", "culex", "dashboard", "--port", str(port)]
    flags = ["--redis-url", url, "--read-only", "--basic-auth", "ops:s3cret"]
    env = {**os.environ, "PYTHONPATH": str(Path(culex.__file__).parent.parent)}
    with open(tmp_path / "log", "wb") as log:
        served = subprocess.Popen([*command, *flags], stdout=log, stderr=log, env=env)
    home = f"http://127.0.0.1:{port}/"
    try:
        refused = wait_until(lambda: _status(home, None), timeout=30, what="the dashboard")
        assert refused == 401
        login = "Basic " + base64.b64encode(b"ops:s3cret").decode()
        with urllib.request.urlopen(
            urllib.request.Request(home, headers={"Authorization": login})
        ) as page:
            body = page.read().decode()
        assert "<title>Overview · culex</title>" in body and 'id="read-only"' in body
    finally:
        served.terminate()
        served.wait(30)


def _status(address: str, authorization: str | None) -> int | None:
    headers = {"Authorization": authorization} if authorization else {}
    try:
        with urllib.request.urlopen(urllib.request.Request(address, headers=headers)) as page:
            return int(page.status)
    except urllib.error.HTTPError as answer:
        answer.close()
        return answer.code
    except OSError:
        return None  # not listening yet


def test_a_dashboard_on_another_prefix_shows_that_prefix_tasks(url: str) -> None:
    from .conftest import serve

    class PrefixedJob(culex.QueuedJob):
        note: str

    try:
        config.configure(prefix="elsewhere")
        task = PrefixedJob(note="under another prefix").enqueue()
    finally:
        config.reset()
        culex.registry.remove(PrefixedJob)
    query = f"queue={task.queue}&id={task.id}"
    with serve(app(config.Settings(redis_url=url, prefix="elsewhere"))) as base:
        with urllib.request.urlopen(f"{base}/task?{query}", timeout=10) as answer:
            shown = answer.read().decode()
        with urllib.request.urlopen(f"{base}/task/text?{query}&field=params", timeout=10) as answer:
            params = answer.read().decode()
    assert "waiting" in shown  # the task page reads the record under the app's prefix
    assert "under another prefix" in params


def test_the_task_page_shows_progress_and_push_backs_escaped(r: redis.Redis, url: str) -> None:
    from culex._redis import claims, reports
    from culex._redis.keys import queue_keys

    from ..conftest import driver_of
    from .conftest import serve

    class ProgressShownJob(culex.QueuedJob):
        queue = "progress_shown"

    try:
        task = ProgressShownJob().enqueue()
    finally:
        culex.registry.remove(ProgressShownJob)
    keys, d = queue_keys("culex", task.queue), driver_of(r)
    [claimed] = d.run(
        claims.claim(keys, limit=1, lease_ms=60_000, promote_limit=1, dead_ttl_ms=60_000)
    ).tasks
    message = '<script>alert("x")</script> 4 of 10 & more'
    assert d.run(reports.progress(keys, task.id, claimed.attempt, 0.4, message))
    later = reports.retry_later(
        keys, task.id, claimed.attempt, 60_000, dead_ttl_ms=60_000, dead_max=10
    )
    assert d.run(later)
    with serve(app(config.Settings(redis_url=url))) as base:
        address = f"{base}/task?queue={task.queue}&id={task.id}"
        with urllib.request.urlopen(address, timeout=10) as answer:
            shown = answer.read().decode()
    assert '<progress max="100" value="40.0">40%</progress> 40%' in shown
    assert "&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt; 4 of 10 &amp; more" in shown
    assert "<script>alert" not in shown
    assert "1 time(s), by RetryLater" in shown and "retry later at" in shown


def test_a_time_no_datetime_holds_is_shown_as_stored(r: redis.Redis, url: str) -> None:
    from .conftest import serve

    class FarShownJob(culex.QueuedJob):
        queue = "far_shown"

    try:
        task = FarShownJob().enqueue(delay=60)
    finally:
        culex.registry.remove(FarShownJob)
    # (as another producer could write it: the year 33715)
    r.hset(f"culex:{{far_shown}}:task:{task.id}", "due_at", "1000000000000000")
    r.zadd("culex:{far_shown}:scheduled", {task.id: 1e15})
    with serve(app(config.Settings(redis_url=url))) as base:
        for page in (f"task?queue=far_shown&id={task.id}", "queue?queue=far_shown&state=scheduled"):
            with urllib.request.urlopen(f"{base}/{page}", timeout=10) as answer:
                assert answer.status == 200
                assert "1000000000000000 ms" in answer.read().decode(), page


def test_priority_group_and_dedupe_key_are_shown_where_a_task_has_them(url: str) -> None:
    from .conftest import serve

    class SteeredShownJob(culex.QueuedJob):
        queue = "steered_shown"

    class PlainShownJob(culex.QueuedJob):
        queue = "plain_shown"

    try:
        steered = SteeredShownJob().enqueue(priority=7, group="customer:42", dedupe_key="once")
        SteeredShownJob().enqueue()
        PlainShownJob().enqueue()
    finally:
        culex.registry.remove(SteeredShownJob)
        culex.registry.remove(PlainShownJob)

    def page(path: str) -> str:
        with urllib.request.urlopen(f"{base}/{path}", timeout=10) as answer:
            return str(answer.read().decode())

    with serve(app(config.Settings(redis_url=url))) as base:
        listed = page("queue?queue=steered_shown")
        plain = page("queue?queue=plain_shown")
        shown = page(f"task?queue=steered_shown&id={steered.id}")
    assert '<th class="num">priority</th><th>group</th>' in listed
    assert '<td class="num">7</td>' in listed and "<code>customer:42</code>" in listed
    assert "<th>group</th>" not in plain and ">priority</th>" not in plain
    assert '<dd id="task-priority">7</dd>' in shown
    assert '<dd id="task-group"><code>customer:42</code></dd>' in shown
    assert '<dd id="task-dedupe-key"><code>once</code></dd>' in shown


async def test_the_task_page_shows_each_attempt_s_error_with_its_traceback(
    r: redis.Redis, url: str
) -> None:
    import inspect
    from datetime import timedelta

    from culex._redis import claims, reports
    from culex._redis.keys import queue_keys

    from ..conftest import driver_of, running
    from .conftest import serve

    class TracedShownJob(culex.QueuedJob):
        queue = "traced_shown"
        max_retries = 1

        def perform(self) -> None:
            raise ValueError(f"attempt {self.attempt} <b>broke</b>")

        def reschedule_interval(self, retry_count: int) -> timedelta:
            return timedelta(0)

    try:
        task = await TracedShownJob().aenqueue()
        async with running(culex.Runner(run_from=["traced_shown"])):
            with pytest.raises(culex.TaskFailed):
                await task.aresult(timeout=20)
        older = await TracedShownJob().aenqueue()
    finally:
        culex.registry.remove(TracedShownJob)
    # One that failed under a culex that kept no errors: its last error alone.
    keys, d = queue_keys("culex", "traced_shown"), driver_of(r)
    [claimed] = d.run(
        claims.claim(keys, limit=1, lease_ms=60_000, promote_limit=1, dead_ttl_ms=60_000)
    ).tasks
    d.run(
        reports.fail(keys, older.id, claimed.attempt, "ValueError: old", retry_delay_ms=None,
                     dead_ttl_ms=60_000, dead_max=10)
    )  # fmt: skip
    with serve(app(config.Settings(redis_url=url))) as base:
        page, old_page = [
            await asyncio.to_thread(_read, f"{base}/task?queue=traced_shown&id={shown.id}")
            for shown in (task, older)
        ]
    lines, first = inspect.getsourcelines(TracedShownJob.perform)
    number = first + next(i for i, line in enumerate(lines) if "raise ValueError" in line)
    where = f"File &#34;{__file__}&#34;, line {number}, in perform"
    # (each attempt's: culex's frames before it folded, and in the whole traceback below)
    assert page.count(where) == 4 and '<div id="errors">' in page
    assert page.count("culex frames folded: the whole traceback below)") == 2
    newest, oldest = page.index("attempt 2 ·"), page.index("attempt 1 ·")
    assert newest < oldest  # (newest first, and open)
    opened = r'<details class="attempt-error" id="error-2-\d+" open>\n  <summary>attempt 2 ·'
    assert re.search(opened, page)
    assert "ValueError: attempt 2 &lt;b&gt;broke&lt;/b&gt;" in page and "<b>broke" not in page
    assert 'id="last-error"' in old_page and "ValueError: old" in old_page
    assert 'id="errors"' not in old_page


def _read(address: str) -> str:
    with urllib.request.urlopen(address, timeout=10) as answer:
        return str(answer.read().decode())
