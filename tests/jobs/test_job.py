"""Job classes: params from annotations, checks at construction, policy checks."""

from __future__ import annotations

import json
import os
import sys
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
import redis

import culex
from culex._redis.keys import queue_keys
from culex.jobs.declaration import snake_case
from culex.jobs.task import new_id

pytestmark = pytest.mark.procedures  # also run through redis-py (README's test command)


class SendWelcomeEmailJob(culex.QueuedJob):
    to: str
    subject: str = "Welcome"
    tags: list[str] = []  # noqa: RUF012 - a param default, copied per job object

    def perform(self) -> None: ...


def test_default_queue_is_the_snake_case_class_name() -> None:
    assert SendWelcomeEmailJob.queue == "send_welcome_email_job"
    assert snake_case("HTTPFetchJob") == "http_fetch_job"
    assert SendWelcomeEmailJob in culex.registry


def test_params_from_annotations_with_defaults() -> None:
    job = SendWelcomeEmailJob(to="a@b.c")
    assert (job.to, job.subject, job.tags) == ("a@b.c", "Welcome", [])
    job.tags.append("x")
    assert SendWelcomeEmailJob(to="b").tags == []  # defaults are not shared


def test_wrong_missing_and_unknown_params_raise_type_error() -> None:
    # Calls a type checker rejects (test_typing.py): here, what they do when run anyway.
    with pytest.raises(TypeError, match=r"SendWelcomeEmailJob.to: expected str"):
        SendWelcomeEmailJob(to=5)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="missing the required param 'to'"):
        SendWelcomeEmailJob()  # type: ignore[call-arg]
    with pytest.raises(TypeError, match="unknown params: cc"):
        SendWelcomeEmailJob(to="a", cc="b")  # type: ignore[call-arg]


def test_bad_class_definitions_are_refused_when_defined() -> None:
    with pytest.raises(TypeError, match="reserved"):

        class ReservedJob(culex.QueuedJob):
            perform: int  # type: ignore[assignment]

    with pytest.raises(ValueError, match="max_retries"):

        class NegativeJob(culex.QueuedJob):
            max_retries = -1

    with pytest.raises(ValueError, match=r"max_retries must be from 0 to 4398046511103"):

        class EndlessJob(culex.QueuedJob):  # (enqueue.lua takes at most 2^42 - 1)
            max_retries = 2**42

    with pytest.raises(ValueError, match="queue name"):

        class BraceJob(culex.QueuedJob):
            queue = "a{b}"

    with pytest.raises(TypeError, match="default"):

        class BadDefaultJob(culex.QueuedJob):
            n: int = "zero"  # type: ignore[assignment]


def _job_class(class_name: str, module: str, **attrs: object) -> type[culex.QueuedJob]:
    """A job class as if defined in ``module`` (two modules may each have a SyncJob)."""
    namespace = {"__module__": module, "__qualname__": class_name, "perform": lambda self: None}
    return type(class_name, (culex.QueuedJob,), {**namespace, **attrs})


def test_two_job_classes_of_one_type_name_are_refused_and_one_can_be_named() -> None:
    first = _job_class("SyncJob", "app.billing")
    try:
        with pytest.raises(TypeError) as refused:
            _job_class("SyncJob", "app.mail")
        assert "app.billing.SyncJob and app.mail.SyncJob" in str(refused.value)
        assert 'name = "app.mail.SyncJob"' in str(refused.value)
        assert culex.registry.get("SyncJob") is first
        named = _job_class("SyncJob", "app.mail", name="mail.SyncJob")
        assert named.type_ == "mail.SyncJob" and culex.registry.get("mail.SyncJob") is named
        assert named.queue == "sync_job"  # the queue still comes from the class name
        again = _job_class("SyncJob", "app.billing")  # the same class defined anew: a reload
        assert culex.registry.get("SyncJob") is again and first not in culex.registry
    finally:
        for job in list(culex.registry):
            if job.__module__ in ("app.billing", "app.mail"):
                culex.registry.remove(job)


def test_a_job_type_name_is_checked_and_a_param_called_name_stays_a_param() -> None:
    for bad in ("", "has space", "tab\there", 5, "new\nline"):
        with pytest.raises(TypeError, match="must be a non-empty str of printable characters"):
            _job_class("BadNameJob", "app.bad", name=bad)
    assert "BadNameJob" not in [job.__name__ for job in culex.registry]

    class NamedParamJob(culex.QueuedJob):
        name: str = "anyone"

        def perform(self) -> str:
            return self.name

    assert NamedParamJob.type_ == "NamedParamJob" and NamedParamJob(name="x").name == "x"
    culex.registry.remove(NamedParamJob)


def test_enqueue_arguments_are_checked_before_anything_is_sent() -> None:
    job = SendWelcomeEmailJob(to="a")
    with pytest.raises(TypeError, match="timezone-aware"):
        job.enqueue(at=datetime(2030, 1, 1))
    with pytest.raises(TypeError, match="not both"):
        job.enqueue(delay=1, at=datetime(2030, 1, 1, tzinfo=UTC))
    with pytest.raises(ValueError, match="delay"):
        job.enqueue(delay=-1)
    with pytest.raises(ValueError, match="task id"):
        job.enqueue(id="has space")
    # A waiting task's score holds its ready time in 42 bits of ms: no later than 2109.
    too_late: list[dict[str, object]] = [
        {"delay": 1e12},
        {"delay": timedelta(days=365 * 90)},
        {"at": datetime(2200, 1, 1, tzinfo=UTC)},
        {"at": datetime(1960, 1, 1, tzinfo=UTC)},
    ]
    for when in too_late:
        with pytest.raises(ValueError, match=r"ready between 1970 and 2109-05-15 07:35 UTC"):
            job.enqueue(**when)  # type: ignore[arg-type]


def test_payload_limit(r: object) -> None:
    culex.configure(max_payload_bytes=100)
    with pytest.raises(ValueError, match="max_payload_bytes"):
        SendWelcomeEmailJob(to="x" * 200).enqueue()
    # The limit is in UTF-8 bytes, not characters: 40 x "é" is 80 bytes, 40 x "x" is 40.
    assert SendWelcomeEmailJob(to="x" * 40).enqueue().state() == "waiting"
    with pytest.raises(ValueError, match=r"params take 1\d\d bytes"):
        SendWelcomeEmailJob(to="é" * 40).enqueue()


class MoneyJob(culex.QueuedJob):
    amount: Decimal
    when: datetime
    wait: timedelta

    def perform(self) -> None: ...


def test_params_survive_the_trip_through_the_task_hash() -> None:
    job = MoneyJob(
        amount=Decimal("1.10"), when=datetime(2030, 1, 1, tzinfo=UTC), wait=timedelta(hours=1)
    )
    import json

    back = MoneyJob.from_params(json.loads(job.params_json()))
    assert isinstance(back, MoneyJob)
    assert (back.amount, back.when, back.wait) == (job.amount, job.when, job.wait)


class User:
    def __init__(self, user_id: int) -> None:
        self.user_id = user_id


class HookedUserJob(culex.QueuedJob):
    user: User

    @staticmethod
    def serialize_user(user: User) -> int:
        return user.user_id

    @staticmethod
    def deserialize_user(raw: object) -> User:
        assert isinstance(raw, int)
        return User(raw)

    def perform(self) -> int:
        return self.user.user_id


def test_mosquitos_serialize_and_deserialize_hooks() -> None:
    import json

    job = HookedUserJob(user=User(42))
    assert json.loads(job.params_json()) == {"user": 42}
    back = HookedUserJob.from_params({"user": 42})
    assert isinstance(back, HookedUserJob) and back.user.user_id == 42


def test_an_unsupported_param_type_is_refused_when_defined() -> None:
    with pytest.raises(TypeError, match=r"NoHookJob\.user: unsupported param type User"):

        class NoHookJob(culex.QueuedJob):
            user: User


class LooseJob(culex.QueuedJob):
    anything: Any
    data: dict  # type: ignore[type-arg]
    items: list  # type: ignore[type-arg]
    fields: dict[str, Any]
    either: int | str

    def perform(self) -> dict:  # type: ignore[type-arg]
        return {}


def test_any_bare_containers_and_unions_are_plain_json_params() -> None:
    job = LooseJob(anything=[1, {"a": None}], data={"a": 1}, items=[1, "b"], fields={}, either="x")
    back = LooseJob.from_params(json.loads(job.params_json()))
    assert isinstance(back, LooseJob)
    assert (back.anything, back.data, back.items, back.fields, back.either) == (
        [1, {"a": None}], {"a": 1}, [1, "b"], {}, "x"
    )  # fmt: skip
    with pytest.raises(TypeError, match=r"LooseJob.fields\['at'\]: expected plain JSON for Any"):
        LooseJob(anything=1, data={}, items=[], fields={"at": datetime.now(UTC)}, either=1)


def test_new_ids_sort_by_creation_and_a_forked_child_draws_other_random_bits() -> None:
    ids = [new_id() for _ in range(1000)]
    assert ids == sorted(ids) and len(set(ids)) == 1000
    assert all(len(i) == 28 and int(i, 16) >= 0 for i in ids)
    # The child shares the parent's counter and clock at the fork: only the random part
    # keeps the ids of the two apart, so it must not be the parent's sequence replayed.
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: send its next ids and leave at once
        os.write(write, " ".join(new_id() for _ in range(50)).encode())
        os._exit(0)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    child = os.read(read, 65536).decode().split()
    os.close(read)
    assert status == 0 and len(child) == 50
    parent = [new_id() for _ in range(50)]
    assert {i[16:] for i in child}.isdisjoint(i[16:] for i in parent)


def test_an_id_culex_drew_that_was_taken_is_drawn_again(
    r: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A drawn id the server already has would leave its task as it was and lose the job
    (a fork that copied the random state could do it): enqueue draws until one is free."""
    SendWelcomeEmailJob(to="first").enqueue(id="taken")
    drawn = iter(["taken", "fresh-1", "taken", "taken", "fresh-2", "fresh-3"])
    for module in ("culex.jobs.enqueue", "culex.jobs.batches"):  # (enqueue, enqueue_many)
        monkeypatch.setattr(sys.modules[module], "new_id", lambda: next(drawn))
    one = SendWelcomeEmailJob(to="one").enqueue()
    two, three = culex.enqueue_many(
        [SendWelcomeEmailJob(to="two"), SendWelcomeEmailJob(to="three")]
    )
    assert (one.id, two.id, three.id) == ("fresh-1", "fresh-2", "fresh-3")
    keys = queue_keys("culex", SendWelcomeEmailJob.queue)
    stored = {
        i: json.loads(r.hget(keys.task(i), "params") or "{}")["to"]
        for i in ("taken", "fresh-1", "fresh-2", "fresh-3")
    }
    assert stored == {"taken": "first", "fresh-1": "one", "fresh-2": "two", "fresh-3": "three"}
    # A client-made id that is taken is the idempotent case: nothing is drawn, nothing changes.
    assert SendWelcomeEmailJob(to="again").enqueue(id="taken").id == "taken"
    assert r.zcard(keys.waiting) == 4


def test_a_subclass_s_default_queue_is_its_own_class_name_unless_a_base_set_one(
    r: redis.Redis,
) -> None:
    """The default queue is the class name, under an abstract base too (docs/flask.md's
    AppJob): a queue set on a base is inherited, one a base took from its name is not."""

    class RuleAppJob(culex.QueuedJob, abstract=True):
        def perform(self) -> None: ...

    class RuleThumbnailJob(RuleAppJob): ...

    class RuleSharedJob(culex.QueuedJob, abstract=True):
        queue = "media"

    class RuleResizeJob(RuleSharedJob):
        def perform(self) -> None: ...

    class RuleBigResizeJob(RuleResizeJob):
        queue = "big"

    class RulePlainJob(culex.QueuedJob):
        def perform(self) -> None: ...

    class RuleChildJob(RulePlainJob): ...

    try:
        assert RuleAppJob.queue == "rule_app_job"
        assert RuleThumbnailJob.queue == "rule_thumbnail_job"
        assert RuleSharedJob.queue == RuleResizeJob.queue == "media"
        assert RuleBigResizeJob.queue == "big"
        assert (RulePlainJob.queue, RuleChildJob.queue) == ("rule_plain_job", "rule_child_job")
        task = RuleThumbnailJob().enqueue()
        assert culex.Task(task.id, "rule_thumbnail_job").state() == culex.TaskState.WAITING
    finally:
        for job in (RuleThumbnailJob, RuleResizeJob, RuleBigResizeJob, RulePlainJob, RuleChildJob):
            culex.registry.remove(job)


def test_max_stalls_is_a_whole_number_the_scripts_take() -> None:
    # (reclaim.lua refuses a bound past 2^42 - 1: a class or a setting that sent one would
    # stop every reclaim of its queue)
    from culex import config
    from culex._redis.scripts import MOST

    with pytest.raises(ValueError, match="max_stalls must be from 0 to"):

        class NeverDiesJob(culex.QueuedJob):
            max_stalls = MOST + 1

    with pytest.raises(culex.ConfigurationError, match="max_stalls must be a whole number"):
        config.settings(max_stalls=MOST + 1)
