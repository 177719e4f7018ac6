"""Param values <-> JSON: one codec per declared param type, compiled once per job class.

A codec validates a constructor value (TypeError), encodes it to JSON-compatible data and
decodes that data back (ValueError when it does not fit the type). Round trips are exact:
the decoded value equals the original and has the same type.

Encodings: str, int, float, bool as themselves; Decimal, UUID as strings; datetime (always
tz-aware), date, time as ISO 8601 strings; timedelta as an integer number of microseconds;
bytes as base64; an Enum as its member's value; list[X] and tuple[...] as arrays;
dict[str, V] as an object, dict[K, V] with other keys as an array of [key, value] pairs;
None as null for X | None.

Task results use the same codecs, by the return annotation of ``perform``
(``result_codec``). Without one they are looser: ``encode_result`` turns any return value
into JSON text and never raises.
"""

from __future__ import annotations

import base64
import contextlib
import json
import math
import operator
import types
import typing
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any, TypeAlias
from uuid import UUID

JSON: TypeAlias = bool | int | float | str | list["JSON"] | dict[str, "JSON"] | None
Serializer: TypeAlias = Callable[[Any], JSON]
Deserializer: TypeAlias = Callable[[JSON], Any]

# register_type()'s custom types, looked up when a codec is compiled
_registry: dict[type, tuple[Serializer, Deserializer]] = {}
_isfinite = math.isfinite
_enum_value = operator.attrgetter("value")


def _short(value: object, limit: int = 60) -> str:
    """repr of a value for an error message, cut short: values can be big."""
    try:
        text = repr(value)
    except Exception:  # a broken __repr__, or an int too long to print
        text = f"<{type(value).__name__} object>"
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _at(where: str) -> str:
    return f"{where}: " if where else ""


def _all_exact(values: Iterable[object], exact: type | None) -> bool:
    """Are all values exactly of the type a codec keeps as is? Then containers skip the calls."""
    return exact is not None and all(type(v) is exact for v in values)


class Codec(ABC):
    """Validates, encodes and decodes the values of one declared type."""

    __slots__ = ("exact", "name")

    def __init__(self, name: str, exact: type | None = None) -> None:
        self.name = name  # the type as written in an annotation, for messages
        # values of exactly this type go through validate, encode and decode unchanged
        self.exact = exact

    @abstractmethod
    def validate(self, value: Any, where: str) -> object:
        """The value to keep; TypeError (naming ``where``) if it is not of this type."""

    @abstractmethod
    def encode(self, value: Any) -> JSON:
        """JSON-compatible data for a validated value."""

    @abstractmethod
    def decode(self, raw: JSON, where: str) -> object:
        """The value back from its data; ValueError (naming ``where``) if the data does not fit."""

    def _wrong(self, value: object, where: str, expected: str = "") -> TypeError:
        got = f"{type(value).__name__} {_short(value)}"
        return TypeError(f"{_at(where)}expected {expected or self.name}, got {got}")

    def _bad(self, raw: object, where: str, why: str = "") -> ValueError:
        got = f"{type(raw).__name__} {_short(raw)}"
        return ValueError(f"{_at(where)}cannot decode {self.name} from {got}{why and ': '}{why}")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class _Native(Codec):
    """str, int and bool: JSON holds them as they are."""

    __slots__ = ("plain", "tp")

    def __init__(self, tp: type, plain: Callable[[Any], object]) -> None:
        super().__init__(tp.__name__, tp)
        self.tp = tp
        self.plain = plain  # an instance of a subclass (IntEnum, StrEnum) -> the plain type

    def validate(self, value: Any, where: str) -> object:
        if type(value) is self.tp:
            return value
        if isinstance(value, self.tp) and not isinstance(value, bool):
            return self.plain(value)
        raise self._wrong(value, where)

    def encode(self, value: Any) -> JSON:
        data: JSON = value
        return data

    def decode(self, raw: JSON, where: str) -> object:
        if type(raw) is self.tp:
            return raw
        raise self._bad(raw, where)


class _Float(Codec):
    """float: ints are accepted (and kept as floats); nan and inf are not (JSON lacks them)."""

    __slots__ = ()

    def validate(self, value: Any, where: str) -> object:
        if type(value) is float and _isfinite(value):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:
                raise TypeError(f"{_at(where)}int too large for a float: {_short(value)}") from None
            if _isfinite(number):
                return number
            raise self._wrong(value, where, "a finite float (JSON has no nan or inf)")
        raise self._wrong(value, where)

    def encode(self, value: Any) -> JSON:
        data: JSON = value
        return data

    def decode(self, raw: JSON, where: str) -> object:
        if type(raw) is float and _isfinite(raw):
            return raw
        if type(raw) is int:  # another producer may write 3 for 3.0
            try:
                return float(raw)
            except OverflowError:
                pass
        raise self._bad(raw, where)


class _Scalar(Codec):
    """A type stored as one JSON string or int: ``dump`` and ``load`` convert.

    ``check`` returns what was expected when a value of the type still does not fit, else "".
    """

    __slots__ = ("check", "dump", "load", "raw", "tp")

    def __init__(
        self,
        tp: type,
        raw: type,
        dump: Callable[[Any], JSON],
        load: Callable[[Any], object],
        check: Callable[[Any], str] = lambda value: "",
    ) -> None:
        super().__init__(tp.__name__)
        self.tp, self.raw, self.dump, self.load, self.check = tp, raw, dump, load, check

    def validate(self, value: Any, where: str) -> object:
        if not isinstance(value, self.tp):
            raise self._wrong(value, where)
        expected = self.check(value)
        if expected:
            raise self._wrong(value, where, expected)
        # a subclass instance becomes what decode will give
        return value if type(value) is self.tp else self.load(self.dump(value))

    def encode(self, value: Any) -> JSON:
        return self.dump(value)

    def decode(self, raw: JSON, where: str) -> object:
        if type(raw) is not self.raw:
            raise self._bad(raw, where)
        try:
            value = self.load(raw)
        except (ValueError, ArithmeticError) as exc:  # Decimal's InvalidOperation is the latter
            raise self._bad(raw, where, str(exc)) from None
        expected = self.check(value)
        if expected:
            raise self._bad(raw, where, f"expected {expected}")
        return value


def _aware(value: datetime) -> str:
    # a naive datetime's instant would depend on the reader's clock
    return "" if value.utcoffset() is not None else "a timezone-aware datetime (tzinfo=UTC)"


def _not_datetime(value: date) -> str:
    # datetime is a date subclass, but as a date param value it would lose its time
    return "date (not a datetime: use .date())" if isinstance(value, datetime) else ""


def _fixed_offset(value: time) -> str:
    # ISO text carries an offset, not a ZoneInfo (a time's ZoneInfo has no offset anyway)
    if value.tzinfo is None or value.utcoffset() is not None:
        return ""
    return "time without tzinfo or with a fixed-offset tzinfo"


def _micros(value: timedelta) -> int:
    return (value.days * 86400 + value.seconds) * 1_000_000 + value.microseconds


def _from_micros(raw: int) -> timedelta:
    return timedelta(microseconds=raw)  # exact: ints are not rounded through float


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _from_b64(raw: str) -> bytes:
    return base64.b64decode(raw, validate=True)


class _Custom(Codec):
    """A class with a serializer and deserializer (the job's hooks, register_type, an Enum)."""

    __slots__ = ("cls", "dump", "load")

    def __init__(self, cls: type, dump: Serializer, load: Deserializer) -> None:
        super().__init__(cls.__name__)
        self.cls, self.dump, self.load = cls, dump, load

    def validate(self, value: Any, where: str) -> object:
        if isinstance(value, self.cls):
            return value
        raise self._wrong(value, where)

    def encode(self, value: Any) -> JSON:
        data = self.dump(value)
        if not _is_json(data):
            raise TypeError(
                f"the serializer of {self.name} returned {type(data).__name__} {_short(data)}, "
                "not JSON (str, int, finite float, bool, None, list, dict with str keys)"
            )
        return data

    def decode(self, raw: JSON, where: str) -> object:
        try:
            value = self.load(raw)
        except Exception as exc:  # whatever the user's deserializer raises means "does not fit"
            raise self._bad(raw, where, f"{type(exc).__name__}: {exc}") from exc
        if isinstance(value, self.cls):
            return value
        raise self._bad(raw, where, f"the deserializer returned {type(value).__name__}")


def _is_json(data: object) -> bool:
    """Is data made only of JSON types (exactly: no tuples, no nan)?"""
    if data is None or type(data) in (str, int, bool):
        return True
    if type(data) is float:
        return _isfinite(data)
    if type(data) is list:
        return all(_is_json(item) for item in data)
    if type(data) is dict:
        return all(type(key) is str and _is_json(item) for key, item in data.items())
    return False


class _Seq(Codec):
    """list[X] and tuple[X, ...]: a JSON array."""

    __slots__ = ("item", "kind")

    def __init__(self, kind: type[list[Any]] | type[tuple[Any, ...]], item: Codec) -> None:
        super().__init__(f"list[{item.name}]" if kind is list else f"tuple[{item.name}, ...]")
        self.kind, self.item = kind, item

    def validate(self, value: Any, where: str) -> object:
        if not isinstance(value, self.kind):
            raise self._wrong(value, where)
        if _all_exact(value, self.item.exact):
            return self.kind(value)
        check = self.item.validate
        items = [check(v, f"{where}[{i}]") for i, v in enumerate(value)]
        return items if self.kind is list else tuple(items)

    def encode(self, value: Any) -> JSON:
        if self.item.exact is not None:
            return list(value)
        encode = self.item.encode
        return [encode(v) for v in value]

    def decode(self, raw: JSON, where: str) -> object:
        if not isinstance(raw, list):
            raise self._bad(raw, where)
        if _all_exact(raw, self.item.exact):
            items: list[Any] = raw
        else:
            decode = self.item.decode
            items = [decode(v, f"{where}[{i}]") for i, v in enumerate(raw)]
        return items if self.kind is list else tuple(items)


class _Tuple(Codec):
    """tuple[X, Y, Z]: a JSON array of that length."""

    __slots__ = ("items",)

    def __init__(self, items: list[Codec]) -> None:
        super().__init__(f"tuple[{', '.join(c.name for c in items)}]")
        self.items = items

    def validate(self, value: Any, where: str) -> object:
        if not isinstance(value, tuple) or len(value) != len(self.items):
            raise self._wrong(value, where)
        pairs = enumerate(zip(self.items, value, strict=True))
        return tuple([c.validate(v, f"{where}[{i}]") for i, (c, v) in pairs])

    def encode(self, value: Any) -> JSON:
        return [c.encode(v) for c, v in zip(self.items, value, strict=True)]

    def decode(self, raw: JSON, where: str) -> object:
        if not isinstance(raw, list) or len(raw) != len(self.items):
            raise self._bad(raw, where, f"expected an array of {len(self.items)}")
        pairs = enumerate(zip(self.items, raw, strict=True))
        return tuple([c.decode(v, f"{where}[{i}]") for i, (c, v) in pairs])


class _Dict(Codec):
    """dict[K, V]: a JSON object when K is str, else an array of [key, value] pairs."""

    __slots__ = ("key", "pairs", "value")

    def __init__(self, key: Codec, value: Codec) -> None:
        super().__init__(f"dict[{key.name}, {value.name}]")
        self.key, self.value = key, value
        self.pairs = key is not _STR

    def validate(self, value: Any, where: str) -> object:
        if not isinstance(value, dict):
            raise self._wrong(value, where)
        if not _all_exact(value, self.key.exact):
            key = self.key.validate
            value = {key(k, f"{where} (a key)"): v for k, v in value.items()}
        if _all_exact(value.values(), self.value.exact):
            return dict(value)
        check = self.value.validate
        return {k: check(v, f"{where}[{k!r}]") for k, v in value.items()}

    def encode(self, value: Any) -> JSON:
        encode = self.value.encode
        if self.pairs:
            key = self.key.encode
            return [[key(k), encode(v)] for k, v in value.items()]
        if self.value.exact is not None:
            return dict(value)
        return {k: encode(v) for k, v in value.items()}

    def decode(self, raw: JSON, where: str) -> object:
        if self.pairs:
            return self._decode_pairs(raw, where)
        if not isinstance(raw, dict):
            raise self._bad(raw, where)
        if _all_exact(raw.values(), self.value.exact):
            return raw
        decode = self.value.decode
        return {k: decode(v, f"{where}[{k!r}]") for k, v in raw.items()}

    def _decode_pairs(self, raw: JSON, where: str) -> dict[object, object]:
        if not isinstance(raw, list):
            raise self._bad(raw, where, "expected an array of [key, value] pairs")
        out: dict[object, object] = {}
        for pair in raw:
            if not isinstance(pair, list) or len(pair) != 2:
                raise self._bad(pair, where, "expected a [key, value] pair")
            k = self.key.decode(pair[0], f"{where} (a key)")
            out[k] = self.value.decode(pair[1], f"{where}[{k!r}]")
        if len(out) != len(raw):
            raise self._bad(raw, where, "duplicate keys")
        return out


class _Optional(Codec):
    """X | None: null for None."""

    __slots__ = ("inner",)

    def __init__(self, inner: Codec) -> None:
        super().__init__(f"{inner.name} | None")
        self.inner = inner

    def validate(self, value: Any, where: str) -> object:
        return None if value is None else self.inner.validate(value, where)

    def encode(self, value: Any) -> JSON:
        return None if value is None else self.inner.encode(value)

    def decode(self, raw: JSON, where: str) -> object:
        return None if raw is None else self.inner.decode(raw, where)


_STR = _Native(str, str.__str__)  # str.__str__ of a subclass instance: a plain str copy
_SCALARS: dict[type, Codec] = {
    str: _STR,
    int: _Native(int, int.__int__),
    bool: _Native(bool, bool),
    float: _Float("float"),
    Decimal: _Scalar(Decimal, str, str, Decimal),
    UUID: _Scalar(UUID, str, str, UUID),
    datetime: _Scalar(datetime, str, datetime.isoformat, datetime.fromisoformat, _aware),
    date: _Scalar(date, str, date.isoformat, date.fromisoformat, _not_datetime),
    time: _Scalar(time, str, time.isoformat, time.fromisoformat, _fixed_offset),
    timedelta: _Scalar(timedelta, int, _micros, _from_micros),
    bytes: _Scalar(bytes, str, _b64, _from_b64),
}
_SUPPORTED = (
    "use str, int, float, bool, Decimal, UUID, datetime, date, time, timedelta, bytes, an Enum, "
    "list[X], dict[K, V], tuple[X, ...], tuple[X, Y], X | None, or a type with a serializer "
    "(culex.register_type)"
)
_BARE: dict[object, str] = {
    list: "give the element type: list[int]",
    tuple: "give the element types: tuple[int, ...] or tuple[int, str]",
    dict: "give the key and value types: dict[str, int]",
}


def codec_for(
    tp: object,
    custom: Mapping[type, tuple[Serializer, Deserializer]] | None = None,
    where: str = "",
) -> Codec:
    """Compile the codec of a param annotation; TypeError naming the type if unsupported.

    A class in ``custom`` (or else registered with ``register_type``) uses its serializer,
    at any nesting level.
    """
    # `is not None`, not `or`: a mapping that looks its keys up lazily may report len() 0
    return _compile(tp, custom if custom is not None else {}, where)


def _compile(tp: object, custom: Mapping[type, tuple[Any, Any]], where: str) -> Codec:
    if tp is Any:  # a class since Python 3.11: catch it before the class lookups
        raise _unsupported(tp, where, "give a concrete type (JSON cannot tell which type it was)")
    if isinstance(tp, type) and not isinstance(tp, types.GenericAlias):
        return _compile_class(tp, custom, where)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return _compile(args[0], custom, where)
    if origin is typing.Union or origin is types.UnionType:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return _Optional(_compile(rest[0], custom, where))
        raise _unsupported(tp, where, "a union other than X | None (JSON loses which type it was)")
    if origin in _BARE and not args:
        raise _unsupported(tp, where, _BARE[origin])
    if origin is list:
        return _Seq(list, _compile(args[0], custom, where))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return _Seq(tuple, _compile(args[0], custom, where))
    if origin is tuple:
        return _Tuple([_compile(a, custom, where) for a in args])
    if origin is dict:
        return _dict(tp, args, custom, where)
    raise _unsupported(tp, where)


def _compile_class(tp: type, custom: Mapping[type, tuple[Any, Any]], where: str) -> Codec:
    hooks = custom.get(tp) or _registry.get(tp)
    if hooks is not None:
        return _Custom(tp, *hooks)
    if tp in _SCALARS:
        return _SCALARS[tp]
    if issubclass(tp, Enum):
        for member in tp.__members__.values():
            if not _is_json(member.value) or isinstance(member.value, list | dict):
                raise _unsupported(tp, where, f"{member} has a value that is not a JSON scalar")
        return _Custom(tp, _enum_value, tp)  # stored as the member's value
    raise _unsupported(tp, where, _BARE.get(tp, ""))


def _dict(tp: object, args: tuple[Any, ...], custom: Mapping[type, Any], where: str) -> Codec:
    key = _compile(args[0], custom, where)
    if isinstance(key, _Seq | _Tuple | _Dict | _Optional):
        raise _unsupported(tp, where, "dict keys must be a scalar type (str, int, UUID, ...)")
    return _Dict(key, _compile(args[1], custom, where))


def _unsupported(tp: object, where: str, hint: str = "") -> TypeError:
    name = tp.__name__ if isinstance(tp, type) else repr(tp).replace("typing.", "")
    return TypeError(f"{_at(where)}unsupported param type {name}: {hint or _SUPPORTED}")


def register_type(tp: type, serialize: Serializer, deserialize: Deserializer) -> None:
    """Let params of class ``tp`` be stored: ``serialize`` to JSON, ``deserialize`` back.

    Applies to job classes defined afterwards; a job's own hooks take precedence.
    """
    if not isinstance(tp, type) or isinstance(tp, types.GenericAlias):
        raise TypeError(f"register_type() needs a class, got {_short(tp)}")
    for label, function in (("serialize", serialize), ("deserialize", deserialize)):
        if not callable(function):
            raise TypeError(f"register_type({tp.__name__}): {label} must be callable")
    _registry[tp] = (serialize, deserialize)


def _compact() -> Callable[[dict[str, JSON]], str]:
    """``json.dumps(data, separators=(",", ":"), ensure_ascii=False)``, made once.

    ``JSONEncoder.encode`` builds its C encoder anew on every call, most of the time it
    takes for a one-param job (docs/fast.md), and one such call is made for every
    enqueue. The C encoder is built here once; where CPython's accelerator is missing, the
    plain encoder serves.
    It skips the cycle check: a codec's output is new lists and dicts of checked values
    (``_is_json`` walks a custom serializer's), so it has no cycle.
    """
    plain = json.JSONEncoder(separators=(",", ":"), ensure_ascii=False)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return plain.encode
    encoder = make(
        None, plain.default, json.encoder.encode_basestring, None, ":", ",", False, False, True
    )
    return lambda data: "".join(encoder(data, 0))


params_text = _compact()
"""The JSON text of a job's encoded params, as the task hash stores it."""


def result_codec(
    annotation: object, custom: Mapping[type, tuple[Serializer, Deserializer]], where: str
) -> Codec | None:
    """The codec of ``perform``'s return annotation; None (plain JSON) for none, ``Any``,
    ``object`` and ``None``. TypeError, naming ``where``, for a type the codecs lack."""
    if annotation in (None, type(None), Any, object):
        return None
    return codec_for(annotation, custom, where)


def encode_result(value: object, codec: Codec | None = None, where: str = "") -> str:
    """JSON text of a task's return value. With a codec, by its type: TypeError (naming
    ``where``) when the value does not fit. Without one, never raises (what JSON cannot
    hold becomes text)."""
    if codec is not None:
        return json.dumps(codec.encode(codec.validate(value, where)), allow_nan=False)
    try:
        return json.dumps(_result_json(value), allow_nan=False)
    except Exception:  # e.g. a reference cycle
        return json.dumps(_short(value, 10_000))


def _result_json(value: object) -> JSON:
    if isinstance(value, Enum):
        return _result_json(value.value)
    if value is None or isinstance(value, str | int):  # bool is an int
        return value
    if isinstance(value, float):
        return value if _isfinite(value) else repr(value)  # strict JSON has no nan
    if isinstance(value, dict):
        return {_result_key(k): _result_json(v) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        with contextlib.suppress(TypeError):
            value = sorted(value)  # a stable order when the items allow one
    if isinstance(value, list | tuple | set | frozenset):
        return [_result_json(v) for v in value]
    if isinstance(value, Decimal | UUID):
        return str(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    return _short(value, 10_000)


def _result_key(key: object) -> str:
    data = _result_json(key)
    return data if isinstance(data, str) else json.dumps(data)


def decode_result(text: str | bytes | None, codec: Codec | None = None, where: str = "") -> object:
    """A task's result back from its JSON text; None when there is none. With a codec, the
    value of its type: ValueError (naming ``where``) when the data does not fit."""
    if text is None:
        return None
    data = json.loads(text)
    return data if codec is None else codec.decode(data, where)
