"""Param values <-> JSON: one codec (culex.jobs.codecs) per declared param type, compiled once
per job class.

A codec validates a constructor value (TypeError), encodes it to JSON-compatible data and
decodes that data back (ValueError when it does not fit the type). Round trips are exact:
the decoded value equals the original and has the same type.

Encodings: str, int, float, bool as themselves; Decimal, UUID as strings; datetime (always
tz-aware), date, time as ISO 8601 strings; timedelta as an integer number of microseconds;
bytes as base64; an Enum as its member's value; list[X] and tuple[...] as arrays;
dict[str, V] as an object, dict[K, V] with other keys as an array of [key, value] pairs;
None as null for X | None. What culex cannot type (``Any``, ``object``, a bare ``list``,
``tuple`` or ``dict``, a union other than X | None) is plain JSON, taken as it is.

Task results use the same codecs, by the return annotation of ``perform``
(``result_codec``), where every part of it is typed; else they are looser: ``encode_result``
turns any return value into JSON text and never raises, and ``decode_result`` also reads
what culex stored before results were typed.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import math
import types
import typing
from collections.abc import Callable, Mapping
from datetime import date, datetime, time, timedelta
from decimal import Decimal
from enum import Enum
from typing import Any
from uuid import UUID

from ..errors import short
from .codecs import (
    JSON,
    SCALARS,
    Codec,
    Custom,
    Deserializer,
    Plain,
    Serializer,
    at,
    enum_value,
    is_json,
)
from .compound_codecs import Dict, Optional, Seq, Tuple

logger = logging.getLogger("culex")

# register_type()'s custom types, looked up when a codec is compiled
_registry: dict[type, tuple[Serializer, Deserializer]] = {}


_SUPPORTED = (
    "use str, int, float, bool, Decimal, UUID, datetime, date, time, timedelta, bytes, an Enum, "
    "list[X], dict[K, V], tuple[X, ...], tuple[X, Y], X | None, Any (plain JSON), or a type "
    "with a serializer (culex.register_type)"
)
# a container without its item types: plain JSON items
_BARE: dict[type, Codec] = {
    list: Seq(list, Plain("Any")),
    tuple: Seq(tuple, Plain("Any")),
    dict: Dict(SCALARS[str], Plain("Any")),
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
    if tp is Any or tp is object:  # (Any is a class since Python 3.11)
        return Plain(_name(tp))
    if isinstance(tp, type) and not isinstance(tp, types.GenericAlias):
        return _compile_class(tp, custom, where)
    origin, args = typing.get_origin(tp), typing.get_args(tp)
    if origin is typing.Annotated:
        return _compile(args[0], custom, where)
    if origin is typing.Union or origin is types.UnionType:
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1:
            return Optional(_compile(rest[0], custom, where))
        return Plain(_name(tp))  # JSON cannot say which of the types a value was
    if origin in _BARE and not args:  # typing.List and its kin
        return _compile_class(origin, custom, where)
    if origin is list:
        return Seq(list, _compile(args[0], custom, where))
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return Seq(tuple, _compile(args[0], custom, where))
    if origin is tuple:
        return Tuple([_compile(a, custom, where) for a in args])
    if origin is dict:
        return _dict(tp, args, custom, where)
    raise _unsupported(tp, where)


def _compile_class(tp: type, custom: Mapping[type, tuple[Any, Any]], where: str) -> Codec:
    hooks = custom.get(tp) or _registry.get(tp)
    if hooks is not None:
        return Custom(tp, *hooks)
    if tp in SCALARS:
        return SCALARS[tp]
    if tp in _BARE:
        return _BARE[tp]
    if issubclass(tp, Enum):
        for member in tp.__members__.values():
            if not is_json(member.value) or isinstance(member.value, list | dict):
                raise _unsupported(tp, where, f"{member} has a value that is not a JSON scalar")
        return Custom(tp, enum_value, tp)  # stored as the member's value
    raise _unsupported(tp, where)


def _dict(tp: object, args: tuple[Any, ...], custom: Mapping[type, Any], where: str) -> Codec:
    key = _compile(args[0], custom, where)
    if isinstance(key, Plain):  # dict[Any, V]: a JSON object's keys, str
        key = SCALARS[str]
    if isinstance(key, Seq | Tuple | Dict | Optional):
        raise _unsupported(tp, where, "dict keys must be a scalar type (str, int, UUID, ...)")
    return Dict(key, _compile(args[1], custom, where))


def _name(tp: object) -> str:
    return tp.__name__ if isinstance(tp, type) else repr(tp).replace("typing.", "")


def _unsupported(tp: object, where: str, hint: str = "") -> TypeError:
    return TypeError(f"{at(where)}unsupported param type {_name(tp)}: {hint or _SUPPORTED}")


def register_type(tp: type, serialize: Serializer, deserialize: Deserializer) -> None:
    """Let params of class ``tp`` be stored: ``serialize`` to JSON, ``deserialize`` back.

    Applies to job classes defined afterwards; a job's own hooks take precedence.
    """
    if not isinstance(tp, type) or isinstance(tp, types.GenericAlias):
        raise TypeError(f"register_type() needs a class, got {short(tp)}")
    for label, function in (("serialize", serialize), ("deserialize", deserialize)):
        if not callable(function):
            raise TypeError(f"register_type({tp.__name__}): {label} must be callable")
    _registry[tp] = (serialize, deserialize)


def _encoder(item: str, key: str, *, ensure_ascii: bool, allow_nan: bool) -> Callable[[Any], str]:
    """``json.dumps`` with these separators and options, made once.

    ``JSONEncoder.encode`` builds its C encoder anew on every call, most of the time it
    takes for a one-param job (docs/fast.md), and ``json.dumps`` with any option also makes
    a new ``JSONEncoder``; one such call is made for every enqueue, and for every result.
    The C encoder is built here once; where CPython's accelerator is missing, the plain
    encoder serves.
    It skips the cycle check: what it is given is new lists and dicts of checked values (a
    codec's output, whose custom serializers ``is_json`` walks, or ``_result_json``'s),
    so it has no cycle.
    """
    plain = json.JSONEncoder(separators=(item, key), ensure_ascii=ensure_ascii, allow_nan=allow_nan)
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return plain.encode
    text = json.encoder.encode_basestring_ascii if ensure_ascii else json.encoder.encode_basestring
    encoder = make(None, plain.default, text, None, key, item, False, False, allow_nan)
    return lambda data: "".join(encoder(data, 0))


params_text: Callable[[dict[str, JSON]], str] = _encoder(
    ",", ":", ensure_ascii=False, allow_nan=True
)
"""The JSON text of a job's encoded params, as the task hash stores it."""


def result_codec(
    annotation: object, custom: Mapping[type, tuple[Serializer, Deserializer]], where: str
) -> Codec | None:
    """The codec of ``perform``'s return annotation; None (plain JSON) for none, ``None``,
    and for an annotation culex cannot type in whole or in part (``Any``, ``object``, a
    bare ``dict`` or ``list``, ``dict[str, Any]``, ``int | str``, ``set[int]``, a class
    without a serializer): never an error, as results were before they were typed."""
    if annotation is None or annotation is type(None):
        return None
    try:
        codec = codec_for(annotation, custom, where)
    except TypeError:
        return None
    return codec if _typed(codec) else None


def _typed(codec: Codec) -> bool:
    """Is every part of the codec typed (no plain JSON in it)?"""
    if isinstance(codec, Plain):
        return False
    if isinstance(codec, Seq):
        return _typed(codec.item)
    if isinstance(codec, Dict):
        return _typed(codec.key) and _typed(codec.value)
    if isinstance(codec, Tuple):
        return all(_typed(item) for item in codec.items)
    if isinstance(codec, Optional):
        return _typed(codec.inner)
    return True


# json.dumps(value, allow_nan=False): a result's text, as it always was
_strict_json = _encoder(", ", ": ", ensure_ascii=True, allow_nan=False)


def encode_result(value: object, codec: Codec | None = None, where: str = "") -> str:
    """JSON text of a task's return value; never raises: perform has done its work, and a
    lost success is worse than a loose type.

    With a codec, by its type. A value that does not fit it (or that its serializer
    refuses) is stored as plain JSON, as a result without an annotation is: as best it can
    be (a Decimal as its text, a tuple as a list). What JSON cannot hold at all (an object
    of another class) is stored as its repr, a string. Either way with a warning on the
    ``culex`` logger that names ``where``."""
    if codec is not None:
        try:
            return _strict_json(codec.encode(codec.validate(value, where)))
        except Exception as exc:  # a TypeError, or whatever a custom serializer raises
            return _plain(value, where, f"{_naming(where, exc)}; stored as plain JSON")
    if value is None:  # (what most performs return)
        return "null"
    return _plain(value, where)


def _plain(value: object, where: str, misfit: str = "") -> str:
    """A result's plain JSON text; the warning says ``misfit`` and what became a repr."""
    lost: list[object] = []
    try:
        text = _strict_json(_result_json(value, lost))
    except Exception as exc:  # e.g. a reference cycle
        lost, text = [f"{type(exc).__name__}: {exc}"], json.dumps(short(value, 10_000))
    if lost:
        what = short(lost[0], 200) if isinstance(lost[0], str) else _of_class(lost[0])
        not_json = f"not JSON ({what}): stored as its repr, a string"
        misfit = f"{misfit}, {not_json}" if misfit else f"{where or 'a result'} is {not_json}"
    if misfit:
        logger.warning("%s", misfit)
    return text


def _of_class(value: object) -> str:
    return f"an object of class {type(value).__name__}"


def _naming(where: str, exc: Exception) -> str:
    text = f"{type(exc).__name__}: {exc}" if not isinstance(exc, TypeError) else str(exc)
    return text if not where or text.startswith(where) else f"{where}: {text}"


def _result_json(value: object, lost: list[object]) -> JSON:
    """Plain JSON data of any value; what JSON cannot hold becomes its repr, kept in lost."""
    if isinstance(value, Enum):
        return _result_json(value.value, lost)
    if value is None or isinstance(value, str | int):  # bool is an int
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else repr(value)  # strict JSON has no nan
    if isinstance(value, dict):
        return {_result_key(k, lost): _result_json(v, lost) for k, v in value.items()}
    if isinstance(value, set | frozenset):
        with contextlib.suppress(TypeError):
            value = sorted(value)  # a stable order when the items allow one
    if isinstance(value, list | tuple | set | frozenset):
        return [_result_json(v, lost) for v in value]
    if isinstance(value, Decimal | UUID):
        return str(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    lost.append(value)
    return short(value, 10_000)


def _result_key(key: object, lost: list[object]) -> str:
    data = _result_json(key, lost)
    return data if isinstance(data, str) else json.dumps(data)


def decode_result(text: str | bytes | None, codec: Codec | None = None, where: str = "") -> object:
    """A task's result back from its JSON text; None when there is none. With a codec, the
    value of its type, from what this version stores or what culex stored before results
    were typed (``Codec.decode_older``); data that fits neither (a value that did not fit
    the annotation, stored as plain JSON) comes back as that plain JSON."""
    if text is None:
        return None
    data = json.loads(text)
    if codec is None:
        return data
    try:
        return codec.decode(data, where)
    except ValueError:
        pass
    try:
        return codec.decode_older(data, where)
    except ValueError:
        return data
