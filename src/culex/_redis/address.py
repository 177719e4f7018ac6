"""Where a server is and how to log in to it: the URL, the login and the TLS context.

URLs: ``redis://[[user]:password@]host[:port][/db]``, ``rediss://`` for TLS, and
``unix://[[user]:password@]/path/to/socket[?db=N]``; through sentinels
``redis+sentinel://[[user]:password@]host:port[,host:port...]/SERVICE[/db]`` (the login is
the master's; ``?sentinel_username=...&sentinel_password=...`` log in to sentinels that have
one of their own), and a cluster ``redis+cluster://[[user]:password@]host:port[,host:port...]``
(``rediss+...`` for TLS; ``valkey...`` spellings are the same). A ``rediss://`` URL takes redis-py's
options in its query (``rediss://host:6380/0?ssl_ca_certs=/etc/ca.pem&...``):

- ``ssl_cert_reqs``: ``required`` (the default: the server's certificate must be signed by a
  trusted CA and name the server), ``optional`` (the same, for a client) or ``none`` (no
  check at all: encryption without knowing who answers);
- ``ssl_ca_certs``: a PEM file of the CAs to trust instead of the system's;
- ``ssl_certfile`` and ``ssl_keyfile``: the client's certificate and its key, for a server
  that wants one (mutual TLS; ``ssl_keyfile`` may be left out if the certificate file
  holds the key too);
- ``ssl_server_hostname``: the name the server's certificate is checked against and that is
  sent to it (SNI), when it is not the host in the URL (e.g. a URL with an IP address).
  redis-py has no such option (it always uses the host); the name is Python's
  ``server_hostname``.

An unknown option, an option that needs ``rediss://``, or a file that does not exist is a
ConfigurationError.
"""

from __future__ import annotations

import functools
import os
import re
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, unquote, urlencode, urlsplit, urlunsplit

from ..errors import ConfigurationError

TLS_FILES = ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile")
TLS_OPTIONS = ("ssl_cert_reqs", *TLS_FILES, "ssl_server_hostname")
CERT_REQS = ("none", "optional", "required")


@dataclass(frozen=True)
class Address:
    """Where a server is and how to log in to it."""

    url: str
    path: str | None = None  # a unix socket
    host: str = "localhost"
    port: int = 6379
    db: int = 0
    username: str | None = None
    password: str | None = None
    tls: bool = False
    # The TLS options of a rediss:// URL, by their query names (TLS_OPTIONS), checked.
    tls_options: tuple[tuple[str, str], ...] = ()
    kind: str = "server"  # "server", "sentinel" or "cluster"
    nodes: tuple[tuple[str, int], ...] = ()  # the sentinels, or the cluster's startup nodes
    service: str = ""  # the master's name at the sentinels
    sentinel_options: tuple[tuple[str, str], ...] = ()  # sentinel_username, sentinel_password

    @classmethod
    def parse(cls, url: str) -> Address:
        try:
            parts = urlsplit(url)  # (an unclosed [ is a ValueError too)
            query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
            username = unquote(parts.username) if parts.username else None
            password = unquote(parts.password) if parts.password is not None else None
            if parts.scheme == "unix":
                if not parts.path:
                    raise ValueError("no socket path")
                _check_options(query, tls=False)
                return cls(
                    url,
                    path=unquote(parts.path),
                    db=int(query.get("db", 0)),
                    username=username,
                    password=password,
                )
            if parts.scheme in ("redis", "rediss", "valkey", "valkeys"):
                tls = parts.scheme in ("rediss", "valkeys")
                _check_options(query, tls=tls)
                db_text = parts.path.lstrip("/") or query.get("db", "0")
                return cls(
                    url,
                    host=parts.hostname or "localhost",
                    port=parts.port or 6379,
                    db=int(db_text),
                    username=username,
                    password=password,
                    tls=tls,
                    tls_options=tuple((k, v) for k, v in query.items() if k in TLS_OPTIONS),
                )
            kind = _KINDS.get(parts.scheme)
            if kind is not None:
                return cls._parse_many(url, kind, parts, query)
        except ValueError as exc:
            raise ConfigurationError(f"bad Redis URL {_unread(url, str(exc))}") from None
        raise ConfigurationError(
            f"bad Redis URL {masked(url)!r}: the scheme must be redis://, rediss://, "
            "unix://, redis+sentinel://, redis+cluster:// (or rediss+..., valkey...)"
        )

    @classmethod
    def _parse_many(cls, url: str, kind: str, parts: Any, query: dict[str, str]) -> Address:
        """A sentinel or cluster URL: several ``host:port``, then a path (ValueError if bad)."""
        tls = parts.scheme.startswith(("rediss", "valkeys"))
        login, _, places = parts.netloc.rpartition("@")
        nodes = tuple(_host_port(place) for place in places.split(","))
        path = [unquote(part) for part in parts.path.split("/") if part]
        extra = ("sentinel_username", "sentinel_password") if kind == "sentinel" else ()
        _check_options({k: v for k, v in query.items() if k not in extra}, tls=tls)
        if kind == "sentinel":
            if not path or len(path) > 2:
                raise ValueError("a sentinel URL names its service: .../SERVICE or .../SERVICE/db")
            service, db = path[0], int(path[1]) if len(path) > 1 else 0
        else:
            if path and path != ["0"]:
                raise ValueError("a cluster has only database 0; its URL has no path")
            service, db = "", 0
        user, colon, password = login.partition(":")
        return cls(
            url,
            host=nodes[0][0],
            port=nodes[0][1],
            db=db,
            username=unquote(user) if user else None,
            password=unquote(password) if colon else None,
            tls=tls,
            tls_options=tuple((k, v) for k, v in query.items() if k in TLS_OPTIONS),
            kind=kind,
            nodes=nodes,
            service=service,
            sentinel_options=tuple((k, v) for k, v in query.items() if k in extra),
        )

    @property
    def sentinel_login(self) -> dict[str, str]:
        """redis-py's login options for the sentinels themselves ({}: none)."""
        return {k.removeprefix("sentinel_"): v for k, v in self.sentinel_options}

    @property
    def shown(self) -> str:
        """The URL as it may be shown: without its password."""
        return masked(self.url)

    @property
    def tls_verify(self) -> bool:
        """Whether the server's certificate is checked (ssl_cert_reqs is not none)."""
        return dict(self.tls_options).get("ssl_cert_reqs", "required") != "none"

    def handshake(self) -> list[tuple[Any, ...]]:
        """The commands a new connection sends before any other."""
        commands: list[tuple[Any, ...]] = []
        if self.password is not None:
            login = (self.username, self.password) if self.username else (self.password,)
            commands.append(("AUTH", *login))
        if self.db:
            commands.append(("SELECT", self.db))
        return commands

    def tls_context(self) -> Any:
        """The TLS context of a rediss:// URL, made from its options. It checks and sends
        ``ssl_server_hostname`` if given, whatever name a socket is wrapped with."""
        import ssl  # only for rediss:// (the module is big)

        options = dict(self.tls_options)
        context = _named_context()(ssl.PROTOCOL_TLS_CLIENT)
        context.server_name = options.get("ssl_server_hostname")
        try:
            if "ssl_ca_certs" in options:
                context.load_verify_locations(cafile=options["ssl_ca_certs"])
            else:
                context.load_default_certs()
            if "ssl_certfile" in options:
                context.load_cert_chain(options["ssl_certfile"], options.get("ssl_keyfile"))
        except (OSError, ssl.SSLError) as exc:
            raise ConfigurationError(
                f"the TLS files of {self.shown} cannot be used (ssl_ca_certs must be a PEM "
                f"file of CA certificates, ssl_certfile and ssl_keyfile PEM files): {exc}"
            ) from None
        if not self.tls_verify:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        elif options.get("ssl_cert_reqs") == "optional":
            context.verify_mode = ssl.CERT_OPTIONAL
        return context


_KINDS = {
    f"{name}{tls}+{kind}": kind
    for name in ("redis", "valkey")
    for tls in ("", "s")
    for kind in ("sentinel", "cluster")
}


def _host_port(place: str) -> tuple[str, int]:
    """``host:port`` (or ``[v6]:port``) of a sentinel or cluster URL; the port is required."""
    host, colon, port = place.rpartition(":")
    if not colon or not host or not port.isdigit():
        raise ValueError(f"{place!r} is not host:port")
    return host.strip("[]"), int(port)


def _check_options(query: dict[str, str], *, tls: bool) -> None:
    """Refuse (ValueError) an option culex does not know, a TLS option without TLS, a
    value it cannot use, a file that is not there."""
    known = ("db", *TLS_OPTIONS) if tls else ("db",)
    for name, value in query.items():
        if name in TLS_OPTIONS and not tls:
            raise ValueError(f"{name} is a TLS option: it needs a rediss:// URL")
        if name not in known:
            raise ValueError(f"unknown option {name!r} (culex knows: {', '.join(known)})")
        if name in TLS_FILES and not os.path.isfile(value):
            raise ValueError(f"{name}: no such file {value!r}")
    if query.get("ssl_cert_reqs", "required") not in CERT_REQS:
        raise ValueError(
            f"ssl_cert_reqs must be one of {', '.join(CERT_REQS)}, got {query['ssl_cert_reqs']!r}"
        )
    if "ssl_keyfile" in query and "ssl_certfile" not in query:
        raise ValueError("ssl_keyfile needs ssl_certfile (the certificate it is the key of)")
    if query.get("ssl_server_hostname") == "":
        raise ValueError("ssl_server_hostname is empty")


def masked(url: str) -> str:
    """``url`` as an error or a log may show it: its password and a ``sentinel_password``
    as ``***``; in a text that does not read as a URL with a login (``redis:/user:pw@host``,
    an unclosed ``[``, a ``/``, ``?`` or ``#`` before the last ``@``), all before its last
    ``@`` from its ``://`` on."""
    try:
        shown = _without_password(url)
    except ValueError:  # (urlsplit refused it)
        shown = url
    head, at, tail = shown.rpartition("@")
    scheme, sep, login = head.partition("://")
    if not sep:
        scheme, login = "", head
    cut = any(c in login for c in "/?#")  # (a password urlsplit did not see whole)
    if at and (":" in login or cut) and not (login.endswith(":***") and login.count(":") == 1):
        shown = f"{scheme}{sep}***@{tail}"
    return shown


def _unread(url: str, reason: str) -> str:
    """What an error says of a URL that cannot be read: the URL with all between its
    ``://`` and its last ``@`` as ``***``, and why, unless the reason quotes a piece of
    that login. A password with a ``/``, ``?`` or ``#`` not percent-encoded ends the
    login early for urlsplit, which then reads the rest of the password as a port, a path
    or a query, and its complaint ("Port could not be cast to integer value as 'Zq9+SEC'")
    holds it."""
    scheme, sep, rest = url.partition("://")
    login, at, place = rest.rpartition("@")
    if not (sep and at):
        return f"{masked(url)!r}: {reason}"
    cut = any(c in login for c in "/?#")  # (urlsplit took a piece of it for the rest)
    pieces = [piece for piece in re.split(r"[:/?#@]", login) if len(piece) > 3]
    if cut or any(piece in reason for piece in pieces):
        reason = "it cannot be read"
    if cut:
        reason += (
            "; a '/', '?', '#' or '@' in the user name or password must be percent-encoded: "
            "%2F, %3F, %23, %40"
        )
    shown = f"{scheme}://***@{place}"
    return f"{shown!r}: {reason}"


def _without_password(url: str) -> str:
    parts = urlsplit(url)
    login, _, place = parts.netloc.rpartition("@")
    user, colon, _password = login.partition(":")
    query = parse_qs(parts.query, keep_blank_values=True)
    if "sentinel_password" in query:
        query["sentinel_password"] = ["***"]
        parts = parts._replace(query=urlencode(query, doseq=True, safe="*"))
    if colon:
        parts = parts._replace(netloc=f"{user}:***@{place}")
    return urlunsplit(parts) if (colon or "sentinel_password" in query) else url


@functools.cache
def _named_context() -> Any:
    """An ssl.SSLContext that puts its ``server_name``, when set, in place of the name a
    socket is wrapped with (checked against the certificate, and sent as SNI)."""
    import ssl

    class NamedContext(ssl.SSLContext):
        server_name: str | None = None

        def wrap_socket(self, sock: Any, *args: Any, **kwargs: Any) -> Any:
            if self.server_name:
                kwargs["server_hostname"] = self.server_name
            return super().wrap_socket(sock, *args, **kwargs)

        def wrap_bio(self, incoming: Any, outgoing: Any, *args: Any, **kwargs: Any) -> Any:
            if self.server_name:
                kwargs["server_hostname"] = self.server_name
            return super().wrap_bio(incoming, outgoing, *args, **kwargs)

    return NamedContext
