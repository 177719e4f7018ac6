"""The codecs built of other codecs: ``list[X]`` and ``tuple[X, ...]``, ``tuple[X, Y]``,
``dict[K, V]`` and ``X | None``. Each validates, encodes and decodes its items with its
items' codecs (the scalar ones, and what every codec shares, are codecs.py's).
"""

from __future__ import annotations

import json
from typing import Any

from .codecs import JSON, SCALARS, Codec, all_exact


class Seq(Codec):
    """list[X] and tuple[X, ...]: a JSON array."""

    __slots__ = ("item", "kind")

    def __init__(self, kind: type[list[Any]] | type[tuple[Any, ...]], item: Codec) -> None:
        super().__init__(f"list[{item.name}]" if kind is list else f"tuple[{item.name}, ...]")
        self.kind, self.item = kind, item

    def validate(self, value: Any, where: str) -> object:
        if not isinstance(value, self.kind):
            raise self._wrong(value, where)
        if all_exact(value, self.item.exact):
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
        if all_exact(raw, self.item.exact):
            items: list[Any] = raw
        else:
            decode = self.item.decode
            items = [decode(v, f"{where}[{i}]") for i, v in enumerate(raw)]
        return items if self.kind is list else tuple(items)

    def decode_older(self, raw: JSON, where: str) -> object:
        if not isinstance(raw, list):
            raise self._bad(raw, where)
        older = self.item.decode_older
        items = [older(v, f"{where}[{i}]") for i, v in enumerate(raw)]
        return items if self.kind is list else tuple(items)


class Tuple(Codec):
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

    def decode_older(self, raw: JSON, where: str) -> object:
        if not isinstance(raw, list) or len(raw) != len(self.items):
            raise self._bad(raw, where, f"expected an array of {len(self.items)}")
        pairs = enumerate(zip(self.items, raw, strict=True))
        return tuple([c.decode_older(v, f"{where}[{i}]") for i, (c, v) in pairs])


class Dict(Codec):
    """dict[K, V]: a JSON object when K is str, else an array of [key, value] pairs."""

    __slots__ = ("key", "pairs", "value")

    def __init__(self, key: Codec, value: Codec) -> None:
        super().__init__(f"dict[{key.name}, {value.name}]")
        self.key, self.value = key, value
        self.pairs = key is not SCALARS[str]

    def validate(self, value: Any, where: str) -> object:
        if not isinstance(value, dict):
            raise self._wrong(value, where)
        if not all_exact(value, self.key.exact):
            key = self.key.validate
            value = {key(k, f"{where} (a key)"): v for k, v in value.items()}
        if all_exact(value.values(), self.value.exact):
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
        if all_exact(raw.values(), self.value.exact):
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

    def decode_older(self, raw: JSON, where: str) -> object:
        if self.pairs and isinstance(raw, list):
            return self._decode_pairs(raw, where)
        if not isinstance(raw, dict):
            raise self._bad(raw, where)
        value = self.value.decode_older
        out = {self._older_key(k, where): value(v, f"{where}[{k!r}]") for k, v in raw.items()}
        if len(out) != len(raw):
            raise self._bad(raw, where, "duplicate keys")
        return out

    def _older_key(self, text: str, where: str) -> object:
        """A key as an older result stored it: its text as is (a str, UUID, date, a str
        Enum's value), else the JSON text of its data (1, true, 1.5, a timedelta's seconds)."""
        try:
            return self.key.decode_older(text, f"{where} (a key)")
        except ValueError:
            pass
        try:
            data = json.loads(text)
        except ValueError:
            raise self._bad(text, f"{where} (a key)") from None
        return self.key.decode_older(data, f"{where} (a key)")


class Optional(Codec):
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

    def decode_older(self, raw: JSON, where: str) -> object:
        return None if raw is None else self.inner.decode_older(raw, where)
