"""EncryptedParams: Redis holds no plaintext, the runner gets the params, keys rotate by
id, a task whose key is gone or whose text was changed (or moved from another task) goes
to dead with the reason, `culex task` shows "encrypted", and bad keys are refused."""

from __future__ import annotations

import itertools
import json
import os

import pytest
import redis

import culex
from culex.cli import main
from culex.middleware.encryption import Nonces
from culex.testing import drain

from .jobs import MwSecretJob, Recording, seen

K1, K2 = os.urandom(32), os.urandom(16)
CARD = "4111-1111-1111-1111"


def _stored(r: redis.Redis, task: culex.Task) -> str:
    return r.hget(f"culex:{{mw_secret}}:task:{task.id}", "params").decode()  # type: ignore[union-attr]


def _encrypt(**keys: bytes) -> culex.EncryptedParams:
    current = next(iter(keys))
    return culex.EncryptedParams(keys=keys, current=current)


def test_redis_holds_no_plaintext_and_the_runner_gets_the_params(r: redis.Redis) -> None:
    culex.configure(middleware=[_encrypt(k1=K1)])
    task = MwSecretJob(card=CARD, amount=42).enqueue()
    stored = _stored(r, task)
    assert CARD not in stored and "amount" not in stored
    assert json.loads(stored)["$encrypted"].startswith("k1:")
    # (nothing of the params anywhere on the server)
    for key in r.keys("*"):
        if r.type(key) == b"hash":
            assert all(CARD.encode() not in v for v in r.hvals(key))
    (attempt,) = drain("mw_secret")
    assert attempt.result == [CARD, 42]
    assert attempt.params == {"card": CARD, "amount": 42}  # (drain's record: opened)


def test_keys_rotate_by_id(r: redis.Redis) -> None:
    culex.configure(middleware=[_encrypt(k1=K1)])
    old = MwSecretJob(card="old").enqueue()
    culex.configure(middleware=[culex.EncryptedParams(keys={"k2": K2, "k1": K1}, current="k2")])
    new = MwSecretJob(card="new").enqueue()
    assert json.loads(_stored(r, new))["$encrypted"].startswith("k2:")
    assert sorted(a.result[0] for a in drain("mw_secret")) == ["new", "old"]
    assert old.state() is new.state() is culex.TaskState.SUCCEEDED


def test_a_task_whose_key_is_gone_goes_to_dead_with_the_reason(r: redis.Redis) -> None:
    culex.configure(middleware=[_encrypt(k1=K1)])
    task = MwSecretJob(card=CARD).enqueue()
    culex.configure(middleware=[_encrypt(k2=K2), Recording("audit")])
    drain("mw_secret", fail_fast=False)
    assert task.state() is culex.TaskState.DEAD
    reason = task.info()["last_error"]
    assert "encrypted with key 'k1', which EncryptedParams does not have" in reason
    assert [e for e in seen if e[1] == "on_dead"] == [("audit", "on_dead", None, str(
        culex.TaskFailed(task.id, reason)))]  # fmt: skip


def test_a_runner_without_encrypted_params_sends_the_task_to_dead(r: redis.Redis) -> None:
    culex.configure(middleware=[_encrypt(k1=K1)])
    task = MwSecretJob(card=CARD).enqueue()
    culex.configure(middleware=[])
    drain("mw_secret", fail_fast=False)
    assert "encrypted and this runner has no EncryptedParams" in task.info()["last_error"]


def test_a_changed_or_moved_ciphertext_goes_to_dead(r: redis.Redis) -> None:
    culex.configure(middleware=[_encrypt(k1=K1)])
    tampered, moved, source = (MwSecretJob(card=c).enqueue() for c in ("a", "b", "c"))
    text = json.loads(_stored(r, tampered))["$encrypted"]
    flipped = text[:-6] + ("A" if text[-6] != "A" else "B") + text[-5:]
    r.hset(f"culex:{{mw_secret}}:task:{tampered.id}", "params", json.dumps({"$encrypted": flipped}))
    r.hset(f"culex:{{mw_secret}}:task:{moved.id}", "params", _stored(r, source))
    drain("mw_secret", fail_fast=False)
    for task in (tampered, moved):
        assert task.state() is culex.TaskState.DEAD
        assert "do not open: changed, or not this task's" in task.info()["last_error"]
    assert source.state() is culex.TaskState.SUCCEEDED


def test_plain_params_stored_before_encryption_still_run(r: redis.Redis) -> None:
    task = MwSecretJob(card="plain").enqueue()
    culex.configure(middleware=[_encrypt(k1=K1)])
    (attempt,) = drain("mw_secret")
    assert attempt.result == ["plain", 0] and task.id == attempt.task_id


def test_culex_task_shows_encrypted_instead_of_the_params(
    r: redis.Redis, capsys: pytest.CaptureFixture[str]
) -> None:
    culex.configure(middleware=[_encrypt(k2=K2)])
    task = MwSecretJob(card=CARD).enqueue()
    assert main(["task", "mw_secret", task.id]) == 0
    out = capsys.readouterr().out
    assert "encrypted (key k2)" in out and CARD not in out and "$encrypted" not in out
    assert main(["tasks", "mw_secret"]) == 0
    out = capsys.readouterr().out
    assert "encrypted (key k2)" in out and "$encrypted" not in out


@pytest.mark.parametrize(
    "keys, current, error, match",
    [
        ({}, "k", TypeError, "keys= must be a dict"),
        ({"k": b"short"}, "k", ValueError, "AES takes 16, 24 or 32"),
        ({"k": "a" * 32}, "k", TypeError, "must be bytes"),
        ({"k:1": K1}, "k:1", ValueError, "without ':'"),
        ({"k1": K1}, "k2", ValueError, "current= must be one of the key ids"),
    ],
)
def test_bad_keys_are_refused(keys: object, current: str, error: type, match: str) -> None:
    with pytest.raises(error, match=match):
        culex.EncryptedParams(keys=keys, current=current)  # type: ignore[arg-type]


def test_the_keys_are_never_in_its_repr() -> None:
    shown = repr(culex.EncryptedParams(keys={"k1": K1}, current="k1"))
    assert "k1" in shown and repr(K1) not in shown and K1.hex() not in shown


def test_without_cryptography_the_error_says_what_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "cryptography.hazmat.primitives.ciphers.aead", None)
    with pytest.raises(ImportError, match=r"pip install 'culex\[encryption\]'"):
        culex.EncryptedParams(keys={"k1": K1}, current="k1")


def test_each_nonce_is_new_and_a_wrapping_counter_draws_a_new_fixed_field() -> None:
    nonces = Nonces()
    first, second = nonces.next(), nonces.next()
    assert len(first) == 12 and first[:8] == second[:8] and first != second
    nonces.state = (nonces.state[0], itertools.count(1 << 32))  # (the counter at its end)
    after = nonces.next()
    assert after[:8] != first[:8] and after[8:] == bytes(4)


def test_a_forked_child_draws_its_own_fixed_field() -> None:
    nonces = Nonces()
    parent = nonces.next()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next nonce, to the parent
        os.write(write, nonces.next())
        os._exit(0)
    os.waitpid(pid, 0)
    child = os.read(read, 12)
    os.close(read)
    os.close(write)
    assert child[:8] != parent[:8] and child[8:] == bytes(4)
