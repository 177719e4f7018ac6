"""Param codecs and task results: pure Python, no Redis."""

from __future__ import annotations

import json
import math
import typing
import uuid
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, date, datetime, time, timedelta, timezone, tzinfo
from decimal import Decimal
from enum import Enum, Flag, IntEnum, StrEnum
from typing import Annotated, Any, Optional

import pytest

from culex.jobs import codecs, serialization
from culex.jobs.codecs import Codec, Deserializer, Serializer
from culex.jobs.serialization import codec_for, decode_result, encode_result, register_type

IST = timezone(timedelta(hours=5, minutes=30))
WHERE = "Job.p"


class Color(Enum):
    RED = "red"
    GREEN = "green"


class Level(IntEnum):
    LOW = 1
    HIGH = 2


class Perm(Flag):
    R = 1
    W = 2


class Mode(StrEnum):
    FAST = "fast"


class User:
    def __init__(self, user_id: int) -> None:
        self.user_id = user_id

    def __eq__(self, other: object) -> bool:
        return isinstance(other, User) and other.user_id == self.user_id

    def __hash__(self) -> int:
        return hash(self.user_id)

    def __repr__(self) -> str:
        return f"User({self.user_id})"


def _load_user(raw: object) -> User:
    if type(raw) is not int:
        raise ValueError(f"a user id is an int, got {raw!r}")
    return User(raw)


USER_HOOKS: dict[type, tuple[Serializer, Deserializer]] = {User: (lambda u: u.user_id, _load_user)}


def trip(tp: object, value: object, custom: Mapping[type, Any] | None = None) -> object:
    """validate, encode, store as JSON text (as the task hash does), load, decode."""
    codec = codec_for(tp, custom, WHERE)
    kept = codec.validate(value, WHERE)
    return codec.decode(json.loads(json.dumps(codec.encode(kept))), WHERE)


def assert_exact(back: object, value: object) -> None:
    # repr shows the types inside containers too (tuple vs list, Decimal('1.10'), tzinfo)
    assert back == value
    assert type(back) is type(value)
    assert repr(back) == repr(value)


ROUND_TRIPS: list[tuple[object, object]] = [
    (str, "héllo ✓ \x00 😀"),
    (str, ""),
    (int, 0),
    (int, -(10**40)),
    (float, 0.1),
    (float, -0.0),
    (float, 1e308),
    (bool, True),
    (bool, False),
    (Decimal, Decimal("1.10")),
    (Decimal, Decimal("-0.000")),
    (Decimal, Decimal("1E+3")),
    (uuid.UUID, uuid.UUID("12345678-1234-5678-1234-567812345678")),
    (datetime, datetime(2030, 1, 2, 3, 4, 5, 6789, tzinfo=IST)),
    (datetime, datetime(1999, 12, 31, 23, 59, tzinfo=timezone(timedelta(hours=-3)))),
    (datetime, datetime(2030, 1, 1, tzinfo=UTC)),
    (date, date(2030, 2, 28)),
    (time, time(13, 5, 7, 12)),
    (time, time(13, 5, tzinfo=timezone(timedelta(hours=2)))),
    (timedelta, timedelta(days=-3, microseconds=1)),
    (timedelta, timedelta.max),
    (timedelta, timedelta.min),
    (bytes, b"\x00\xff\xfe\x80 not utf-8"),
    (bytes, b""),
    (Color, Color.GREEN),
    (Level, Level.HIGH),
    (Perm, Perm.R | Perm.W),
    (list[dict[str, Decimal]], [{"a": Decimal("1.10"), "b": Decimal("2")}, {}]),
    (list[str], ["a", "b"]),
    (list[list[int]], [[1], [], [2, 3]]),
    (dict[str, int], {"x": 1, "y": 2}),
    (dict[int, str], {1: "a", -2: "b"}),
    (dict[uuid.UUID, list[date]], {uuid.UUID(int=7): [date(2030, 1, 1)]}),
    (dict[Color, float], {Color.RED: 1.5}),
    (dict[date, int], {date(2030, 1, 1): 1}),
    (tuple[int, ...], (1, 2, 3)),
    (tuple[int, ...], ()),
    (tuple[int, str, datetime], (1, "a", datetime(2030, 1, 1, tzinfo=IST))),
    (tuple[Decimal, ...], (Decimal("0.5"),)),
    (int | None, None),
    (int | None, 7),
    (Optional[list[bytes]], [b"\xff"]),  # noqa: UP045 (typing.Optional is supported too)
    (list[int | None], [1, None, 3]),
    (dict[str, tuple[int, int] | None], {"a": (1, 2), "b": None}),
    (typing.List[int], [1, 2]),  # noqa: UP006
    (Annotated[int, "meta"], 5),
]


@pytest.mark.parametrize(("tp", "value"), ROUND_TRIPS, ids=repr)
def test_round_trips_are_exact(tp: object, value: object) -> None:
    assert_exact(trip(tp, value), value)


def test_encodings_follow_the_wire_format() -> None:
    def enc(tp: object, value: object) -> object:
        return codec_for(tp).encode(value)

    assert enc(Decimal, Decimal("1.10")) == "1.10"
    assert enc(uuid.UUID, uuid.UUID(int=1)) == "00000000-0000-0000-0000-000000000001"
    assert enc(datetime, datetime(2030, 1, 1, tzinfo=IST)) == "2030-01-01T00:00:00+05:30"
    assert enc(date, date(2030, 1, 1)) == "2030-01-01"
    assert enc(time, time(1, 2, 3)) == "01:02:03"
    assert enc(timedelta, timedelta(hours=1, microseconds=5)) == 3_600_000_005
    assert enc(bytes, b"\xff\x00") == "/wA="
    assert enc(Color, Color.RED) == "red"
    assert enc(dict[str, int], {"a": 1}) == {"a": 1}
    assert enc(dict[int, Decimal], {1: Decimal("2")}) == [[1, "2"]]
    assert enc(tuple[int, str], (1, "a")) == [1, "a"]
    assert enc(int | None, None) is None


def test_params_text_is_compact_json_with_unicode_kept() -> None:
    data: dict[str, codecs.JSON] = {
        "name": 'Zoë "the" \u2028 naïve\n',
        "nested": {"list": [1, -2.5, 1e300, None, True, False, []], "empty": {}},
        "big": 2**70,
    }
    text = serialization.params_text(data)
    assert text == json.dumps(data, separators=(",", ":"), ensure_ascii=False)
    assert json.loads(text) == data
    assert " " not in serialization.params_text({"a": [1, 2], "b": {"c": 3}})
    with pytest.raises(TypeError, match="not JSON serializable"):
        serialization.params_text({"a": object()})  # type: ignore[dict-item]


def test_validate_keeps_the_type_the_decode_will_give() -> None:
    kept = codec_for(float).validate(3, WHERE)
    assert kept == 3.0 and type(kept) is float
    assert codec_for(list[float]).validate([1, 2.5], WHERE) == [1.0, 2.5]
    assert type(codec_for(list[float]).validate([1], WHERE)[0]) is float  # type: ignore[index]
    # subclass instances become the plain type (a decoded value could not be the subclass)
    assert type(codec_for(int).validate(Level.LOW, WHERE)) is int
    assert type(codec_for(str).validate(Mode.FAST, WHERE)) is str
    assert codec_for(str).validate(Mode.FAST, WHERE) == "fast"
    assert type(codec_for(tuple[int, ...]).validate((1, 2), WHERE)) is tuple
    assert type(codec_for(tuple[float, int]).validate((1, 2), WHERE)[0]) is float  # type: ignore[index]


def test_validate_copies_containers() -> None:
    original = ["a"]
    kept = codec_for(list[str]).validate(original, WHERE)
    original.append("b")
    assert kept == ["a"]


def test_a_stored_int_for_a_float_param_decodes_as_float() -> None:
    back = codec_for(float).decode(3, WHERE)
    assert back == 3.0 and type(back) is float


class _NoOffset(tzinfo):
    """A tzinfo that does not know its offset: as good as naive."""

    def utcoffset(self, dt: datetime | None) -> timedelta | None:
        return None

    def dst(self, dt: datetime | None) -> timedelta | None:
        return None

    def tzname(self, dt: datetime | None) -> str | None:
        return None


WRONG_VALUES: list[tuple[object, object, str]] = [
    (int, "x", "Job.p: expected int, got str 'x'"),
    (int, True, "Job.p: expected int, got bool True"),
    (int, 1.0, "Job.p: expected int, got float 1.0"),
    (float, True, "Job.p: expected float, got bool True"),
    (float, "1.5", "Job.p: expected float, got str '1.5'"),
    (float, math.nan, "Job.p: expected a finite float"),
    (float, math.inf, "Job.p: expected a finite float"),
    (float, 10**400, "Job.p: int too large for a float"),
    (str, b"x", "Job.p: expected str, got bytes b'x'"),
    (bool, 1, "Job.p: expected bool, got int 1"),
    (Decimal, 1.5, "Job.p: expected Decimal, got float 1.5"),
    (uuid.UUID, "12345678-1234-5678-1234-567812345678", "Job.p: expected UUID, got str"),
    (datetime, datetime(2030, 1, 1), "Job.p: expected a timezone-aware datetime"),
    (datetime, datetime(2030, 1, 1, tzinfo=_NoOffset()), "Job.p: expected a timezone-aware"),
    (datetime, date(2030, 1, 1), "Job.p: expected datetime, got date"),
    (date, datetime(2030, 1, 1, tzinfo=UTC), "Job.p: expected date (not a datetime"),
    (time, time(1, tzinfo=_NoOffset()), "Job.p: expected time without tzinfo or with a fixed"),
    (timedelta, 5, "Job.p: expected timedelta, got int 5"),
    (bytes, bytearray(b"x"), "Job.p: expected bytes, got bytearray"),
    (Color, "red", "Job.p: expected Color, got str 'red'"),
    (list[int], (1, 2), "Job.p: expected list[int], got tuple (1, 2)"),
    (list[int], [1, 2, "x"], "Job.p[2]: expected int, got str 'x'"),
    (list[int], "12", "Job.p: expected list[int], got str '12'"),
    (dict[str, int], {"k": "v"}, "Job.p['k']: expected int, got str 'v'"),
    (dict[str, int], {1: 1}, "Job.p (a key): expected str, got int 1"),
    (dict[str, list[int]], {"k": [0, None]}, "Job.p['k'][1]: expected int, got NoneType None"),
    (tuple[int, str], (1,), "Job.p: expected tuple[int, str], got tuple (1,)"),
    (tuple[int, str], [1, "a"], "Job.p: expected tuple[int, str], got list"),
    (tuple[int, str], (1, 2), "Job.p[1]: expected str, got int 2"),
    (tuple[int, ...], [1], "Job.p: expected tuple[int, ...], got list [1]"),
    (int | None, "x", "Job.p: expected int, got str 'x'"),
]


@pytest.mark.parametrize(("tp", "value", "message"), WRONG_VALUES, ids=repr)
def test_validate_rejects_wrong_values(tp: object, value: object, message: str) -> None:
    with pytest.raises(TypeError) as caught:
        codec_for(tp).validate(value, WHERE)
    assert str(caught.value).startswith(message)


def test_long_values_are_shortened_in_messages() -> None:
    with pytest.raises(TypeError) as caught:
        codec_for(int).validate("x" * 10_000, WHERE)
    assert len(str(caught.value)) < 120
    assert str(caught.value).endswith("...")


BAD_DATA: list[tuple[object, object, str]] = [
    (int, "5", "Job.p: cannot decode int from str '5'"),
    (int, True, "Job.p: cannot decode int from bool"),
    (int, 1.5, "Job.p: cannot decode int"),
    (str, 5, "Job.p: cannot decode str from int 5"),
    (bool, 1, "Job.p: cannot decode bool"),
    (float, "1.5", "Job.p: cannot decode float"),
    (float, json.loads("NaN"), "Job.p: cannot decode float"),
    (float, json.loads("1e999"), "Job.p: cannot decode float"),
    (float, False, "Job.p: cannot decode float"),
    (Decimal, "abc", "Job.p: cannot decode Decimal from str 'abc'"),
    (Decimal, 1.5, "Job.p: cannot decode Decimal"),
    (uuid.UUID, "not-a-uuid", "Job.p: cannot decode UUID"),
    (datetime, "2030-01-01T00:00:00", "Job.p: cannot decode datetime"),
    (datetime, "yesterday", "Job.p: cannot decode datetime"),
    (date, "2030-02-30", "Job.p: cannot decode date"),
    (time, "25:00", "Job.p: cannot decode time"),
    (timedelta, 1.5, "Job.p: cannot decode timedelta"),
    (timedelta, "1:00:00", "Job.p: cannot decode timedelta"),
    (timedelta, 10**30, "Job.p: cannot decode timedelta"),
    (bytes, "@@not base64", "Job.p: cannot decode bytes"),
    (bytes, "/wA", "Job.p: cannot decode bytes"),
    (bytes, "/wA=!", "Job.p: cannot decode bytes"),
    (Color, "blue", "Job.p: cannot decode Color from str 'blue': ValueError: 'blue' is not a"),
    (Color, ["red"], "Job.p: cannot decode Color"),
    (list[int], {"a": 1}, "Job.p: cannot decode list[int]"),
    (list[int], [1, "2"], "Job.p[1]: cannot decode int from str '2'"),
    (tuple[int, int], [1], "Job.p: cannot decode tuple[int, int]"),
    (tuple[int, int], [1, 2, 3], "Job.p: cannot decode tuple[int, int]"),
    (tuple[int, ...], [1, None], "Job.p[1]: cannot decode int"),
    (dict[str, int], [["a", 1]], "Job.p: cannot decode dict[str, int]"),
    (dict[str, int], {"a": "1"}, "Job.p['a']: cannot decode int"),
    (dict[int, str], {"1": "a"}, "Job.p: cannot decode dict[int, str]"),
    (dict[int, str], [[1, "a", "b"]], "Job.p: cannot decode dict[int, str] from list"),
    (dict[int, str], [["1", "a"]], "Job.p (a key): cannot decode int from str '1'"),
    (dict[int, str], [[1, "a"], [1, "b"]], "Job.p: cannot decode dict[int, str]"),
    (int | None, "x", "Job.p: cannot decode int"),
]


@pytest.mark.parametrize(("tp", "raw", "message"), BAD_DATA, ids=repr)
def test_decode_rejects_data_that_does_not_fit(tp: object, raw: Any, message: str) -> None:
    with pytest.raises(ValueError) as caught:
        codec_for(tp).decode(raw, WHERE)
    assert str(caught.value).startswith(message)


UNSUPPORTED: list[tuple[object, str]] = [
    (set[int], "Job.p: unsupported param type set[int]"),
    (User, "Job.p: unsupported param type User: use str, int"),
    (list[User], "Job.p: unsupported param type User: use str, int"),
    (dict[list[int], int], "Job.p: unsupported param type dict[list[int], int]: dict keys"),
    (dict[int | None, int], "Job.p: unsupported param type dict[int | None, int]: dict keys"),
    ("int", "Job.p: unsupported param type 'int'"),
]


@pytest.mark.parametrize(("tp", "message"), UNSUPPORTED, ids=repr)
def test_unsupported_annotations_are_refused_when_compiled(tp: object, message: str) -> None:
    with pytest.raises(TypeError) as caught:
        codec_for(tp, None, WHERE)
    assert str(caught.value).startswith(message)


# An annotation culex cannot type is plain JSON: values must be JSON, and come back as JSON
# gives them (a bare tuple as a tuple).
PLAIN: list[tuple[object, object]] = [
    (Any, {"a": [1, 2.5, None, True]}),
    (object, "x"),
    (list, [1, "a", {"b": None}]),
    (typing.List, [1]),  # noqa: UP006
    (dict, {"a": [1]}),
    (tuple, (1, "a", [2])),
    (list[Any], [{"a": 1}]),
    (dict[str, Any], {"a": {"b": [1]}}),
    (dict[Any, Any], {"a": 1}),
    (int | str, "five"),
    (int | str, 5),
    (typing.Union[int, str, None], None),  # noqa: UP007
    (dict[str, list], {"a": [1, "b"]}),  # type: ignore[type-arg]
]


@pytest.mark.parametrize(("tp", "value"), PLAIN, ids=repr)
def test_an_annotation_culex_cannot_type_is_plain_json(tp: object, value: object) -> None:
    back = trip(tp, value)
    assert back == value and type(back) is type(value)


@pytest.mark.parametrize(
    ("tp", "value", "message"),
    [
        (
            Any,
            {1: "a"},
            "Job.p: expected plain JSON for Any (str, int, float, bool, None, list, "
            "dict with str keys), got dict {1: 'a'}",
        ),
        (int | str, uuid.UUID(int=1), "Job.p: expected plain JSON for int | str"),
        (dict[str, Any], {"a": datetime(2030, 1, 1, tzinfo=UTC)}, "Job.p['a']: expected plain"),
        (list, (1, 2), "Job.p: expected list[Any], got tuple"),
        (dict, {1: 2}, "Job.p (a key): expected str, got int 1"),
        (Any, math.nan, "Job.p: expected plain JSON for Any"),
    ],
    ids=repr,
)
def test_a_plain_json_param_refuses_what_json_cannot_hold(
    tp: object, value: object, message: str
) -> None:
    with pytest.raises(TypeError) as caught:
        codec_for(tp).validate(value, WHERE)
    assert str(caught.value).startswith(message)


def test_an_enum_whose_values_are_not_json_scalars_is_refused() -> None:
    class Point(Enum):
        ORIGIN = (0, 0)

    with pytest.raises(TypeError, match=r"unsupported param type Point: Point\.ORIGIN"):
        codec_for(Point)


# -- custom types ------------------------------------------------------------------------


def test_a_custom_type_round_trips_at_any_depth() -> None:
    assert trip(User, User(1), USER_HOOKS) == User(1)
    assert trip(list[User], [User(1), User(2)], USER_HOOKS) == [User(1), User(2)]
    assert trip(dict[str, User | None], {"a": User(3), "b": None}, USER_HOOKS) == {
        "a": User(3),
        "b": None,
    }
    assert trip(dict[User, int], {User(4): 4}, USER_HOOKS) == {User(4): 4}
    assert codec_for(list[User], USER_HOOKS).encode([User(5)]) == [5]


def test_a_custom_type_is_checked_both_ways() -> None:
    codec = codec_for(list[User], USER_HOOKS, WHERE)
    with pytest.raises(TypeError, match=r"^Job\.p\[0\]: expected User, got int 1$"):
        codec.validate([1], WHERE)
    with pytest.raises(ValueError, match=r"^Job\.p\[1\]: cannot decode User from str 'x'.*an int"):
        codec.decode([1, "x"], WHERE)


def test_a_serializer_that_does_not_return_json_is_reported() -> None:
    def returning(data: object) -> Callable[[Any], Any]:
        return lambda user: data

    for bad in ((1, 2), {1: "a"}, math.nan, object(), [b"x"]):
        codec = codec_for(User, {User: (returning(bad), _load_user)})
        with pytest.raises(TypeError, match=r"the serializer of User returned .* not JSON"):
            codec.encode(User(1))


def test_a_deserializer_returning_another_type_is_reported() -> None:
    codec = codec_for(User, {User: (lambda u: u.user_id, lambda raw: raw)}, WHERE)
    with pytest.raises(ValueError, match=r"^Job\.p: .*the deserializer returned int"):
        codec.decode(1, WHERE)


class _LazyHooks(Mapping[type, tuple[Serializer, Deserializer]]):
    """Like the job layer's hooks: answers lookups, lists nothing (so len() is 0)."""

    def __getitem__(self, tp: type) -> tuple[Serializer, Deserializer]:
        if tp is User:
            return USER_HOOKS[User]
        raise KeyError(tp)

    def __iter__(self) -> Iterator[type]:
        return iter(())

    def __len__(self) -> int:
        return 0


def test_custom_hooks_may_be_a_lazy_mapping() -> None:
    assert trip(list[User], [User(9)], _LazyHooks()) == [User(9)]


@pytest.fixture
def fresh_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(serialization, "_registry", {})


@pytest.mark.usefixtures("fresh_registry")
def test_register_type_teaches_every_codec_compiled_afterwards() -> None:
    with pytest.raises(TypeError, match="unsupported param type User"):
        codec_for(list[User])
    register_type(User, lambda u: str(u.user_id), lambda raw: User(int(str(raw))))
    codec = codec_for(list[User])
    assert codec.encode([User(3)]) == ["3"]
    assert trip(tuple[User, ...], (User(3),)) == (User(3),)


@pytest.mark.usefixtures("fresh_registry")
def test_a_jobs_own_hooks_win_over_the_registry() -> None:
    register_type(User, lambda u: "registered", lambda raw: User(0))
    assert codec_for(User, USER_HOOKS).encode(User(7)) == 7


@pytest.mark.usefixtures("fresh_registry")
def test_register_type_checks_its_arguments() -> None:
    with pytest.raises(TypeError, match="needs a class"):
        register_type(list[int], str, int)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="needs a class"):
        register_type(User(1), str, int)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="deserialize must be callable"):
        register_type(User, str, "nope")  # type: ignore[arg-type]
    assert serialization._registry == {}


def test_codec_is_the_public_interface() -> None:
    codec = codec_for(dict[str, list[int]])
    assert isinstance(codec, Codec)
    assert "dict[str, list[int]]" in repr(codec)


# -- task results -------------------------------------------------------------------------


class _BrokenRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no")


def test_results_hold_json_natives_as_they_are() -> None:
    value = {"a": [1, 2.5, "x", None, True], "b": {"c": False}}
    assert json.loads(encode_result(value)) == value
    assert encode_result(None) == "null"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (Decimal("1.10"), "1.10"),
        (uuid.UUID(int=1), "00000000-0000-0000-0000-000000000001"),
        (datetime(2030, 1, 1, tzinfo=IST), "2030-01-01T00:00:00+05:30"),
        (date(2030, 1, 1), "2030-01-01"),
        (time(1, 2), "01:02:00"),
        (timedelta(minutes=1, milliseconds=500), 60.5),
        (b"\xff\x00", "/wA="),
        (Color.RED, "red"),
        (Level.HIGH, 2),
        ((1, (2, 3)), [1, [2, 3]]),
        ({10, 3, 1}, [1, 3, 10]),  # iterates as 1, 10, 3
        (frozenset({"b", "a"}), ["a", "b"]),
        ({1: "a", None: "b", (1, 2): "c"}, {"1": "a", "null": "b", "[1, 2]": "c"}),
        (math.nan, "nan"),
        ([math.inf], ["inf"]),
        (User(1), "User(1)"),
        ({"u": [User(2)]}, {"u": ["User(2)"]}),
    ],
    ids=repr,
)
def test_results_convert_what_json_cannot_hold(value: object, expected: object) -> None:
    text = encode_result(value)
    json.loads(text, parse_constant=pytest.fail)  # strict JSON: no NaN for other readers
    assert decode_result(text) == expected


def test_encode_result_never_raises() -> None:
    cycle: list[object] = []
    cycle.append(cycle)
    assert decode_result(encode_result(cycle)) == "[[...]]"
    assert decode_result(encode_result(_BrokenRepr())) == "<_BrokenRepr object>"
    assert decode_result(encode_result({3, "mixed"})) in ([3, "mixed"], ["mixed", 3])


def test_decode_result() -> None:
    assert decode_result(None) is None
    assert decode_result(b'{"a": [1]}') == {"a": [1]}
    assert decode_result("5") == 5


def test_a_typed_result_that_does_not_fit_is_stored_as_plain_json(
    caplog: pytest.LogCaptureFixture,
) -> None:
    where = "the result of CountJob.perform()"
    assert encode_result("five", codec_for(int), where) == '"five"'
    assert caplog.messages == [f"{where}: expected int, got str 'five'; stored as plain JSON"]
    caplog.clear()
    assert encode_result(None, codec_for(str), where) == "null"
    assert caplog.messages == [f"{where}: expected str, got NoneType None; stored as plain JSON"]
    caplog.clear()
    failing: dict[type, tuple[Serializer, Deserializer]] = {User: (returning_error, _load_user)}
    assert decode_result(encode_result(User(3), codec_for(User, failing), where)) == "User(3)"
    assert caplog.messages == [
        f"{where}: RuntimeError: no; stored as plain JSON, not JSON (an object of class User): "
        "stored as its repr, a string"
    ]


def returning_error(value: object) -> int:
    raise RuntimeError("no")


def test_a_result_that_does_not_fit_its_codec_reads_back_as_plain_json() -> None:
    assert decode_result('"five"', codec_for(int), "w") == "five"
    assert decode_result("[1, 2]", codec_for(dict[str, int]), "w") == [1, 2]
    assert decode_result('"x"', codec_for(User, USER_HOOKS), "w") == "x"


# What culex stored before results were typed (commit 2459f14): every result as plain JSON,
# by encode_result alone. These texts are what it wrote; each reads back as the annotation
# says. tests/test_upgrade.py writes them with that culex itself.
OLDER_RESULTS: list[tuple[object, str, object]] = [
    (timedelta, "1.0005", timedelta(seconds=1, microseconds=500)),
    (timedelta, "-86395.0", timedelta(days=-1, seconds=5)),
    (timedelta | None, "60.0", timedelta(minutes=1)),
    (list[timedelta], "[60.0]", [timedelta(minutes=1)]),
    (tuple[timedelta, int], "[0.0, 7]", (timedelta(0), 7)),
    (dict[str, timedelta], '{"a": 86400.0}', {"a": timedelta(days=1)}),
    (dict[int, str], '{"1": "a", "2": "b"}', {1: "a", 2: "b"}),
    (dict[bool, int], '{"true": 1, "false": 0}', {True: 1, False: 0}),
    (dict[float, str], '{"1.5": "x"}', {1.5: "x"}),
    (dict[Level, str], '{"2": "h"}', {Level.HIGH: "h"}),
    (dict[Color, int], '{"red": 1}', {Color.RED: 1}),
    (dict[uuid.UUID, int], '{"00000000-0000-0000-0000-000000000001": 1}', {uuid.UUID(int=1): 1}),
    (
        dict[date, list[timedelta]],
        '{"2030-01-02": [3600.0]}',
        {date(2030, 1, 2): [timedelta(hours=1)]},
    ),
    (dict[timedelta, int], '{"3.0": 3}', {timedelta(seconds=3): 3}),
    (dict[Decimal, int], '{"1.10": 1}', {Decimal("1.10"): 1}),
    (
        dict[datetime, int],
        '{"2030-01-01T00:00:00+05:30": 1}',
        {datetime(2030, 1, 1, tzinfo=IST): 1},
    ),
    (dict[int, dict[int, timedelta]], '{"1": {"2": 1.0}}', {1: {2: timedelta(seconds=1)}}),
    (dict[int, str], "{}", {}),
    (float, '"inf"', math.inf),
    (float, '"-inf"', -math.inf),
    (list[float], '["inf", 1.5]', [math.inf, 1.5]),
    # what the codecs cannot give back comes back as the plain JSON stored
    (datetime, '"2030-01-01T00:00:00"', "2030-01-01T00:00:00"),  # a naive datetime
    (User, '"User(3)"', "User(3)"),  # a custom type, stored as its repr
]


@pytest.mark.parametrize(("tp", "text", "expected"), OLDER_RESULTS, ids=repr)
def test_results_stored_before_they_were_typed_read_back(
    tp: object, text: str, expected: object
) -> None:
    value = decode_result(text, codec_for(tp, USER_HOOKS), "w")
    assert value == expected and type(value) is type(expected)


def test_an_older_nan_reads_back_as_nan() -> None:
    assert math.isnan(typing.cast(float, decode_result('"nan"', codec_for(float), "w")))


def test_a_typed_result_reads_back_as_written_not_as_an_older_one() -> None:
    # this version's own encodings first: 5 is 5 microseconds, not 5 seconds
    assert decode_result("5", codec_for(timedelta), "w") == timedelta(microseconds=5)
    assert decode_result('[[1, "a"]]', codec_for(dict[int, str]), "w") == {1: "a"}
