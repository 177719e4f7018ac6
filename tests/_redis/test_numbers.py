"""Every shipped script, sent every kind of bad number in each place it reads one.

The scripts are the protocol: a foreign client (or a bad date in one) may send ``nan`` as
a due time, and a producer of another language may write a hash field culex would not.
For each script in ``scripts.ALL`` the table below says which ARGV positions are numbers
and which hash fields it reads as numbers. Each of those gets each value of ``BAD`` in
turn, on a queue holding the task the script acts on, and after each call either

- the call was refused with an error and the keyspace is exactly as before, or
- every task is in exactly one set (waiting, or its group's ready set; scheduled; pending;
  dead), or has succeeded and is in none, and every score is a finite number.

A script added later without an entry in the table fails ``test_every_script_is_covered``.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, cast

import pytest
import redis

from culex._redis import claims, enqueuing, interventions, reads, reports, scripts, steps, workflows
from culex._redis.calls import Call
from culex._redis.drivers import SyncDriverProtocol
from culex._redis.keys import QueueKeys, queue_base, queue_keys, run_keys

from ..conftest import driver_of, snapshot

K = queue_keys("culex", "q")
DAY_MS = 86_400_000
TASK = "t1"

# Not a whole number, not finite, out of range, not a number, nothing, past int64 and at
# its end, what Lua's tonumber takes besides decimal digits, and the first number past
# MOST (2^42 - 1: include/numbers.lua), 13 digits like the largest it takes.
BAD = ("nan", "inf", "-inf", "1.5", "-1", "1e400", "abc", "", str(2**63), str(2**63 - 1),
       "0x10", " 5 ", "1e3", str(2**42))  # fmt: skip


# -- the states a script acts on ---------------------------------------------------------


def waiting(d: SyncDriverProtocol, group: str = "") -> None:
    d.run(enqueuing.enqueue(K, TASK, "J", "{}", due_ms=None, delay_ms=0, max_retries=4,
                            group=group))  # fmt: skip


def scheduled(d: SyncDriverProtocol) -> None:
    d.run(enqueuing.enqueue(K, TASK, "J", "{}", due_ms=None, delay_ms=DAY_MS, max_retries=4))


def pending(d: SyncDriverProtocol, lease_ms: int = 60_000) -> None:
    waiting(d)
    d.run(claims.claim(K, limit=1, lease_ms=lease_ms, promote_limit=10, dead_ttl_ms=DAY_MS))


def lease_lost(d: SyncDriverProtocol) -> None:
    pending(d, lease_ms=0)


def dead(d: SyncDriverProtocol) -> None:
    pending(d)
    d.run(reports.fail(K, TASK, 1, "boom", retry_delay_ms=None, dead_ttl_ms=DAY_MS,
                       dead_max=10))  # fmt: skip


def nothing(d: SyncDriverProtocol) -> None:
    pass


def recorded(d: SyncDriverProtocol) -> None:
    """A periodic job's record, as schedule.lua leaves it after an earlier slot."""
    d.run(enqueuing.schedule(K, "P", "P:500", slot_ms=500, next_slot_ms=1000, overlap=False,
                             run_new=True, max_retries=0))  # fmt: skip


def paused_record(d: SyncDriverProtocol) -> None:
    """A periodic job's record after an earlier slot, paused (resume reads decided_slot)."""
    recorded(d)
    d.run(enqueuing.periodic_pause(K, "P", True, record=None))


def node(task_id: str = TASK, up: str = '[["q", "u1", "u"]]') -> workflows.NodeSpec:
    return workflows.NodeSpec(task_id, "J", "{}", 4, 0, "", "n", "dead", up, "[]")


def blocked(d: SyncDriverProtocol) -> None:
    """A workflow node of run R waiting for its upstream u1."""
    d.run(workflows.store_nodes(K, "R", [node()]))


def died_blocked(d: SyncDriverProtocol) -> None:
    """A node ended dead by its upstream's death: dead, with its outbox entry."""
    blocked(d)
    d.run(resolve_dead())


def resolve_dead() -> Call[list[str]]:
    return workflows.resolve(K, [TASK], upstream="u1", name="u", state="dead", job_type="J",
                             result="", error="boom", dead_ttl_ms=DAY_MS)  # fmt: skip


def receive(index: int = 0, delay_ms: int | None = DAY_MS) -> Call[tuple[str, ...]]:
    """Attempt 1 of the task waits for the signal "go" at place ``index``."""
    return steps.suspend(K, TASK, 1, index, "receive", "go", delay_ms, max_steps=10)


def awaiting(d: SyncDriverProtocol) -> None:
    """A durable task waiting in scheduled for its signal "go", after one recorded step."""
    pending(d)
    d.run(steps.step(K, TASK, 1, 0, "s", "1", max_steps=10, max_step_bytes=10,
                     max_task_bytes=10))  # fmt: skip
    d.run(receive(1))


@dataclass(frozen=True)
class Case:
    """How to call one script on the state it acts on, and the numbers it reads there.

    ``numbers``: the ARGV positions (1-based) that are numbers. ``fields``: the hash fields
    it reads as numbers, as (key, field, other fields written beside it so that the script
    reads it: a rate is read only with its window)."""

    setup: Callable[[SyncDriverProtocol], None]
    call: Call[Any]
    numbers: tuple[int, ...] = ()
    fields: tuple[tuple[str, str, dict[str, str]], ...] = field(default=())


def on(name: str, key: str = K.task(TASK)) -> tuple[str, str, dict[str, str]]:
    return (key, name, {})


def limits(name: str, partner: str = "", value: str = "") -> tuple[str, str, dict[str, str]]:
    """A limit in the queue's control hash (claim.lua reads a rate with its window)."""
    return (K.control, name, {partner: value} if partner else {})


CASES: dict[str, Case] = {
    "enqueue": Case(
        nothing,
        enqueuing.enqueue(
            K,
            "n1",
            "J",
            "{}",
            due_ms=None,
            delay_ms=0,
            max_retries=4,
            priority=1,
            dedupe_key="k",
            expires_ms=60_000,
            dedupe_for_ms=60_000,
        ),
        numbers=(5, 6, 7, 9, 12, 14),
    ),
    "claim": Case(
        waiting,
        claims.claim(K, limit=10, lease_ms=60_000, promote_limit=10, dead_ttl_ms=DAY_MS),
        numbers=(1, 2, 3, 4, 5, 6, 7, 8, 9, 10),
        fields=(
            on("attempt"),
            on("priority"),
            on("expires_at"),
            limits("rate", "rate_ms", "1000"),
            limits("rate_ms", "rate", "5"),
            limits("concurrency"),
            limits("group_concurrency"),
            limits("group_rate", "group_rate_ms", "1000"),
            limits("group_rate_ms", "group_rate", "5"),
        ),
    ),
    "complete": Case(
        pending,
        reports.complete(K, [(TASK, 1, "null", 60_000)]),
        numbers=(2, 4),
        fields=(on("started_at"),),
    ),
    "fail": Case(
        pending,
        reports.fail(
            K, TASK, 1, "boom", retry_delay_ms=1000, dead_ttl_ms=DAY_MS, dead_max=10, traceback="t"
        ),
        numbers=(2, 4, 5, 6, 8),
        fields=(on("retry_count"), on("started_at")),
    ),
    "heartbeat": Case(pending, claims.heartbeat(K, 60_000, [(TASK, 1)]), numbers=(1, 3)),
    "release": Case(
        pending,
        reports.release(K, TASK, 1, delay_ms=1000),
        numbers=(2, 3),
        fields=(on("due_at"), on("enqueue_time"), on("priority")),
    ),
    "reclaim": Case(
        lease_lost,
        claims.reclaim(K, limit=10, dead_ttl_ms=DAY_MS, dead_max=10, heal_ms=30_000),
        numbers=(1, 2, 3, 4),
        fields=(on("retry_count"), on("max_retries"), on("priority")),
    ),
    "schedule": Case(
        recorded,
        enqueuing.schedule(
            K,
            "P",
            "P:1000",
            slot_ms=1000,
            next_slot_ms=2000,
            overlap=True,
            run_new=True,
            max_retries=0,
        ),
        numbers=(4, 5, 8),
        fields=(on("decided_slot", K.periodic("P")),),
    ),
    "periodic_pause": Case(
        paused_record,
        enqueuing.periodic_pause(K, "P", False, record=None),
        fields=(on("decided_slot", K.periodic("P")),),
    ),
    "retry_dead": Case(
        dead, interventions.retry_dead(K, [TASK]), numbers=(1,), fields=(on("priority"),)
    ),
    "cancel": Case(
        waiting,
        interventions.cancel(K, TASK, "", dead_ttl_ms=DAY_MS, dead_max=10),
        numbers=(3, 4),
    ),
    "wait": Case(waiting, reads.wait(K, TASK)),
    "beat": Case(nothing, claims.beat("culex", "r1", 60_000, {"host": "h"}), numbers=(2,)),
    "read_periodic": Case(recorded, reads.read_periodic(K, "P")),
    "browse": Case(
        waiting,
        reads.browse(
            K, K.waiting, ascending=True, after=None, limit=10, examine=100, job="", cut=100
        ),
        numbers=(2, 4, 5, 7),
    ),
    "delete": Case(dead, interventions.delete(K, [TASK])),
    "hasten": Case(
        scheduled, interventions.hasten(K, limit=10), numbers=(1,), fields=(on("priority"),)
    ),
    "queue_control": Case(
        nothing,
        interventions.control(
            K,
            {
                "rate": "5",
                "rate_ms": "1000",
                "concurrency": "3",
                "group_rate": "2",
                "group_rate_ms": "100",
                "group_concurrency": "1",
            },
        ),
        numbers=(2, 4, 6, 8, 10, 12),
    ),
    "retry_later": Case(
        pending,
        reports.retry_later(K, TASK, 1, 1000, dead_ttl_ms=DAY_MS, dead_max=10),
        numbers=(2, 3, 4, 5),
        fields=(on("retry_later_count"), on("retry_count"), on("started_at")),
    ),
    "progress": Case(pending, reports.progress(K, TASK, 1, 0.5, ""), numbers=(1, 2)),
    "log": Case(
        pending,
        reports.log(K, TASK, 1, ['{"attempt": 1, "n": 1, "at": 5, "line": "x"}']),
    ),
    "run_now": Case(scheduled, interventions.run_now(K, TASK), fields=(on("priority"),)),
    "read_queues": Case(waiting, reads.read_queues([queue_base("culex", "q")])),
    "workflow_enqueue": Case(
        nothing,
        workflows.store_nodes(K, "R", [node()._replace(priority=2)]),
        numbers=(6, 7),
    ),
    "workflow_record": Case(
        nothing,
        workflows.begin(run_keys("culex", "R"), "n", 2, stage_ms=1000, ttl_ms=1000),
        numbers=(4, 5, 6),
    ),
    "workflow_resolve": Case(
        blocked,
        workflows.resolve(
            K,
            [TASK],
            upstream="u1",
            name="u",
            state="succeeded",
            job_type="J",
            result="1",
            error="",
            dead_ttl_ms=DAY_MS,
        ),
        numbers=(8,),
        fields=(on("priority"),),
    ),
    "workflow_take": Case(died_blocked, workflows.take(K, limit=10, lease_ms=1000), numbers=(1, 2)),
    "workflow_done": Case(
        died_blocked, workflows.done(K, [workflows.Entry("q", TASK, {"at": ""})])
    ),
    "workflow_unfinished": Case(
        nothing, workflows.take_unfinished("culex", limit=10, lease_ms=1000), numbers=(1, 2)
    ),
    "workflow_discard": Case(blocked, workflows.discard_nodes(K, "R", [TASK])),
    "step": Case(
        pending,
        steps.step(K, TASK, 1, 0, "s", "[1]", max_steps=10, max_step_bytes=10, max_task_bytes=10),
        numbers=(1, 2, 5, 6, 7),
        fields=(on("steps"), on("steps_bytes")),
    ),
    "suspend": Case(
        pending,
        receive(),
        numbers=(1, 2, 5, 6),
        fields=(
            on("steps"),
            (K.task(TASK), "awaiting_until", {"awaiting": "go"}),
            (K.task(TASK), "signals_kept", {"signal:go": '"now"'}),  # (a signal taken)
            (K.task(TASK), "signals_kept_bytes", {"signal:go": '"now"', "signals_kept": "2"}),
        ),
    ),
    "signal": Case(
        awaiting,
        steps.signal(
            K, TASK, "go", '"now"', max_bytes=100, max_kept=10, max_kept_bytes=100, keep=True
        ),
        numbers=(3, 4, 5),
        fields=(on("priority"), on("signals_kept"), on("signals_kept_bytes")),
    ),
    "workflow_heal": Case(died_blocked, workflows.heal(K, "R", "0", [TASK]), numbers=(2,)),
    "workflow_rearm": Case(
        died_blocked, workflows.rearm(K, TASK, "R", 1, []), fields=(on("priority"),)
    ),
}


def sent(case: Case) -> scripts.Script:
    assert case.call.script is not None, "a case calls a script"
    return case.call.script


def test_every_script_is_covered() -> None:
    """A script added later must say which numbers it reads (none is an answer too)."""
    shipped = {script.name for script in scripts.ALL}
    assert shipped - set(CASES) == set(), "scripts without an entry in CASES"
    assert set(CASES) - shipped == set(), "entries in CASES for no shipped script"
    for name, case in CASES.items():
        assert sent(case).name == name, f"CASES[{name!r}] calls {sent(case).name}"


# -- the invariant ---------------------------------------------------------------------


# The number fields of a task's hash, each a whole number in its range whenever present.
WHOLE = {"due_at", "enqueue_time", "retry_count", "max_retries", "attempt", "failed_at",
         "finished_at", "started_at", "retried_at", "retry_later_at",
         "retry_later_count", "steps", "steps_bytes", "suspended_at",
         "awaiting_until", "signals_kept", "signals_kept_bytes"}  # fmt: skip


def keyspace_is_whole(r: redis.Redis, keys: QueueKeys, spoilt: str = "") -> None:
    """Every task in exactly the set its hash's state names (none when succeeded); every
    id in waiting, scheduled or pending has its hash; every score a finite number; every
    number field of a task's hash a whole number in range (but ``spoilt``, the field the
    case wrote a bad value to: a script may leave it as it is)."""
    sets = {
        "waiting": {keys.waiting, keys.grouped_ready},
        "scheduled": {keys.scheduled},
        "pending": {keys.pending},
        "dead": {keys.dead},
        "succeeded": set(),
        "blocked": set(),  # (a workflow node waiting for its upstreams: in no set)
    }
    where: dict[str, list[str]] = {}
    for key in cast(list[bytes], r.keys("*")):
        if r.type(key) != b"zset":
            continue
        for member, value in cast(list[tuple[bytes, float]], r.zrange(key, 0, -1, withscores=True)):
            assert math.isfinite(value), f"{member!r} has the score {value} in {key!r}"
            if key.decode() in (keys.waiting, keys.grouped_ready, keys.scheduled, keys.pending,
                                keys.dead):  # fmt: skip
                where.setdefault(member.decode(), []).append(key.decode())
    for task_id, found in where.items():
        if r.type(keys.task(task_id)) != b"hash":
            assert found == [keys.dead], f"{task_id} has no hash, and is in {found}"
    for key in cast(list[bytes], r.keys(keys.task("*"))):
        if r.type(key) != b"hash":
            continue
        task_id = key.decode().removeprefix(keys.task_prefix)
        state = cast(bytes, r.hget(key, "state") or b"").decode()
        assert state in sets, f"{task_id} says state {state!r}"
        for name, text in cast(dict[bytes, bytes], r.hgetall(key)).items():
            number = name.decode()
            if number in WHOLE and number != spoilt:
                assert text.isdigit() and int(text) < 2**42, f"{task_id}: {number} {text!r}"
            if number == "priority" and number != spoilt:
                assert -100 <= int(text) <= 100, f"{task_id}: priority {text!r}"
        found = where.get(task_id, [])
        if state in ("succeeded", "blocked"):
            assert found == [], f"{task_id} is {state}, and is in {found}"
        else:
            assert len(found) == 1 and found[0] in sets[state], (
                f"{task_id} says {state}, and is in {found}"
            )


def attempt(
    r: redis.Redis, case: Case, keys: tuple[str, ...], args: tuple[Any, ...], spoilt: str = ""
) -> None:
    """Call the script as a foreign client does; then the call was refused with nothing
    written, or the keyspace is whole."""
    before = snapshot(r)
    try:
        r.evalsha(sent(case).sha, len(keys), *keys, *args)
    except redis.ResponseError as refused:
        assert snapshot(r) == before, f"refused ({refused}) after writing"
        return
    keyspace_is_whole(r, K, spoilt)


@pytest.fixture
def loaded(r: redis.Redis) -> redis.Redis:
    for script in scripts.ALL:
        r.script_load(script.source)
    return r


@pytest.mark.parametrize("name", sorted(CASES))
def test_a_bad_number_in_argv_is_refused_with_nothing_written(
    loaded: redis.Redis, name: str
) -> None:
    refuses_bad_numbers(loaded, name, CASES[name])


# The common enqueue as culex sends it: seven ARGV (no option), four KEYS (a drawn id).
COMMON_ENQUEUE = Case(
    nothing,
    enqueuing.enqueue(K, "n1", "J", "{}", due_ms=None, delay_ms=0, max_retries=4, drawn=True),
    numbers=(5, 6, 7),
)


def test_a_bad_number_in_the_common_enqueue_is_refused_with_nothing_written(
    loaded: redis.Redis,
) -> None:
    """enqueue.lua skips its checks' functions for a call whose seven ARGV are plainly
    good: a bad due time, delay or max_retries in such a call still meets them."""
    assert len(COMMON_ENQUEUE.call.args) == 7 and len(COMMON_ENQUEUE.call.keys) == 4
    refuses_bad_numbers(loaded, "enqueue", COMMON_ENQUEUE)


def refuses_bad_numbers(r: redis.Redis, name: str, case: Case) -> None:
    """Each BAD value at each of ``case``'s number positions is refused, or leaves the
    keyspace whole."""
    d = driver_of(r)
    keys = tuple(case.call.keys)
    for position in case.numbers:
        assert 1 <= position <= len(case.call.args), f"{name}: no ARGV[{position}] to send"
        for value in BAD:
            r.flushall()
            case.setup(d)
            args = list(case.call.args)
            args[position - 1] = value
            try:
                attempt(r, case, keys, tuple(args))
            except AssertionError as broken:
                raise AssertionError(
                    f"{name} with ARGV[{position}] = {value!r}: {broken}"
                ) from None


@pytest.mark.parametrize("name", sorted(n for n, c in CASES.items() if c.fields))
def test_a_bad_number_in_a_hash_leaves_no_task_in_no_set(loaded: redis.Redis, name: str) -> None:
    r, case = loaded, CASES[name]
    d = driver_of(r)
    keys = tuple(case.call.keys)
    for key, name_of_field, beside in case.fields:
        for value in BAD:
            r.flushall()
            case.setup(d)
            for name_beside, value_beside in beside.items():
                r.hset(key, name_beside, value_beside)
            r.hset(key, name_of_field, value)
            try:
                attempt(r, case, keys, tuple(case.call.args), name_of_field)
            except AssertionError as broken:
                raise AssertionError(f"{name} with {name_of_field} = {value!r}: {broken}") from None
