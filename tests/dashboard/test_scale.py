"""Pages that read every queue stay bounded: with 2,000 queues, the overview, its chart, the
Dead page and a dead tab read a page of queues (or one set a queue), counted by the
server's own command statistics; /metrics has every queue's series."""

from __future__ import annotations

import re
import urllib.request

import httpx
import pytest
import redis

import culex
from culex import config
from culex._redis.keys import queues_key
from culex.operations import inspection

pytest.importorskip("starlette", reason="the dashboard needs its extra: pip install -e '.[test]'")

from culex.dashboard import app
from culex.dashboard.pages import QUEUES_SHOWN

from .conftest import serve

QUEUES = 2000
NAMES = [f"scale{i:04d}" for i in range(QUEUES)]


class ScaleDeadJob(culex.QueuedJob):
    queue = "scale1500"

    def perform(self) -> None:
        pass


def registered(r: redis.Redis) -> None:
    """2,000 queues known (a producer's registry), one dead task in scale1500."""
    r.sadd(queues_key("culex"), *NAMES)
    task = ScaleDeadJob().enqueue()
    assert task.cancel("gave up")


def calls(r: redis.Redis) -> dict[str, int]:
    """The commands the server ran since the last CONFIG RESETSTAT, by name."""
    stats = r.info("commandstats")
    return {name.removeprefix("cmdstat_"): row["calls"] for name, row in stats.items()}


def read(r: redis.Redis, address: str) -> tuple[httpx.Response, dict[str, int]]:
    """GET ``address`` (no redirect followed) and the commands the server ran for it."""
    r.config_resetstat()
    answer = httpx.get(address, follow_redirects=False, timeout=60)
    return answer, calls(r)


def test_the_overview_pages_its_queues_by_name(r: redis.Redis) -> None:
    registered(r)
    with serve(app(config.settings())) as url:
        answer, ran = read(r, f"{url}/")
        assert answer.status_code == 200
        assert ran["zcard"] == 5 * QUEUES_SHOWN  # (5 sets a queue; every queue: 10,000)
        assert ran["zrange"] == 2 * QUEUES_SHOWN + 1  # (latency, and the runners)
        assert f"1\N{EN DASH}{QUEUES_SHOWN} of {QUEUES}" in answer.text
        seen: list[str] = []
        address: str | None = f"{url}/"
        while address is not None:
            page = httpx.get(address, timeout=60).text
            rows = re.findall(r'<tr data-queue="([^"]+)"', page)
            assert 0 < len(rows) <= QUEUES_SHOWN
            seen += rows
            following = re.search(r'<a rel="next" href="([^"]+)"', page)
            address = None if following is None else url + following[1].replace("&amp;", "&")
        assert seen == NAMES  # every queue once, by name
        last = httpx.get(f"{url}/?after=scale1989", timeout=60).text
        assert 'rel="next"' not in last and 'rel="prev"' in last


def test_the_chart_sums_the_overview_s_page_of_queues(r: redis.Redis) -> None:
    registered(r)
    with serve(app(config.settings())) as url:
        for after in ("", "scale0049"):
            answer, ran = read(r, f"{url}/series?range=hour&after={after}")
            assert answer.status_code == 200 and len(answer.json()["t"]) == 61
            assert ran["hgetall"] == 61 * QUEUES_SHOWN  # (61 minutes of each queue shown)


def test_the_dead_page_reads_one_set_a_queue(r: redis.Redis) -> None:
    registered(r)
    with serve(app(config.settings())) as url:
        answer, ran = read(r, f"{url}/dead")
        assert answer.status_code == 200
        assert "scale1500" in answer.text  # (the one queue that holds dead tasks, listed)
        # the dead set of each (five sets each: 10,000), and the page's read of the one
        # queue that holds dead tasks
        assert ran["zcard"] == QUEUES + 1
        answer, ran = read(r, f"{url}/queue?queue=scale0003&state=dead")
        assert answer.status_code == 200
        assert ran["zcard"] == QUEUES + 6  # (and the queue: its five sets, its page)
        options = re.findall(r'<option value="(scale[^"]+)"', answer.text)
        assert options == ["scale0003", "scale1500"]  # this queue, and those holding dead


def test_metrics_has_every_queue_in_batches(r: redis.Redis) -> None:
    pytest.importorskip("prometheus_client")
    registered(r)
    with serve(app(config.settings())) as url:
        r.config_resetstat()
        with urllib.request.urlopen(f"{url}/metrics") as answer:
            text = answer.read().decode()
        ran = calls(r)
    waiting = re.findall(r'^culex_queue_tasks\{queue="(scale\d+)",state="waiting"\}', text, re.M)
    assert sorted(waiting) == NAMES
    assert 'culex_queue_tasks{queue="scale1500",state="dead"} 1.0' in text
    # read_queues.lua: each queue's waiting set, and one EXISTS of its other keys; their
    # sizes only for scale1500, the one queue that has any (its dead task)
    assert (ran["zcard"], ran["exists"]) == (QUEUES + 4, QUEUES)


def test_queue_page_and_queues_holding_read_the_registry(r: redis.Redis) -> None:
    registered(r)
    first = inspection.queue_page(limit=30)
    assert (first.names, first.total, first.first) == (NAMES[:30], QUEUES, 0)
    assert (first.next_after, first.previous_after) == ("scale0029", None)
    second = inspection.queue_page(after=first.next_after, limit=30)
    assert second.names == NAMES[30:60] and second.previous_after == ""
    third = inspection.queue_page(after=second.next_after, limit=30)
    assert third.previous_after == "scale0029"
    last = inspection.queue_page(after="scale1990", limit=30)
    assert last.names == NAMES[1991:] and last.next_after is None and last.first == 1991
    assert inspection.queue_page(after="zzz").names == []
    assert inspection.queues_holding("dead") == {"scale1500": 1}
    assert inspection.queues_holding("waiting") == {}
    for bad in (0, 1001, True):
        with pytest.raises((TypeError, ValueError), match="limit"):
            inspection.queue_page(limit=bad)
    with pytest.raises(ValueError, match="state"):
        inspection.queues_holding("done")
