"""EncryptedParams: a task's params stored encrypted (AES-GCM), opened by the runner.

The stored params are the JSON object ``{"$encrypted": "<key id>:<base64 of nonce and
ciphertext>"}`` (docs/wire-format.md): a 12-byte nonce, then AES-GCM's ciphertext
and tag of the params' JSON text, with the task's id as associated data, so that a
ciphertext copied into another task does not open. Keys rotate by id: a task names the
key it was sealed with; new ones use ``current``. Needs the ``cryptography`` package
(``pip install 'culex[encryption]'``).
"""

from __future__ import annotations

import binascii
import itertools
import json
import os
import struct
import threading
from collections.abc import Mapping
from typing import Any

from ..errors import short
from .hooks import Middleware, ParamsUnreadable

MARK = '{"$encrypted":'  # how stored encrypted params begin (json.dumps writes them so)
NONCE_BYTES = 12
KEY_SIZES = (16, 24, 32)  # AES-128, AES-192, AES-256
MAX_KEY_ID = 100  # characters of a key id


class Nonces:
    """AES-GCM's nonces, each used once per key: NIST SP 800-38D's deterministic
    construction, a fixed field and a counter. The fixed field is 8 random bytes drawn per
    process (again in a forked child, and when the 32-bit counter would wrap), so two
    processes share one with a chance of about n² / 2^65 for n processes; the counter
    needs no system call per nonce, as a random nonce does."""

    def __init__(self) -> None:
        self._lock = threading.Lock()  # (only for drawing a new fixed field)
        self._draw()
        os.register_at_fork(after_in_child=self._draw)

    def _draw(self) -> None:
        # the fixed field and its counter, one tuple read at once (next() is atomic: threads
        # share the counter)
        self.state = (os.urandom(8), itertools.count())

    def next(self) -> bytes:
        fixed, count = self.state
        n = next(count)
        if n < 1 << 32:
            return _nonce(fixed, n)
        with self._lock:
            if self.state[1] is count:  # (another thread may have drawn already)
                self._draw()
        return self.next()


_nonce = struct.Struct(">8sI").pack  # the fixed field, then the counter (4 bytes, big-endian)


def is_encrypted(params: str) -> bool:
    """Whether stored params are EncryptedParams' (shown as "encrypted", never decoded)."""
    return params.startswith(MARK)


def shown_params(params: str) -> str:
    """Stored params as the dashboard and the CLI show them: "encrypted (key <id>)" for
    encrypted ones, else as they are."""
    if not is_encrypted(params):
        return params
    try:
        kid = json.loads(params)["$encrypted"].partition(":")[0]
    except (ValueError, TypeError, KeyError, AttributeError):
        return "encrypted"
    return f"encrypted (key {kid})"


_base64 = binascii.b2a_base64


def _sealed_text(stored: str) -> str:
    """The "<key id>:<base64>" of stored encrypted params: cut out as culex writes them,
    else (another writer's spacing) read as JSON."""
    if stored.endswith('"}') and stored[len(MARK)] == '"':
        return stored[len(MARK) + 1 : -2]
    found = json.loads(stored)["$encrypted"]
    if not isinstance(found, str):
        raise TypeError("not a str")
    return found


def _aesgcm() -> Any:
    try:
        from cryptography.hazmat.primitives.ciphers.aead import AESGCM
    except ImportError as exc:
        raise ImportError(
            f"culex.EncryptedParams needs the cryptography package ({exc}): "
            "pip install 'culex[encryption]'"
        ) from exc
    return AESGCM


class EncryptedParams(Middleware):
    """Stores each task's params encrypted with AES-GCM under the key ``current`` of
    ``keys`` (key id -> 16, 24 or 32 bytes); a runner opens them with the key the task
    names. Keep an old key among ``keys`` while tasks sealed with it may still run: a task
    whose key is gone, or whose text was changed, goes to dead with the reason.

    Params a task stored in plain text (enqueued before encryption was on) still run."""

    def __init__(self, keys: Mapping[str, bytes], current: str) -> None:
        if not isinstance(keys, Mapping) or not keys:
            raise TypeError(f"EncryptedParams: keys= must be a dict of key id to bytes, got "
                            f"{short(keys)}")  # fmt: skip
        aesgcm = _aesgcm()
        self._ciphers: dict[str, Any] = {}
        for kid, key in keys.items():
            if not isinstance(kid, str) or not kid or ":" in kid or len(kid) > MAX_KEY_ID:
                raise ValueError(
                    f"EncryptedParams: a key id is a str of 1 to {MAX_KEY_ID} characters "
                    f"without ':', got {short(kid)}"
                )
            if not isinstance(key, bytes):
                raise TypeError(f"EncryptedParams: key {kid} must be bytes, got "
                                f"{type(key).__name__}")  # fmt: skip
            if len(key) not in KEY_SIZES:
                raise ValueError(
                    f"EncryptedParams: key {kid} has {len(key)} bytes; AES takes 16, 24 or 32"
                )
            self._ciphers[kid] = aesgcm(key)
        if not isinstance(current, str) or current not in self._ciphers:
            raise ValueError(
                f"EncryptedParams: current= must be one of the key ids "
                f"({', '.join(sorted(self._ciphers))}), got {short(current)}"
            )
        self.current = current
        self._sealing = self._ciphers[current]
        self._around = (f'{MARK}"{current}:', '"}')  # (the stored text, but its base64)
        from cryptography.exceptions import InvalidTag  # (there: _aesgcm() found the package)

        self._invalid = InvalidTag
        self._nonces = Nonces()

    def __repr__(self) -> str:  # (never the keys)
        return f"EncryptedParams(keys=[{', '.join(self._ciphers)}], current={self.current!r})"

    def seal_params(self, task_id: str, params: str) -> str:
        fixed, count = self._nonces.state  # (Nonces.next without its call, but at a wrap)
        n = next(count)
        nonce = _nonce(fixed, n) if n < 1 << 32 else self._nonces.next()
        sealed = self._sealing.encrypt(nonce, params.encode(), task_id.encode())
        return _base64(nonce + sealed, newline=False).decode().join(self._around)

    def open_params(self, task_id: str, stored: str) -> str:
        if not is_encrypted(stored):
            return stored
        try:
            kid, _, text = _sealed_text(stored).partition(":")
            raw = binascii.a2b_base64(text, strict_mode=True)
        except (ValueError, TypeError, KeyError, AttributeError, binascii.Error):
            raise ParamsUnreadable("encrypted params are not in the stored form") from None
        cipher = self._ciphers.get(kid)
        if cipher is None:
            raise ParamsUnreadable(
                f"params are encrypted with key {short(kid)}, which EncryptedParams does not "
                f"have (its keys: {', '.join(sorted(self._ciphers))})"
            )
        try:
            return str(cipher.decrypt(raw[:NONCE_BYTES], raw[NONCE_BYTES:], task_id.encode()),
                       "utf-8")  # fmt: skip
        except (self._invalid, ValueError):
            raise ParamsUnreadable(
                f"params encrypted with key {kid} do not open: changed, or not this task's"
            ) from None
