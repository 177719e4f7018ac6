"""The codecs of param and result types: each validates a value, encodes it to JSON data
and decodes it back, exactly (the same value, of the same type).

Which codec a type gets is decided by culex.jobs.serialization, which compiles a job's
annotations into these once per class. Here the scalar codecs, and what every codec shares;
the codecs built of others (list, tuple, dict, X | None) are compound_codecs.py's.
"""

from __future__ import annotations

import base64
import math
import operator
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any, TypeAlias
from uuid import UUID

from ..errors import short

JSON: TypeAlias = bool | int | float | str | list["JSON"] | dict[str, "JSON"] | None
Serializer: TypeAlias = Callable[[Any], JSON]
Deserializer: TypeAlias = Callable[[JSON], Any]

_isfinite = math.isfinite
_NOT_FINITE = ("nan", "inf", "-inf")
enum_value = operator.attrgetter("value")


def moment(ms: float) -> datetime | None:
    """A time in ms since the epoch as a UTC datetime; None where no datetime can hold it
    (a record written by another producer may say the year 33715)."""
    try:
        return datetime.fromtimestamp(ms / 1000, UTC)
    except (ValueError, OverflowError, OSError):
        return None


def at(where: str) -> str:
    return f"{where}: " if where else ""


def all_exact(values: Iterable[object], exact: type | None) -> bool:
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

    def decode_older(self, raw: JSON, where: str) -> object:
        """The value back from a result stored before results were typed (culex up to
        2459f14 stored every result as plain JSON: a timedelta as float seconds, a dict
        with other keys than str as an object of their texts, nan as "nan"). Read only
        where ``decode`` refuses; ValueError when this does not fit either."""
        return self.decode(raw, where)

    def _wrong(self, value: object, where: str, expected: str = "") -> TypeError:
        got = f"{type(value).__name__} {short(value)}"
        return TypeError(f"{at(where)}expected {expected or self.name}, got {got}")

    def _bad(self, raw: object, where: str, why: str = "") -> ValueError:
        got = f"{type(raw).__name__} {short(raw)}"
        return ValueError(f"{at(where)}cannot decode {self.name} from {got}{why and ': '}{why}")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"


class Native(Codec):
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


class Float(Codec):
    """float: ints are accepted (and kept as floats); nan and inf are not (JSON lacks them)."""

    __slots__ = ()

    def validate(self, value: Any, where: str) -> object:
        if type(value) is float and _isfinite(value):
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            try:
                number = float(value)
            except OverflowError:
                raise TypeError(f"{at(where)}int too large for a float: {short(value)}") from None
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

    def decode_older(self, raw: JSON, where: str) -> object:
        if isinstance(raw, str) and raw in _NOT_FINITE:  # its repr: JSON has no nan or inf
            return float(raw)
        return self.decode(raw, where)


class Scalar(Codec):
    """A type stored as one JSON string or int: ``dump`` and ``load`` convert.

    ``check`` returns what was expected when a value of the type still does not fit, else "".
    """

    __slots__ = ("check", "dump", "load", "older", "raw", "tp")

    def __init__(
        self,
        tp: type,
        raw: type,
        dump: Callable[[Any], JSON],
        load: Callable[[Any], object],
        check: Callable[[Any], str] = lambda value: "",
        older: tuple[type, Callable[[Any], object]] | None = None,
    ) -> None:
        super().__init__(tp.__name__)
        self.tp, self.raw, self.dump, self.load, self.check = tp, raw, dump, load, check
        self.older = older  # the JSON type and loader of an older result encoding

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

    def decode_older(self, raw: JSON, where: str) -> object:
        if self.older is None or type(raw) is not self.older[0]:
            return self.decode(raw, where)
        try:
            return self.older[1](raw)
        except (ValueError, ArithmeticError) as exc:
            raise self._bad(raw, where, str(exc)) from None


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


def _from_seconds(raw: float) -> timedelta:
    return timedelta(seconds=raw)  # (an older result: total_seconds(), rounded to the µs)


def _b64(value: bytes) -> str:
    return base64.b64encode(value).decode("ascii")


def _from_b64(raw: str) -> bytes:
    return base64.b64decode(raw, validate=True)


class Custom(Codec):
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
        if not is_json(data):
            raise TypeError(
                f"the serializer of {self.name} returned {type(data).__name__} {short(data)}, "
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


def is_json(data: object) -> bool:
    """Is data made only of JSON types (exactly: no tuples, no nan)?"""
    if data is None or type(data) in (str, int, bool):
        return True
    if type(data) is float:
        return _isfinite(data)
    if type(data) is list:
        return all(is_json(item) for item in data)
    if type(data) is dict:
        return all(type(key) is str and is_json(item) for key, item in data.items())
    return False


class Plain(Codec):
    """Plain JSON, kept as it is: what an annotation culex cannot type holds (``Any``,
    ``object``, a bare ``list`` or ``dict``, a union such as ``int | str``)."""

    __slots__ = ()

    def validate(self, value: Any, where: str) -> object:
        if is_json(value):
            return value
        raise self._wrong(
            value,
            where,
            f"plain JSON for {self.name} (str, int, float, bool, None, list, dict with str keys)",
        )

    def encode(self, value: Any) -> JSON:
        data: JSON = value
        return data

    def decode(self, raw: JSON, where: str) -> object:
        return raw


_STR = Native(str, str.__str__)  # str.__str__ of a subclass instance: a plain str copy
SCALARS: dict[type, Codec] = {
    str: _STR,
    int: Native(int, int.__int__),
    bool: Native(bool, bool),
    float: Float("float"),
    Decimal: Scalar(Decimal, str, str, Decimal),
    UUID: Scalar(UUID, str, str, UUID),
    datetime: Scalar(datetime, str, datetime.isoformat, datetime.fromisoformat, _aware),
    date: Scalar(date, str, date.isoformat, date.fromisoformat, _not_datetime),
    time: Scalar(time, str, time.isoformat, time.fromisoformat, _fixed_offset),
    timedelta: Scalar(timedelta, int, _micros, _from_micros, older=(float, _from_seconds)),
    bytes: Scalar(bytes, str, _b64, _from_b64),
}
