"""Each Lua script: state before -> call -> state after, against the real server."""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any

import pytest
import redis

from culex import ServerError
from culex._redis import assembly, calls, claims, enqueuing, interventions, reports, scripts
from culex._redis.drivers import SyncDriverProtocol
from culex._redis.keys import queue_keys
from culex._redis.priority import UNIT, priority_of, ready_ms

from ..conftest import driver_of, field, members, score, server_ms, snapshot

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)

K = queue_keys("culex", "q")
DAY_MS = 86_400_000
# retry_later's, for a cancelled task
DEAD: dict[str, Any] = {"dead_ttl_ms": DAY_MS, "dead_max": 10}


def drive(r: redis.Redis) -> SyncDriverProtocol:
    return driver_of(r)


def put(d: SyncDriverProtocol, task_id: str, *, delay_ms: int = 0, max_retries: int = 4) -> None:
    d.run(
        enqueuing.enqueue(
            K, task_id, "NoopJob", "{}", due_ms=None, delay_ms=delay_ms, max_retries=max_retries
        )
    )


def claim(d: SyncDriverProtocol, limit: int = 10, lease_ms: int = 30_000) -> claims.ClaimReply:
    return d.run(
        claims.claim(K, limit=limit, lease_ms=lease_ms, promote_limit=100, dead_ttl_ms=DAY_MS)
    )


def reclaim(d: SyncDriverProtocol, max_stalls: int = 3) -> dict[str, str]:
    """Reclaim every lost lease: each task's id, and the state it went to."""
    call = claims.reclaim(K, limit=10, dead_ttl_ms=DAY_MS, dead_max=10, max_stalls=max_stalls)
    moved = d.run(call)
    return dict(moved)


def scripts_of(r: redis.Redis) -> dict[str, Any]:
    """The shipped files as plain redis-py scripts: a foreign client's call, as it is."""
    return {s.name: r.register_script(s.source) for s in scripts.ALL}


def dirty(r: redis.Redis) -> int:
    """How many writes the server has taken (INFO persistence)."""
    return int(r.info("persistence")["rdb_changes_since_last_save"])


def test_enqueue_stores_the_hash_and_waits(r: redis.Redis) -> None:
    d = drive(r)
    out = d.run(
        enqueuing.enqueue(K, "t1", "MyJob", '{"a":1}', due_ms=None, delay_ms=0, max_retries=3)
    )
    assert (out.task_id, out.state, out.existed) == ("t1", "waiting", False)
    h = r.hgetall(K.task("t1"))
    assert h[b"type"] == b"MyJob" and h[b"params"] == b'{"a":1}' and h[b"queue"] == b"q"
    assert h[b"state"] == b"waiting" and h[b"attempt"] == b"0" and h[b"max_retries"] == b"3"
    assert r.zscore(K.waiting, "t1") == float(h[b"enqueue_time"])
    assert r.llen(K.signal) == 1


def test_an_enqueue_sends_the_optional_keys_and_args_only_when_needed(r: redis.Redis) -> None:
    """A drawn id (no task ever had it) with no dedupe key, group, trace or priority: four
    keys and seven args. A given id also names dead (an id left there by a task whose hash
    expired leaves it); a dedupe key or a group names the keys they need."""
    drawn = enqueuing.enqueue(
        K, "t1", "J", "{}", due_ms=None, delay_ms=0, max_retries=0, drawn=True
    )
    assert (len(drawn.keys), len(drawn.args)) == (4, 7)
    given = enqueuing.enqueue(K, "t2", "J", "{}", due_ms=None, delay_ms=0, max_retries=0)
    assert given.keys[4:] == (K.dedupe, K.task_prefix, K.groups_prefix, K.dead)
    grouped = enqueuing.enqueue(
        K, "t3", "J", "{}", due_ms=None, delay_ms=0, max_retries=0, group="g", drawn=True
    )
    assert (len(grouped.keys), len(grouped.args)) == (7, 11)
    d = drive(r)
    assert d.run(drawn).state == "waiting"
    r.zadd(K.dead, {"t2": 1})  # (its hash expired: the id alone is left in dead)
    assert d.run(given).state == "waiting"
    assert r.zscore(K.dead, "t2") is None and r.zscore(K.waiting, "t2") is not None
    assert d.run(grouped).state == "waiting"
    assert r.zscore(K.groups_prefix + "g:g", "t3") is not None


def test_an_enqueue_with_every_optional_arg_stores_each_field(r: redis.Redis) -> None:
    """trace, priority, group, expiry, headers, dedupe key and window: all stored by the
    task's one HSET (a field dropped from it would be missing here); priority 0 is sent as
    "" and stores no field."""
    call = enqueuing.enqueue(
        K, "t1", "J", "{}", due_ms=None, delay_ms=0, max_retries=2, trace='{"t":"1"}',
        priority=7, dedupe_key="k", group="g", expires_ms=60_000, dedupe_for_ms=5_000,
        headers='{"by":"me"}', drawn=True,
    )  # fmt: skip
    d = drive(r)
    assert d.run(call).state == "waiting"
    h = r.hgetall(K.task("t1"))
    stored = {k: h[k.encode()] for k in ("trace", "priority", "group", "headers")}
    assert stored == {
        "trace": b'{"t":"1"}',
        "priority": b"7",
        "group": b"g",
        "headers": b'{"by":"me"}',
    }
    assert (h[b"dedupe_key"], h[b"on_end"], h[b"dedupe_for"]) == (b"k", b"1", b"5000")
    assert int(h[b"expires_at"]) == int(h[b"enqueue_time"]) + 60_000
    assert r.hget(K.dedupe, "k") == b"t1"
    plain = enqueuing.enqueue(
        K, "t2", "J", "{}", due_ms=None, delay_ms=0, max_retries=0, headers="{}", drawn=True
    )
    assert plain.args[8] == ""  # (priority 0)
    assert d.run(plain).state == "waiting"
    assert r.hget(K.task("t2"), "priority") is None and r.hget(K.task("t2"), "headers") == b"{}"


def test_enqueue_with_delay_schedules(r: redis.Redis) -> None:
    d = drive(r)
    out = d.run(enqueuing.enqueue(K, "t1", "J", "{}", due_ms=None, delay_ms=5000, max_retries=4))
    assert out.state == "scheduled"
    h = r.hgetall(K.task("t1"))
    assert r.zscore(K.scheduled, "t1") == int(h[b"enqueue_time"]) + 5000
    assert r.zcard(K.waiting) == 0 and r.llen(K.signal) == 0


def test_enqueue_at_a_past_time_waits_and_a_taken_id_changes_nothing(r: redis.Redis) -> None:
    d = drive(r)
    assert (
        d.run(enqueuing.enqueue(K, "t1", "J", "{}", due_ms=1, delay_ms=0, max_retries=4)).state
        == "waiting"
    )
    again = d.run(enqueuing.enqueue(K, "t1", "Other", "{}", due_ms=None, delay_ms=0, max_retries=4))
    assert again.existed
    assert r.hget(K.task("t1"), "type") == b"J"


def test_claim_takes_fifo_batch_and_leases(r: redis.Redis) -> None:
    d = drive(r)
    for i in range(5):
        put(d, f"t{i}")
    reply = claim(d, limit=3, lease_ms=10_000)
    assert [t.id for t in reply.tasks] == ["t0", "t1", "t2"]
    assert all(t.attempt == 1 and t.type == "NoopJob" for t in reply.tasks)
    assert r.zcard(K.waiting) == 2
    assert r.zscore(K.pending, "t0") == reply.now_ms + 10_000
    assert r.hget(K.task("t0"), "state") == b"pending"


def test_claim_promotes_due_scheduled_tasks(r: redis.Redis) -> None:
    d = drive(r)
    put(d, "later", delay_ms=60_000)
    d.run(enqueuing.enqueue(K, "due", "J", "{}", due_ms=None, delay_ms=1, max_retries=4))
    r.zadd(K.scheduled, {"due": 1})  # due long ago
    reply = claim(d)
    assert [t.id for t in reply.tasks] == ["due"]
    assert reply.next_due_ms == r.zscore(K.scheduled, "later")
    assert r.zcard(K.scheduled) == 1


def test_empty_claim_writes_nothing(r: redis.Redis) -> None:
    d = drive(r)
    before = dirty(r)
    reply = claim(d)
    reply2 = claim(d)
    assert reply.tasks == [] and reply2.tasks == [] and reply.next_due_ms is None
    assert dirty(r) == before
    assert r.dbsize() == 0


def test_claim_buries_an_id_without_hash(r: redis.Redis) -> None:
    d = drive(r)
    r.zadd(K.waiting, {"ghost": 1})
    put(d, "real")
    reply = claim(d)
    assert [t.id for t in reply.tasks] == ["real"]
    assert r.zscore(K.dead, "ghost") is not None
    assert b"no task hash" in field(r, K.task("ghost"), "last_error")
    assert r.pttl(K.task("ghost")) > 0


def test_claim_buries_a_bad_attempt_and_a_wrong_type_key_and_serves_the_rest(
    r: redis.Redis,
) -> None:
    d = drive(r)
    r.hset(K.task("garbled"), mapping={"type": "NoopJob", "params": "{}", "attempt": "\xff"})
    r.zadd(K.waiting, {"garbled": 1})
    r.set(K.task("stringy"), "not a hash")
    r.zadd(K.waiting, {"stringy": 2})
    put(d, "real")
    reply = claim(d)
    assert [t.id for t in reply.tasks] == ["real"]
    assert b"attempt is not a whole number" in field(r, K.task("garbled"), "last_error")
    assert b"held a string" in field(r, K.task("stringy"), "last_error")
    assert r.get(K.task("stringy") + ":wrongtype") == b"not a hash"  # kept, not deleted
    assert set(members(r, K.dead)) == {"garbled", "stringy"}
    assert r.zcard(K.pending) == 1 and r.zcard(K.waiting) == 0


def test_complete_reports_a_batch_and_refuses_only_the_stale(r: redis.Redis) -> None:
    d = drive(r)
    for i in range(3):
        put(d, f"t{i}")
    a, b, c = claim(d).tasks
    refused = d.run(
        reports.complete(
            K,
            [
                ("t0", a.attempt, "0", 5000),
                ("t1", b.attempt + 1, "1", 5000),
                ("t2", c.attempt, "2", 5000),
            ],
        )
    )
    assert refused == [("t1", b.attempt + 1)]
    assert [r.hget(K.task(f"t{i}"), "state") for i in range(3)] == [
        b"succeeded",
        b"pending",
        b"succeeded",
    ]
    assert r.zrange(K.pending, 0, -1) == [b"t1"]


def test_complete_stores_result_and_expires(r: redis.Redis) -> None:
    d = drive(r)
    put(d, "t")
    t = claim(d).tasks[0]
    assert d.run(reports.complete(K, [("t", t.attempt, '"ok"', 5000)])) == []
    h = r.hgetall(K.task("t"))
    assert h[b"state"] == b"succeeded" and h[b"result"] == b'"ok"'
    assert 0 < r.pttl(K.task("t")) <= 5000
    assert r.zcard(K.pending) == 0


def test_stale_attempt_is_refused_and_changes_nothing(r: redis.Redis) -> None:
    d = drive(r)
    put(d, "t")
    t = claim(d).tasks[0]
    before = r.hgetall(K.task("t")), r.zrange(K.pending, 0, -1, withscores=True)
    stale = t.attempt - 1
    assert d.run(reports.complete(K, [("t", stale, '"late"', 5000)])) == [("t", stale)]
    assert (
        d.run(reports.fail(K, "t", stale, "x", retry_delay_ms=0, dead_ttl_ms=DAY_MS, dead_max=10))
        is None
    )
    assert d.run(reports.release(K, "t", stale)) is False
    assert d.run(claims.heartbeat(K, 99_000, [("t", stale)])) == ["t"]
    assert (r.hgetall(K.task("t")), r.zrange(K.pending, 0, -1, withscores=True)) == before


def test_fail_schedules_a_retry_with_the_delay(r: redis.Redis) -> None:
    d = drive(r)
    put(d, "t")
    t = claim(d).tasks[0]
    out = d.run(
        reports.fail(
            K, "t", t.attempt, "boom", retry_delay_ms=8000, dead_ttl_ms=DAY_MS, dead_max=10
        )
    )
    assert out == "scheduled"
    h = r.hgetall(K.task("t"))
    assert h[b"retry_count"] == b"1" and h[b"last_error"] == b"boom" and h[b"state"] == b"scheduled"
    assert r.zscore(K.scheduled, "t") == int(h[b"failed_at"]) + 8000 == int(h[b"due_at"])


def test_fail_without_retry_goes_to_dead_and_dead_is_trimmed(r: redis.Redis) -> None:
    d = drive(r)
    for i in range(4):
        put(d, f"t{i}")
    for t in claim(d).tasks:
        out = d.run(
            reports.fail(
                K, t.id, t.attempt, "no", retry_delay_ms=None, dead_ttl_ms=DAY_MS, dead_max=3
            )
        )
        assert out == "dead"
    assert r.zcard(K.dead) == 3
    assert r.zscore(K.dead, "t0") is None  # the oldest went first
    assert 0 < r.pttl(K.task("t3")) <= DAY_MS


def test_heartbeat_renews_held_leases(r: redis.Redis) -> None:
    d = drive(r)
    put(d, "t")
    t = claim(d, lease_ms=1000).tasks[0]
    first = score(r, K.pending, "t")
    assert d.run(claims.heartbeat(K, 60_000, [("t", t.attempt)])) == []
    assert score(r, K.pending, "t") >= first + 59_000


def test_release_hands_back_without_counting_a_failure(r: redis.Redis) -> None:
    d = drive(r)
    put(d, "t")
    score = r.zscore(K.waiting, "t")
    t = claim(d).tasks[0]
    assert d.run(reports.release(K, "t", t.attempt)) is True
    assert r.zscore(K.waiting, "t") == score
    assert r.hget(K.task("t"), "retry_count") == b"0"
    assert claim(d).tasks[0].attempt == 2


def test_a_release_with_a_delay_schedules_the_task_that_much_later(r: redis.Redis) -> None:
    """A runner that ends its process to stop a thread hands the task back due later, so
    no other runner starts it while that thread may still run."""
    d = drive(r)
    put(d, "t")
    t = claim(d).tasks[0]
    before = server_ms(r)
    assert d.run(reports.release(K, "t", t.attempt, delay_ms=60_000)) is True
    due = r.zscore(K.scheduled, "t")
    assert due is not None and before + 60_000 <= due <= server_ms(r) + 60_000
    assert r.zscore(K.waiting, "t") is None and r.zscore(K.pending, "t") is None
    h = r.hgetall(K.task("t"))
    assert h[b"state"] == b"scheduled" and int(h[b"due_at"]) == due
    assert h[b"retry_count"] == b"0"
    assert claim(d).tasks == []  # not before it is due


def test_reclaim_counts_stalls_apart_from_retries(r: redis.Redis) -> None:
    """An expired lease is a stall, not a failed attempt: a task with max_retries 0 runs
    again, its retries untouched; the stall past max_stalls sends it to dead."""
    d = drive(r)
    put(d, "again", max_retries=0)
    put(d, "bury")
    r.hset(K.task("bury"), "stalls", 2)  # two stalls already: max_stalls 2 allows no more
    put(d, "alive")
    claimed = {t.id: t for t in claim(d, lease_ms=60_000).tasks}
    r.delete(K.signal)
    r.zadd(K.pending, {"again": 1, "bury": 1})  # their leases ran out long ago
    out = reclaim(d, max_stalls=2)
    # The first re-run after a lost runner is not delayed (the lease was the wait) ...
    assert out == {"again": "waiting", "bury": "dead"}
    h = r.hgetall(K.task("again"))
    assert h[b"state"] == b"waiting" and r.llen(K.signal) == 1
    assert h[b"stalls"] == b"1" and h[b"retry_count"] == b"0" and b"last_error" not in h
    assert h[b"stalled_at"] == h[b"due_at"]
    dead = r.hgetall(K.task("bury"))
    assert dead[b"last_error"] == b"lease expired (runner lost): stall 3, past max_stalls (2)"
    assert dead[b"stalls"] == b"3" and dead[b"retry_count"] == b"0"
    assert r.zscore(K.dead, "bury") is not None
    assert r.zrange(K.pending, 0, -1) == [b"alive"]
    # ... a second stall backs off 2 s x 1², a third would be 2 s x 2².
    again = claim(d, lease_ms=60_000).tasks[0]
    assert again.id == "again" and again.attempt == claimed["again"].attempt + 1
    r.zadd(K.pending, {"again": 1})
    assert reclaim(d, max_stalls=2) == {"again": "scheduled"}
    h = r.hgetall(K.task("again"))
    assert r.zscore(K.scheduled, "again") == int(h[b"stalled_at"]) + 2000
    assert h[b"stalls"] == b"2" and h[b"retry_count"] == b"0"
    # the lost runner's late report is refused
    late = d.run(reports.complete(K, [("again", claimed["again"].attempt, "1", 1000)]))
    assert late == [("again", claimed["again"].attempt)]
    # a dead task retried by hand starts with no stalls
    assert d.run(interventions.retry_dead(K, ["bury"])).retried == ["bury"]
    assert r.hget(K.task("bury"), "stalls") is None


def test_a_job_type_with_its_own_max_stalls_takes_it_over_the_runners(r: redis.Redis) -> None:
    d = drive(r)
    put(d, "plain")
    d.run(
        enqueuing.enqueue(K, "fragile", "FragileJob", "{}", due_ms=None, delay_ms=0, max_retries=4)
    )
    claim(d, lease_ms=0)  # both leases run out at once
    call = claims.reclaim(
        K, limit=10, dead_ttl_ms=DAY_MS, dead_max=10, max_stalls=3, own_stalls={"FragileJob": 0}
    )
    moved = d.run(call)
    assert dict(moved) == {"plain": "waiting", "fragile": "dead"}
    reason = r.hget(K.task("fragile"), "last_error")
    assert reason == b"lease expired (runner lost): stall 1, past max_stalls (0)"
    odd = claims.reclaim(K, limit=10, dead_ttl_ms=DAY_MS, dead_max=10)
    # a type without its number: refused, nothing written
    with pytest.raises(ServerError, match="max_stalls of FragileJob"):
        odd_args: calls.Call[Any] = odd._replace(args=(*odd.args, "FragileJob"))
        d.run(odd_args)


def test_fail_reclaim_and_cancel_write_the_same_dead_record_and_trim_dead_alike(
    r: redis.Redis,
) -> None:
    """The three ways into dead share lua/include/dead.lua: each leaves the same fields, the same
    TTL and score, and keeps dead within dead_max (the oldest go first)."""
    d = drive(r)
    seconds, micros = r.time()
    now = seconds * 1000 + micros // 1000
    r.zadd(K.dead, {"old1": now - 2000, "old2": now - 1000})  # older dead ids, within the TTL
    put(d, "failed")
    put(d, "lost", max_retries=0)
    put(d, "cancelled", delay_ms=60_000)
    held = {t.id: t for t in claim(d).tasks}
    d.run(
        reports.fail(
            K,
            "failed",
            held["failed"].attempt,
            "boom",
            retry_delay_ms=None,
            dead_ttl_ms=DAY_MS,
            dead_max=3,
        )
    )
    assert sorted(r.zrange(K.dead, 0, -1)) == [b"failed", b"old1", b"old2"]
    r.zadd(K.pending, {"lost": 1})  # its lease ran out long ago
    d.run(claims.reclaim(K, limit=10, dead_ttl_ms=DAY_MS, dead_max=3, max_stalls=0))
    assert sorted(r.zrange(K.dead, 0, -1)) == [b"failed", b"lost", b"old2"]
    d.run(interventions.cancel(K, "cancelled", "", dead_ttl_ms=DAY_MS, dead_max=3))
    reasons = {
        "failed": "boom",
        "lost": "lease expired (runner lost): stall 1, past max_stalls (0)",
        "cancelled": "cancelled",
    }
    for task_id, reason in reasons.items():
        h = r.hgetall(K.task(task_id))
        assert h[b"state"] == b"dead" and h[b"last_error"] == reason.encode()
        assert h[b"failed_at"] == h[b"finished_at"]
        assert r.zscore(K.dead, task_id) == int(h[b"failed_at"])
        assert 0 < r.pttl(K.task(task_id)) <= DAY_MS
    assert r.hget(K.task("lost"), "stalls") == b"1"  # the stall was counted, not as a retry
    assert sorted(r.zrange(K.dead, 0, -1)) == [b"cancelled", b"failed", b"lost"]


# -- every script is complete by itself and checks before it writes ------------------------
# (docs/design.md#the-files-are-the-protocol, docs/design.md#checks-before-writes)


def test_every_copy_of_an_include_file_matches_its_source(tmp_path: Path) -> None:
    """The shipped fail, reclaim and cancel carry lua/include/dead.lua as it is; a copy
    that drifts from its source is found."""
    assert assembly.stale(assembly.FOLDER) == []
    source = (assembly.FOLDER / "include" / "dead.lua").read_text()
    body = source.split("\n\n", 1)[1].rstrip()
    for name in ("fail", "reclaim", "cancel"):
        assert body in (assembly.FOLDER / f"{name}.lua").read_text()
    shutil.copytree(assembly.FOLDER, tmp_path / "lua")
    copy = tmp_path / "lua" / "fail.lua"
    copy.write_text(copy.read_text().replace("'finished_at', now)", "'finished_at', now + 1)"))
    assert assembly.stale(tmp_path / "lua") == [copy]
    assert assembly.main(["--check"]) == 0  # the package's own files are fresh


def test_a_copy_leaves_out_the_functions_its_script_never_calls(tmp_path: Path) -> None:
    """Each function of an include is made on every call of a script that carries it: a
    copy keeps those its script calls, directly or through one it keeps, and names the rest."""
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "parts.lua").write_text(
        "-- The file's own paragraph.\n\n"
        "-- What the functions share.\n\n"
        "local LIMIT = 3\n\n"
        "-- inner's comment\nlocal function inner(x)\n  return x + LIMIT\nend\n\n"
        "-- outer's comment\nlocal function outer(x)\n  return inner(x) * 2\nend\n\n"
        "-- unused's comment\nlocal function unused(x)\n  return x\nend\n"
    )
    script = tmp_path / "s.lua"
    script.write_text("-- >>> include/parts.lua\n-- <<< include/parts.lua\nreturn outer(1)\n")
    text = assembly.assembled(script.read_text(), tmp_path)
    assert "local function outer(" in text and "-- outer's comment" in text
    assert "local function inner(" in text  # (called by outer only)
    assert "local function unused(" not in text and "unused's comment" not in text
    assert "-- (left out here, not called by this script: unused)" in text
    assert "local LIMIT = 3" in text and "What the functions share" in text
    script.write_text(text.replace("return outer(1)", "return unused(outer(1))"))
    assert "local function unused(" in assembly.assembled(script.read_text(), tmp_path)
    assert assembly.stale(tmp_path) == [script]


def test_enqueue_writes_the_server_time_as_a_whole_number_on_every_server(
    r: redis.Redis,
) -> None:
    """The time enqueue.lua stores (as text cut from TIME's digits on Redis before 7.2,
    include/numbers.lua) is the server's ms as a plain whole number: the same in the
    hash's enqueue_time and due_at and as the score in waiting."""
    d = drive(r)
    before = server_ms(r)
    for i in range(50):
        put(d, f"now{i}")
    after = server_ms(r)
    for i in range(50):
        h: dict[bytes, bytes] = r.hgetall(K.task(f"now{i}"))  # type: ignore[assignment]
        assert re.fullmatch(rb"\d{13}", h[b"enqueue_time"]), h[b"enqueue_time"]
        assert h[b"due_at"] == h[b"enqueue_time"]
        assert before <= int(h[b"enqueue_time"]) <= after
        assert r.zscore(K.waiting, f"now{i}") == int(h[b"enqueue_time"])
    assert h[b"retry_count"] == b"0" and h[b"attempt"] == b"0"


@pytest.mark.parametrize("micros", ["0", "7", "999", "1000", "12345", "123456", "999999"])
def test_the_time_cut_from_times_digits_is_the_time_in_ms(r: redis.Redis, micros: str) -> None:
    """The text of the time that enqueue, claim and complete give their commands on Redis
    before 7.2, for TIME replies whose µs have 1 to 6 digits, is the number
    t[1] * 1000 + floor(t[2] / 1000) written out, in each of them."""
    cuts = {
        script.name: cut.group(1)
        for script in scripts.ALL
        if (cut := re.search(r"local now_arg = NUMBERS_AS_TEXT and (.+)\n", script.source))
    }
    assert cuts.keys() == {"enqueue", "claim", "complete"}
    for name, expression in cuts.items():
        text = r.eval(
            f"local t = {{ARGV[1], ARGV[2]}} return {expression}", 0, "1764650000", micros
        )
        assert int(text) == 1764650000 * 1000 + int(micros) // 1000, name
        assert re.fullmatch(rb"\d{13}", text), name


LUA_BUILTINS = {"tonumber", "tostring", "unpack", "type", "pairs", "ipairs", "error", "assert"}


def test_no_script_calls_a_function_it_does_not_define() -> None:
    """A script sent as it is finds every local function it calls in its own text."""
    for script in scripts.ALL:
        called = set(re.findall(r"^\s*(\w+)\(", script.source, re.MULTILINE)) - LUA_BUILTINS
        defined = set(re.findall(r"local function (\w+)\(", script.source))
        assert called <= defined, (script.name, called - defined)


def test_schedule_refuses_an_early_slot_before_any_write(r: redis.Redis) -> None:
    d = drive(r)
    seconds, _ = r.time()
    future = (seconds + 3600) * 1000
    call = enqueuing.schedule(
        K, "TickJob", "t", slot_ms=future, next_slot_ms=future + 1, overlap=False,
        run_new=True, max_retries=0,
    )  # fmt: skip
    before = snapshot(r)
    assert d.run(call).outcome == "early"
    assert snapshot(r) == before


def test_complete_refuses_a_task_key_of_another_type_and_lands_the_rest(r: redis.Redis) -> None:
    d = drive(r)
    put(d, "a")
    put(d, "b")
    held = {t.id: t for t in claim(d).tasks}
    r.delete(K.task("a"))
    r.set(K.task("a"), "not a hash")
    refused = d.run(reports.complete(K, [(i, held[i].attempt, "1", 60_000) for i in ("a", "b")]))
    assert refused == [("a", held["a"].attempt)]
    assert r.hget(K.task("b"), "state") == b"succeeded"
    assert r.zscore(K.pending, "b") is None
    assert r.zscore(K.pending, "a") is not None  # left for reclaim, which buries it


def test_fail_with_a_retry_count_that_is_not_a_number_still_lands(r: redis.Redis) -> None:
    d = drive(r)
    put(d, "t")
    held = claim(d).tasks[0]
    r.hset(K.task("t"), "retry_count", "many")
    call = reports.fail(
        K, "t", held.attempt, "boom", retry_delay_ms=0, dead_ttl_ms=DAY_MS, dead_max=10
    )
    assert d.run(call) == "scheduled"
    assert r.zscore(K.pending, "t") is None and r.zscore(K.scheduled, "t") is not None
    assert r.hget(K.task("t"), "retry_count") == b"1"


def test_reclaim_buries_a_task_key_of_another_type_and_reclaims_the_rest(
    r: redis.Redis,
) -> None:
    """A read that errors would stop the script after the ZREM of the ids before it,
    leaving them in no set: every read comes before the first write."""
    d = drive(r)
    put(d, "odd")
    put(d, "fine")
    claim(d)
    r.zadd(K.pending, {"odd": 1, "fine": 2})  # both leases ran out long ago
    r.delete(K.task("odd"))
    r.rpush(K.task("odd"), "x")
    out = reclaim(d)
    assert out == {"odd": "dead", "fine": "waiting"}
    assert r.lrange(K.task("odd") + ":wrongtype", 0, -1) == [b"x"]
    dead = r.hgetall(K.task("odd"))
    assert dead[b"state"] == b"dead" and b"held a list" in dead[b"last_error"]
    assert r.zscore(K.dead, "odd") is not None and r.zcard(K.pending) == 0


def test_beat_records_a_runner_until_its_record_expires_and_removes_it(r: redis.Redis) -> None:
    d = drive(r)
    zset, hash_key = "culex:{runners}", "culex:{runners}:runner:r1"
    now = d.run(claims.beat("culex", "r1", 60_000, {"host": "h", "tasks": "[]"}))
    assert r.hgetall(hash_key) == {b"host": b"h", b"tasks": b"[]", b"beat": str(now).encode()}
    assert 59_000 < r.pttl(hash_key) <= 60_000
    assert score(r, zset, "r1") == now + 60_000
    assert r.pexpiretime(zset) == now + 60_000  # the registry ends with its last record
    r.zadd(zset, {"gone": now - 1})  # a runner whose record expired: dropped by the next beat
    d.run(claims.beat("culex", "r1", 60_000, {"tasks": '[{"id": "t"}]'}))
    assert members(r, zset) == ["r1"] and r.hget(hash_key, "host") == b"h"
    d.run(claims.beat("culex", "r1", 0, {}))  # the runner stops
    assert not r.exists(zset, hash_key)


def test_beat_refuses_keys_of_another_type_before_any_write(r: redis.Redis) -> None:
    r.set("culex:{runners}", "x")
    before = snapshot(r)
    with pytest.raises(ServerError, match="WRONGTYPE"):
        drive(r).run(claims.beat("culex", "r1", 60_000, {"host": "h"}))
    assert snapshot(r) == before


# -- flow control: retry_later (culex.RetryLater) and progress -----------------------------


def test_retry_later_schedules_without_counting_a_failure(r: redis.Redis) -> None:
    d = drive(r)
    put(d, "t")
    first = claim(d).tasks[0]
    d.run(reports.fail(K, "t", first.attempt, "boom", retry_delay_ms=0, dead_ttl_ms=DAY_MS,
                       dead_max=10))  # fmt: skip
    t = claim(d).tasks[0]  # attempt 2, after one failure
    counters = sorted(r.keys(K.stats_prefix + "*"))
    before = r.hgetall(K.task("t"))
    assert d.run(reports.retry_later(K, "t", t.attempt, 5000, **DEAD)) is True
    h = r.hgetall(K.task("t"))
    assert h[b"state"] == b"scheduled" and r.zcard(K.pending) == 0
    assert (h[b"retry_count"], h[b"last_error"], h[b"failed_at"]) == (
        before[b"retry_count"], b"boom", before[b"failed_at"],
    )  # fmt: skip
    assert int(h[b"due_at"]) == int(h[b"retry_later_at"]) + 5000 == score(r, K.scheduled, "t")
    assert h[b"retry_later_count"] == b"1"
    assert sorted(r.keys(K.stats_prefix + "*")) == counters  # nothing counted
    assert {k: v for k, v in h.items() if k not in (b"state", b"due_at")} == {
        **{k: v for k, v in before.items() if k not in (b"state", b"due_at")},
        b"retry_later_at": h[b"retry_later_at"], b"retry_later_count": b"1",
    }  # fmt: skip


def test_retry_later_with_no_delay_is_claimed_again_with_its_retries_intact(
    r: redis.Redis,
) -> None:
    d = drive(r)
    put(d, "t")
    t = claim(d).tasks[0]
    assert d.run(reports.retry_later(K, "t", t.attempt, 0, **DEAD)) is True
    again = claim(d).tasks[0]  # due at once: claim promotes it
    assert (again.id, again.attempt, again.retry_count) == ("t", 2, 0)
    assert d.run(reports.retry_later(K, "t", again.attempt, 0, **DEAD)) is True
    assert r.hget(K.task("t"), "retry_later_count") == b"2"


def test_retry_later_refuses_a_stale_attempt_a_task_not_pending_and_a_bad_delay(
    r: redis.Redis,
) -> None:
    d = drive(r)
    put(d, "t")
    put(d, "idle", delay_ms=60_000)
    t = claim(d).tasks[0]
    before = snapshot(r)
    assert d.run(reports.retry_later(K, "t", t.attempt - 1, 0, **DEAD)) is False
    assert d.run(reports.retry_later(K, "idle", 0, 0, **DEAD)) is False  # scheduled, not pending
    for bad in (-1, 1.5):
        with pytest.raises(ServerError, match="delay_ms must be a whole number"):
            d.run(reports.retry_later(K, "t", t.attempt, bad, **DEAD))  # type: ignore[arg-type]
    assert snapshot(r) == before


def test_progress_is_stored_by_the_attempt_that_holds_the_task_and_kept_after(
    r: redis.Redis,
) -> None:
    d = drive(r)
    put(d, "t")
    t = claim(d).tasks[0]
    low = server_ms(r)
    assert d.run(reports.progress(K, "t", t.attempt, 0.4, "rendered 4 of 10 pages")) is True
    high = server_ms(r)
    h = r.hgetall(K.task("t"))
    assert (h[b"progress"], h[b"progress_message"]) == (b"0.4", b"rendered 4 of 10 pages")
    assert low <= int(h[b"progress_at"]) <= high  # the server's clock
    assert d.run(reports.progress(K, "t", t.attempt, 1, "")) is True
    assert (field(r, K.task("t"), "progress"), field(r, K.task("t"), "progress_message")) == (
        b"1", b"",
    )  # fmt: skip
    d.run(reports.complete(K, [("t", t.attempt, "null", 60_000)]))
    before = snapshot(r)
    assert d.run(reports.progress(K, "t", t.attempt, 0.5, "late")) is False  # ended
    assert snapshot(r) == before  # and its last progress is kept


def test_progress_refuses_a_stale_attempt_and_bad_arguments_before_any_write(
    r: redis.Redis,
) -> None:
    d = drive(r)
    put(d, "t")
    t = claim(d).tasks[0]
    before = snapshot(r)
    assert d.run(reports.progress(K, "t", t.attempt - 1, 0.5, "stale")) is False
    assert d.run(reports.progress(K, "gone", 1, 0.5, "")) is False
    for fraction in (-0.1, 1.5, float("nan")):
        with pytest.raises(ServerError, match="fraction must be a number from 0 to 1"):
            d.run(reports.progress(K, "t", t.attempt, fraction, ""))
    with pytest.raises(ServerError, match="at most 4000 bytes"):
        d.run(reports.progress(K, "t", t.attempt, 0.5, "é" * 2001))
    assert snapshot(r) == before


# -- priorities: one waiting set scored ready_ms - priority * 2^42 (include/priority.lua) --


def put_at(
    d: SyncDriverProtocol, task_id: str, priority: int, **options: Any
) -> enqueuing.Enqueued:
    options.setdefault("delay_ms", 0)
    return d.run(
        enqueuing.enqueue(
            K, task_id, "NoopJob", "{}", due_ms=None, max_retries=4, priority=priority, **options
        )
    )


def test_enqueue_stores_a_priority_and_scores_it_in_waiting(r: redis.Redis) -> None:
    d = drive(r)
    put_at(d, "high", 7)
    put_at(d, "plain", 0)
    high = r.hgetall(K.task("high"))
    assert high[b"priority"] == b"7"
    assert r.zscore(K.waiting, "high") == int(high[b"enqueue_time"]) - 7 * UNIT
    assert r.hget(K.task("plain"), "priority") is None  # 0: no field, as before priorities
    assert r.zscore(K.waiting, "plain") == int(field(r, K.task("plain"), "enqueue_time"))
    assert (ready_ms(r.zscore(K.waiting, "high") or 0), priority_of(score(r, K.waiting, "high")))\
        == (int(high[b"enqueue_time"]), 7)  # fmt: skip


@pytest.mark.parametrize("bad", ["x", "1.5", "101", "-101"])
def test_enqueue_refuses_a_bad_priority_before_any_write(r: redis.Redis, bad: str) -> None:
    before = snapshot(r)
    with pytest.raises(redis.ResponseError, match="priority"):
        scripts_of(r)["enqueue"](
            keys=[K.task("t"), K.waiting, K.scheduled, K.signal],
            args=["t", "J", "q", "{}", "", 0, 4, "", bad],
        )
    assert snapshot(r) == before


def test_claim_takes_the_highest_priority_first_and_fifo_within_one(r: redis.Redis) -> None:
    d = drive(r)
    # ready times: ids sort in enqueue order, so equal milliseconds keep FIFO too
    for task_id, priority in [("a0", 0), ("a1", -5), ("a2", 9), ("a3", 0), ("a4", 9), ("a5", 1)]:
        put_at(d, task_id, priority)
    r.zadd(K.waiting, {"old": 1})  # a task stored before priorities: priority 0, ready long ago
    r.hset(K.task("old"), mapping={"id": "old", "type": "J", "params": "{}", "attempt": 0})
    order = [t.id for t in claim(d, limit=3).tasks] + [t.id for t in claim(d, limit=10).tasks]
    assert order == ["a2", "a4", "a5", "old", "a0", "a3", "a1"]


def test_every_way_back_to_waiting_keeps_the_priority(r: redis.Redis) -> None:
    d = drive(r)
    put_at(d, "t", 5)
    scored = score(r, K.waiting, "t")
    # release: the same place in line
    task = claim(d).tasks[0]
    assert d.run(reports.release(K, "t", task.attempt))
    assert score(r, K.waiting, "t") == scored
    # fail with a retry, then claim's promotion of the due retry
    task = claim(d).tasks[0]
    assert d.run(
        reports.fail(K, "t", task.attempt, "x", retry_delay_ms=0, dead_ttl_ms=DAY_MS, dead_max=9)
    ) == "scheduled"  # fmt: skip
    due = score(r, K.scheduled, "t")  # (scheduled keeps the due time: no priority in it)
    d.run(claims.claim(K, limit=0, lease_ms=1000, promote_limit=10, dead_ttl_ms=DAY_MS))
    assert (ready_ms(score(r, K.waiting, "t")), priority_of(score(r, K.waiting, "t"))) == (due, 5)
    # reclaim of a lost lease (the first re-run is ready at once, in waiting)
    claim(d, lease_ms=0)
    r.hset(K.task("t"), "retry_count", 0)
    assert reclaim(d) == {"t": "waiting"}
    assert priority_of(score(r, K.waiting, "t")) == 5
    # retry from dead
    task = claim(d).tasks[0]
    d.run(
        reports.fail(K, "t", task.attempt, "x", retry_delay_ms=-1, dead_ttl_ms=DAY_MS, dead_max=9)
    )
    assert d.run(interventions.retry_dead(K, ["t"])).retried == ["t"]
    assert priority_of(score(r, K.waiting, "t")) == 5
    # hasten of a scheduled task
    put_at(d, "later", 5, delay_ms=DAY_MS)
    assert d.run(interventions.hasten(K, limit=10)) == 1
    assert priority_of(score(r, K.waiting, "later")) == 5


# -- dedupe keys: <prefix>:{<queue>}:dedupe maps a key to its live task ----------------------


def put_key(d: SyncDriverProtocol, task_id: str, key: str, **options: Any) -> enqueuing.Enqueued:
    options.setdefault("delay_ms", 0)
    return d.run(
        enqueuing.enqueue(
            K, task_id, "NoopJob", "{}", due_ms=None, max_retries=4, dedupe_key=key, **options
        )
    )


def test_a_live_task_holds_its_dedupe_key_and_a_second_enqueue_stores_nothing(
    r: redis.Redis,
) -> None:
    d = drive(r)
    assert put_key(d, "first", "report:2026-11", delay_ms=DAY_MS).state == "scheduled"
    assert r.hgetall(K.dedupe) == {b"report:2026-11": b"first"}
    assert field(r, K.task("first"), "dedupe_key") == b"report:2026-11"
    for state in ("scheduled", "waiting", "pending"):
        before = snapshot(r)
        assert put_key(d, "second", "report:2026-11") == ("first", "", False, True), state
        assert snapshot(r) == before, state
        if state == "scheduled":
            d.run(interventions.hasten(K, limit=10))
        elif state == "waiting":
            claim(d)
    assert put_key(d, "other", "report:2026-12").state == "waiting"  # another key is free


def ended(d: SyncDriverProtocol, r: redis.Redis, how: str) -> None:
    """End the task "t" (enqueued with a dedupe key) in one of the ways a task ends."""
    if how in ("cancel", "delete"):
        if how == "cancel":
            assert (
                d.run(interventions.cancel(K, "t", "", dead_ttl_ms=DAY_MS, dead_max=9))
                == "cancelled"
            )
        else:
            assert d.run(interventions.delete(K, ["t"])).deleted == ["t"]
        return
    if how == "claim-bury":
        r.hset(K.task("t"), "attempt", "not a number")
        claim(d)
        assert r.hget(K.task("t"), "state") == b"dead"
        return
    task = claim(d, lease_ms=0 if how == "reclaim" else 30_000).tasks[0]
    if how == "complete":
        assert d.run(reports.complete(K, [("t", task.attempt, "null", 60_000)])) == []
    elif how == "fail":
        d.run(
            reports.fail(
                K, "t", task.attempt, "x", retry_delay_ms=-1, dead_ttl_ms=DAY_MS, dead_max=9
            )
        )
    else:
        assert reclaim(d, max_stalls=0) == {"t": "dead"}


@pytest.mark.parametrize("how", ["complete", "fail", "reclaim", "cancel", "delete", "claim-bury"])
def test_a_task_that_ends_frees_its_dedupe_key(r: redis.Redis, how: str) -> None:
    d = drive(r)
    put_key(d, "t", "k")
    ended(d, r, how)
    assert r.exists(K.dedupe) == 0
    assert put_key(d, "next", "k") == ("next", "waiting", False, False)
    assert r.hgetall(K.dedupe) == {b"k": b"next"}


def test_a_retry_keeps_the_dedupe_key_and_an_end_frees_only_its_own(r: redis.Redis) -> None:
    d = drive(r)
    put_key(d, "t", "k")
    task = claim(d).tasks[0]
    d.run(reports.fail(K, "t", task.attempt, "x", retry_delay_ms=0, dead_ttl_ms=DAY_MS, dead_max=9))
    assert put_key(d, "again", "k").deduped  # scheduled for its retry: still live
    r.hset(K.dedupe, "k", "someone-else")  # (the key names another task now)
    task = claim(d).tasks[0]
    d.run(reports.complete(K, [("t", task.attempt, "null", 60_000)]))
    assert r.hgetall(K.dedupe) == {b"k": b"someone-else"}


def test_a_dedupe_key_whose_task_ended_or_is_gone_is_free(r: redis.Redis) -> None:
    d = drive(r)
    r.hset(K.dedupe, mapping={"gone": "no-such-task", "over": "finished"})
    r.hset(K.task("finished"), mapping={"id": "finished", "state": "succeeded"})
    assert put_key(d, "a", "gone") == ("a", "waiting", False, False)
    assert put_key(d, "b", "over") == ("b", "waiting", False, False)
    assert r.hgetall(K.dedupe) == {b"gone": b"a", b"over": b"b"}


def test_a_dedupe_key_without_its_keys_or_too_long_is_refused_before_any_write(
    r: redis.Redis,
) -> None:
    before = snapshot(r)
    enqueue = scripts_of(r)["enqueue"]
    base = [K.task("t"), K.waiting, K.scheduled, K.signal]
    with pytest.raises(redis.ResponseError, match="dedupe key"):
        enqueue(keys=base, args=["t", "J", "q", "{}", "", 0, 4, "", "", "k"])
    with pytest.raises(redis.ResponseError, match="dedupe key"):
        enqueue(
            keys=[*base, K.dedupe, K.task_prefix],
            args=["t", "J", "q", "{}", "", 0, 4, "", "", "k" * 501],
        )
    assert snapshot(r) == before
    # a producer written before priorities and dedupe keys: 4 KEYS, 7 ARGV, as before
    assert enqueue(keys=base, args=["t", "J", "q", "{}", "", 0, 4]) == [b"waiting", b"t"]
    assert r.zscore(K.waiting, "t") == int(field(r, K.task("t"), "enqueue_time"))


def test_run_now_makes_one_scheduled_task_ready_now_and_refuses_any_other(
    r: redis.Redis,
) -> None:
    d = drive(r)
    put(d, "later", delay_ms=DAY_MS)
    put(d, "other", delay_ms=DAY_MS)
    put(d, "early")  # (its id sorts first too: both may be ready in the same ms)
    d.run(enqueuing.enqueue(K, "urgent", "J", "{}", due_ms=None, delay_ms=DAY_MS, max_retries=4,
                            priority=5))  # fmt: skip
    r.delete(K.signal)
    before = server_ms(r)
    assert d.run(interventions.run_now(K, "later")) == "waiting"
    after = server_ms(r)
    assert members(r, K.scheduled) == ["other", "urgent"]  # the others stay scheduled
    assert members(r, K.waiting) == ["early", "later"]  # after the tasks ready before it
    assert field(r, K.task("later"), "state") == b"waiting"
    assert before <= int(field(r, K.task("later"), "due_at")) <= after  # ready now
    assert ready_ms(score(r, K.waiting, "later")) == int(field(r, K.task("later"), "due_at"))
    assert r.llen(K.signal) == 1  # a runner is woken
    assert d.run(interventions.run_now(K, "urgent")) == "waiting"
    assert members(r, K.waiting)[0] == "urgent"  # its priority stands
    assert priority_of(score(r, K.waiting, "urgent")) == 5
    # Not scheduled (any more): refused, nothing written.
    claim(d, limit=1)  # urgent is pending now
    snap, count = snapshot(r), dirty(r)
    for task_id, state in (("later", "waiting"), ("urgent", "pending"), ("gone", "")):
        assert d.run(interventions.run_now(K, task_id)) == state
    assert snapshot(r) == snap and dirty(r) == count
    r.hset(K.task("stray"), "state", "scheduled")  # its hash says scheduled, no set holds it
    r.zadd(K.scheduled, {"odd": 1})  # in scheduled, its hash says otherwise
    r.hset(K.task("odd"), "state", "dead")
    snap, count = snapshot(r), dirty(r)
    assert d.run(interventions.run_now(K, "stray")) == "not scheduled"
    assert d.run(interventions.run_now(K, "odd")) == "dead"
    assert snapshot(r) == snap and dirty(r) == count


def test_run_now_sends_a_task_of_a_group_to_its_group(r: redis.Redis) -> None:
    d = drive(r)
    d.run(enqueuing.enqueue(K, "g1", "J", "{}", due_ms=None, delay_ms=DAY_MS, max_retries=4,
                            group="acme"))  # fmt: skip
    assert d.run(interventions.run_now(K, "g1")) == "waiting"
    assert members(r, K.grouped_ready) == ["g1"] and r.zcard(K.waiting) == 0
    assert members(r, K.groups_prefix + "g:acme") == ["g1"]
    assert claim(d).tasks[0].id == "g1"
