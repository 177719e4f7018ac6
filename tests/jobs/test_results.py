"""Results: how long they are kept (result_ttl), typed by perform's return annotation, and
waited for without polling (wait.lua and the done list, woken by every script that ends
a task)."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any

import pytest
import redis

import culex
from culex._redis import claims, enqueuing, interventions, reads, reports
from culex._redis.connections import SyncConnection
from culex._redis.drivers import SyncDriverProtocol
from culex._redis.keys import queue_keys
from culex.errors import ConfigurationError
from culex.jobs import task as task_module

from ..conftest import await_until, count_exchanges, driver_of, running, server_ms, wait_until

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)

DAY_MS = 86_400_000


# -- jobs ------------------------------------------------------------------------------------


class ValueJob(culex.QueuedJob):
    queue = "kept"
    n: int

    def perform(self) -> int:
        return self.n


class NothingJob(culex.QueuedJob):
    queue = "kept"

    async def perform(self) -> None:
        return None


class ShortJob(culex.QueuedJob):
    queue = "kept"
    result_ttl = timedelta(seconds=30)

    def perform(self) -> str:
        return "short"


class NoneKeptJob(culex.QueuedJob):
    queue = "kept"
    result_ttl = 0

    def perform(self) -> str:
        return "not kept"


@dataclass
class Point:
    x: int
    y: int


class Size(Enum):
    SMALL = "s"
    LARGE = "l"


class PriceJob(culex.QueuedJob):
    queue = "typed"

    def perform(self) -> Decimal:
        return Decimal("1.10")


class StampsJob(culex.QueuedJob):
    queue = "typed"

    async def perform(self) -> list[datetime]:
        return [datetime(2030, 1, 1, tzinfo=UTC), datetime(2031, 6, 2, 3, 4, tzinfo=UTC)]


class MaybeJob(culex.QueuedJob):
    queue = "typed"
    give: bool

    def perform(self) -> Decimal | None:
        return Decimal("2.5") if self.give else None


class PointJob(culex.QueuedJob):
    queue = "typed"

    @staticmethod
    def serialize_point(point: Point) -> list[int]:
        return [point.x, point.y]

    @staticmethod
    def deserialize_point(raw: Any) -> Point:
        return Point(*raw)

    def perform(self) -> Point:
        return Point(3, 4)


class MixedJob(culex.QueuedJob):
    queue = "typed"
    isolation = "process"

    def perform(self) -> dict[str, tuple[uuid.UUID, Size, timedelta]]:
        return {"a": (uuid.UUID(int=5), Size.LARGE, timedelta(microseconds=1))}


class UntypedResultJob(culex.QueuedJob):
    queue = "typed"

    def perform(self):  # type: ignore[no-untyped-def]  # no annotation: plain JSON
        return Decimal("1.10")


class WrongJob(culex.QueuedJob):
    queue = "typed"

    def perform(self) -> int:
        return "five"  # type: ignore[return-value]


class WrongInChildJob(culex.QueuedJob):
    queue = "typed"
    isolation = "process"

    def perform(self) -> int:
        return 5.5  # type: ignore[return-value]


class NoneForStrJob(culex.QueuedJob):
    queue = "typed"

    def perform(self) -> str:
        return None  # type: ignore[return-value]


class Opaque:
    def __repr__(self) -> str:
        return "<opaque>"


class ObjectJob(culex.QueuedJob):
    queue = "typed"

    def perform(self) -> int:
        return Opaque()  # type: ignore[return-value]


class UntypedObjectJob(culex.QueuedJob):
    queue = "typed"

    def perform(self) -> Any:
        return Opaque()


class WaitedJob(culex.QueuedJob):
    queue = "waited"

    def perform(self) -> int:
        return 1


W = queue_keys("culex", WaitedJob.queue)


# -- helpers ---------------------------------------------------------------------------------


async def blocked(r: redis.Redis, n: int) -> None:
    """Wait until ``n`` clients are blocked on the server (the waiters sit in BLMOVE)."""
    await await_until(
        lambda: r.info("clients")["blocked_clients"] == n, what=f"{n} waiters to block"
    )


@pytest.fixture
def long_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each block lasts 60 s: a waiter that returns sooner was woken by the script."""
    monkeypatch.setattr(task_module, "WAIT_CHUNK", 60.0)


def put(d: SyncDriverProtocol, task_id: str, *, max_retries: int = 4) -> culex.Task:
    d.run(
        enqueuing.enqueue(
            W, task_id, "WaitedJob", "{}", due_ms=None, delay_ms=0, max_retries=max_retries
        )
    )
    return culex.Task(task_id, W.name)


def claim(d: SyncDriverProtocol, lease_ms: int = 30_000) -> list[claims.Claimed]:
    call = claims.claim(W, limit=10, lease_ms=lease_ms, promote_limit=10, dead_ttl_ms=DAY_MS)
    return d.run(call).tasks


async def waiters(
    r: redis.Redis, task: culex.Task, n: int = 3
) -> Callable[[], Awaitable[list[Any]]]:
    """Start ``n`` producers waiting for ``task`` (the last one sync, in a thread) and wait
    until all are blocked; returns a function that collects what each got (its value or
    its exception) within 5 s: with ``long_chunks``, only a wake-up ends a wait that soon.
    Each waiter gives up after 10 s, so that a thread left blocked ends too."""
    futures: list[asyncio.Future[Any]] = [
        asyncio.ensure_future(task.aresult(timeout=10)) for _ in range(n - 1)
    ]
    futures.append(asyncio.ensure_future(asyncio.to_thread(task.result, 10)))
    await blocked(r, n)

    async def outcomes() -> list[Any]:
        return await asyncio.wait_for(asyncio.gather(*futures, return_exceptions=True), 5)

    return outcomes


# -- how long a result is kept -----------------------------------------------------------------


async def test_a_value_outlives_successful_job_ttl_and_goes_after_result_ttl(
    r: redis.Redis,
) -> None:
    culex.configure(successful_job_ttl=0.05, result_ttl=1)
    async with running(culex.Runner(run_from=["kept"])):
        task = await ValueJob(n=5).aenqueue()
        assert await task.aresult(timeout=10) == 5
    key = queue_keys("culex", "kept").task(task.id)
    assert 50 < r.pttl(key) <= 1000
    finished_ms = int(r.hget(key, "finished_at") or 0)
    wait_until(lambda: server_ms(r) > finished_ms + 50, what="successful_job_ttl to pass")
    assert task.result(timeout=0) == 5  # still there
    wait_until(lambda: not r.exists(key), what="the hash to expire after result_ttl")
    with pytest.raises(culex.TaskNotFound, match="result_ttl"):
        task.result(timeout=0)


@pytest.mark.parametrize(
    ("settings", "job", "low", "high"),
    [
        ({}, ValueJob, 1000, 3_600_000),  # the default: an hour
        ({"successful_job_ttl": 0.2}, NothingJob, 0, 200),  # None: successful_job_ttl
        ({"result_ttl": 10}, ValueJob, 1000, 10_000),
        ({"result_ttl": 10}, ShortJob, 10_000, 30_000),  # the job's own result_ttl wins
        ({"result_ttl": 0}, ValueJob, 0, 1000),  # 0 keeps none: successful_job_ttl
        ({"result_ttl": 10}, NoneKeptJob, 0, 1000),  # and so does a job's 0
    ],
    ids=["default", "none", "setting", "job", "zero", "job-zero"],
)
async def test_how_long_a_succeeded_task_is_kept(
    r: redis.Redis, settings: dict[str, Any], job: type[culex.QueuedJob], low: int, high: int
) -> None:
    culex.configure(**settings)
    async with running(culex.Runner(run_from=["kept"])):
        task = await (job(n=1) if job is ValueJob else job()).aenqueue()
        await task.aresult(timeout=10)
    assert low < r.pttl(queue_keys("culex", "kept").task(task.id)) <= high


def test_result_ttl_is_checked_and_read_from_the_environment(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert culex.settings().result_ttl == 3600
    for bad in (-1, "an hour", float("inf")):
        with pytest.raises(ConfigurationError, match="result_ttl"):
            culex.configure(result_ttl=bad)
    culex.configure(result_ttl=timedelta(minutes=2))
    assert culex.settings().result_ttl == 120
    monkeypatch.setenv("CULEX_RESULT_TTL", "7")
    culex.configure()  # (re-reads the environment)
    assert culex.settings().result_ttl == 7
    for bad_job in (-1, "soon"):
        with pytest.raises(ConfigurationError, match=r"BadTtlJob\.result_ttl"):

            class BadTtlJob(culex.QueuedJob):
                queue = "kept"
                result_ttl = bad_job  # type: ignore[assignment]

                def perform(self) -> None: ...


def test_complete_refuses_a_bad_ttl_before_any_write(r: redis.Redis) -> None:
    d = driver_of(r)
    put(d, "t")
    [held] = claim(d)
    before = r.hgetall(W.task("t"))
    for bad in ([("t", held.attempt, "1", 0)], [("t", held.attempt, "1", "1.5")]):
        with pytest.raises(culex.ServerError, match="ttl_ms must be a whole number"):
            d.run(reports.complete(W, bad))  # type: ignore[arg-type]
    triple = reports.complete(W, [])._replace(args=("t", held.attempt, "1"))
    with pytest.raises(culex.ServerError, match="quadruples"):
        d.run(triple)
    assert r.hgetall(W.task("t")) == before and r.zscore(W.pending, "t") is not None


# -- typed by the return annotation ------------------------------------------------------------


async def test_results_come_back_as_the_annotation_says(r: redis.Redis) -> None:
    async with running(culex.Runner(run_from=["typed"])):
        price = await PriceJob().aenqueue()
        stamps = await StampsJob().aenqueue()
        given, none = await MaybeJob(give=True).aenqueue(), await MaybeJob(give=False).aenqueue()
        point = await PointJob().aenqueue()
        mixed = await MixedJob().aenqueue()
        plain = await UntypedResultJob().aenqueue()
        value = await price.aresult(timeout=10)
        assert type(value) is Decimal and value == Decimal("1.10")
        assert str(value) == "1.10"
        assert await stamps.aresult(timeout=10) == [
            datetime(2030, 1, 1, tzinfo=UTC),
            datetime(2031, 6, 2, 3, 4, tzinfo=UTC),
        ]
        assert await given.aresult(timeout=10) == Decimal("2.5")
        assert await none.aresult(timeout=10) is None
        assert await point.aresult(timeout=10) == Point(3, 4)
        assert await mixed.aresult(timeout=10) == {
            "a": (uuid.UUID(int=5), Size.LARGE, timedelta(microseconds=1))
        }
        assert await plain.aresult(timeout=10) == "1.10"  # no annotation: plain JSON
    # what the hash holds is the params' JSON, for any reader
    assert r.hget(queue_keys("culex", "typed").task(price.id), "result") == b'"1.10"'


async def test_a_task_made_by_hand_decodes_through_the_registry(r: redis.Redis) -> None:
    async with running(culex.Runner(run_from=["typed"])):
        task = await PriceJob().aenqueue()
        assert task.job is PriceJob
        await task.aresult(timeout=10)
    assert culex.Task(task.id, "typed").result() == Decimal("1.10")  # by the hash's type
    with _no_registry(PriceJob):
        assert culex.Task(task.id, "typed").result() == "1.10"  # unknown type: plain JSON
        assert task.result() == Decimal("1.10")  # the task enqueue returned knows its class


def test_an_annotation_the_codecs_cannot_type_means_plain_json() -> None:
    # Modules whose results were plain JSON before results were typed still import.
    class SetJob(culex.QueuedJob):
        def perform(self) -> set[int]:
            return {1}

    class UnknownJob(culex.QueuedJob):
        def perform(self) -> NoSuchType:  # type: ignore[name-defined]  # noqa: F821
            return 1

    class AnyDictJob(culex.QueuedJob):
        def perform(self) -> dict[str, Any]:
            return {}

    class UnionJob(culex.QueuedJob):
        def perform(self) -> int | str:
            return 1

    class BareJob(culex.QueuedJob):
        def perform(self) -> dict:  # type: ignore[type-arg]
            return {}

    class ListJob(culex.QueuedJob):
        def perform(self) -> list:  # type: ignore[type-arg]
            return []

    class TupleJob(culex.QueuedJob):
        def perform(self) -> tuple:  # type: ignore[type-arg]
            return ()

    jobs = (SetJob, UnknownJob, AnyDictJob, UnionJob, BareJob, ListJob, TupleJob)
    try:
        for job in jobs:
            assert job.result_codec_ is None, job
    finally:
        for job in jobs:
            culex.registry.remove(job)


@pytest.mark.parametrize(
    ("job", "warning", "stored"),
    [
        (WrongJob, "the result of WrongJob.perform(): expected int, got str 'five'", "five"),
        (WrongInChildJob, "", 5.5),  # (the child process logs its own warning)
        (NoneForStrJob, "the result of NoneForStrJob.perform(): expected str, got NoneType", None),
        (ObjectJob, "the result of ObjectJob.perform(): expected int, got Opaque", "<opaque>"),
    ],
    ids=["thread", "process", "none", "object"],
)
async def test_a_value_that_does_not_fit_the_annotation_is_stored_as_plain_json(
    r: redis.Redis,
    caplog: pytest.LogCaptureFixture,
    job: type[culex.QueuedJob],
    warning: str,
    stored: object,
) -> None:
    # The work is done: a lost success is worse than a loose type.
    async with running(culex.Runner(run_from=["typed"])):
        task = await job().aenqueue()
        assert await task.aresult(timeout=10) == stored
    info = await task.ainfo()
    assert info["state"] == "succeeded" and info["retry_count"] == "0"
    if warning:
        logged = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
        assert any(line.startswith(warning) for line in logged), logged
        assert any("stored as plain JSON" in line for line in logged), logged


def test_a_result_json_cannot_hold_is_stored_as_its_repr_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    text = UntypedObjectJob().result_text(Opaque())
    assert text == '"<opaque>"'
    assert (
        "the result of UntypedObjectJob.perform() is not JSON (an object of class Opaque)"
        in caplog.text
    )


# -- waiting: woken by the script that ends the task -------------------------------------------


async def test_complete_wakes_every_waiter(r: redis.Redis, long_chunks: None) -> None:
    d = driver_of(r)
    task = put(d, "t")
    outcomes = await waiters(r, task)
    assert r.hget(W.task("t"), "waited") == b"1"
    [held] = claim(d)
    assert d.run(reports.complete(W, [("t", held.attempt, "42", 60_000)])) == []
    assert await outcomes() == [42, 42, 42]
    assert r.lrange(W.done("t"), 0, -1) == [b"done"]  # one element woke the three
    assert 0 < r.pttl(W.done("t")) <= 60_000  # and it ends with the task
    assert r.hget(W.task("t"), "waited") is None


async def test_a_retry_is_not_an_end_and_the_waiters_wait_on(
    r: redis.Redis, long_chunks: None
) -> None:
    d = driver_of(r)
    task = put(d, "t")
    outcomes = await waiters(r, task)
    [held] = claim(d)
    fail = reports.fail(
        W, "t", held.attempt, "boom", retry_delay_ms=0, dead_ttl_ms=DAY_MS, dead_max=10
    )
    assert d.run(fail) == "scheduled"
    # (a push would have unblocked them before the script's reply)
    assert r.info("clients")["blocked_clients"] == 3 and not r.exists(W.done("t"))
    [again] = claim(d)
    d.run(reports.complete(W, [("t", again.attempt, "2", 60_000)]))
    assert await outcomes() == [2, 2, 2]


async def _dead_by_fail(r: redis.Redis, d: SyncDriverProtocol) -> str:
    [held] = claim(d)
    call = reports.fail(
        W, "t", held.attempt, "boom", retry_delay_ms=None, dead_ttl_ms=DAY_MS, dead_max=10
    )
    assert d.run(call) == "dead"
    return "boom"


async def _dead_by_reclaim(r: redis.Redis, d: SyncDriverProtocol) -> str:
    claim(d)
    r.zadd(W.pending, {"t": 1})  # its lease ran out long ago
    reclaim = claims.reclaim(W, limit=10, dead_ttl_ms=DAY_MS, dead_max=10, max_stalls=0)
    assert d.run(reclaim) == [("t", "dead")]
    return "lease expired (runner lost): stall 1, past max_stalls (0)"


async def _dead_by_cancel(r: redis.Redis, d: SyncDriverProtocol) -> str:
    call = interventions.cancel(W, "t", "no longer", dead_ttl_ms=DAY_MS, dead_max=10)
    assert d.run(call) == "cancelled"
    return "cancelled: no longer"


async def _dead_by_bury(r: redis.Redis, d: SyncDriverProtocol) -> str:
    r.hset(W.task("t"), "attempt", "many")  # a broken task: claim buries it
    assert claim(d) == []
    return "broken task: attempt is not a whole number"


@pytest.mark.parametrize(
    "end",
    [_dead_by_fail, _dead_by_reclaim, _dead_by_cancel, _dead_by_bury],
    ids=["fail", "reclaim", "cancel", "claim-bury"],
)
async def test_every_way_into_dead_wakes_every_waiter(
    r: redis.Redis,
    long_chunks: None,
    end: Callable[[redis.Redis, SyncDriverProtocol], Awaitable[str]],
) -> None:
    d = driver_of(r)
    task = put(d, "t", max_retries=0)
    outcomes = await waiters(r, task)
    reason = await end(r, d)
    got = await outcomes()
    assert all(isinstance(e, culex.TaskFailed) and e.reason == reason for e in got), got
    assert r.lrange(W.done("t"), 0, -1) == [b"done"]
    assert 0 < r.pttl(W.done("t")) <= DAY_MS


async def test_a_runner_wakes_the_waiter_of_its_task(r: redis.Redis, long_chunks: None) -> None:
    task = await WaitedJob().aenqueue()
    outcomes = await waiters(r, task, n=1)
    async with running(culex.Runner(run_from=["waited"])):
        assert await outcomes() == [1]


def test_wait_marks_only_an_unfinished_task_and_clears_a_list_left_from_before(
    r: redis.Redis,
) -> None:
    d = driver_of(r)
    put(d, "t")
    r.rpush(W.done("t"), "done")  # left by an end before a retry_dead
    end = d.run(reads.wait(W, "t"))
    assert (end.state, end.finished, end.type) == ("waiting", False, "WaitedJob")
    assert r.hget(W.task("t"), "waited") == b"1" and not r.exists(W.done("t"))
    [held] = claim(d)
    d.run(reports.complete(W, [("t", held.attempt, '"v"', 60_000)]))
    before = r.hgetall(W.task("t"))
    end = d.run(reads.wait(W, "t"))
    assert (end.state, end.result, end.finished) == ("succeeded", '"v"', True)
    assert r.hgetall(W.task("t")) == before  # nothing written for a finished task
    ghost = d.run(reads.wait(W, "ghost"))
    assert ghost.finished and ghost.state == "" and not r.exists(W.task("ghost"))
    r.set(W.task("odd"), "a string")
    with pytest.raises(culex.ServerError, match="WRONGTYPE"):
        d.run(reads.wait(W, "odd"))
    assert not r.exists(W.done("odd"))


def test_a_two_second_wait_costs_a_few_round_trips_not_dozens(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Polling every 50 ms made 46 exchanges of it; blocking in 1 s chunks makes 3."""
    task = put(driver_of(r), "t")
    with contextlib.suppress(TimeoutError):
        task.result(timeout=0)  # (loads wait.lua into the server first)
    exchanges = count_exchanges(monkeypatch, SyncConnection)
    with pytest.raises(TimeoutError, match="is still waiting"):
        task.result(timeout=2)
    assert len(exchanges) <= 5, exchanges
    assert exchanges[1:-1] == [2] * (len(exchanges) - 2)  # each block with its read behind it
    assert exchanges[-1] == 2  # (for the TimeoutError: does a runner serve the queue? none)


async def test_an_async_wait_that_times_out_leaves_the_task_as_it_was(r: redis.Redis) -> None:
    task = put(driver_of(r), "t")
    with pytest.raises(TimeoutError):
        await task.aresult(timeout=0.05)
    assert r.hget(W.task("t"), "state") == b"waiting" and r.zscore(W.waiting, "t") is not None


@contextlib.contextmanager
def _no_registry(job: type[culex.QueuedJob]) -> Iterator[None]:
    culex.registry.remove(job)
    try:
        yield
    finally:
        culex.registry.add(job)
