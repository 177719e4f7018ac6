"""redis-py's client for an address, and how a batch of culex's calls goes over its nodes.

What culex's redis-py drivers (redispy.py) add to redis-py's clients, and why:

- **One connection per node for a batch.** Calls are grouped by the node that serves their
  keys (a single server or a sentinel's master: one group) and each group goes out in one
  write, in order. A blocking wait with a claim behind it stays one exchange, and WAIT /
  WAITAOF, which confirm the writes *of their connection*, are sent on the connection of
  each node the batch wrote to; the batch is confirmed only when every node confirmed.
- **Only what did not run is sent again.** A reply that says the call was refused without
  running (MOVED, ASK, TRYAGAIN, CLUSTERDOWN, MASTERDOWN, LOADING, READONLY: a demoted
  master, which redis-py's sentinel connection reports as "now a slave"), or a connection
  that could not be opened, is retried after the slot map is read again, for up to
  ``socket_timeout``; then the caller gets ServerUnavailable (in a batch, in the places of
  those calls only: the others' replies are kept). A connection lost after a batch
  was written is never resent (the server may have run it): ServerUnavailable at once, in
  the places of that node's calls (the other nodes' replies are kept: a runner sends
  again only what may not have run).
- **NOSCRIPT** (a failed-over replica has an empty script cache): a call whose node could
  not be reached is sent again as EVAL at once (its next node is likely a promoted
  replica: no NOSCRIPT round trip, and a durable enqueue's WAIT is not spent behind a call
  that did not run). A call refused NOSCRIPT is sent again as EVAL with its source, which
  also loads it; even once ``socket_timeout`` has run out (the
  node answered; the first try of a promoted replica may come that late, behind a WAIT of
  the same exchange), so a caller never gets NOSCRIPT.

Nothing here sends or reads: :class:`Batch` holds a batch's state across tries (what each
call replied, what is left, which node gets it) for the sync and async drivers, which only
do the exchanges. redis-py is imported only when a client is made (:func:`redis_py`).
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigurationError, ServerError
from .address import Address
from .calls import Call
from .connections import ReplyError
from .drivers import server_error

# Error replies that say the call was refused before it ran: safe to send again.
_NOT_RUN = ("MOVED", "ASK", "TRYAGAIN", "CLUSTERDOWN", "MASTERDOWN", "LOADING", "READONLY")
# Commands that name no key: sent to the cluster's default node (a primary).
_KEYLESS = frozenset(
    ("PING", "INFO", "CONFIG", "COMMAND", "TIME", "SHUTDOWN", "SCRIPT", "DBSIZE", "FLUSHALL")
)
# Commands that confirm the writes of their own connection (see the module's docstring).
_CONFIRMS = frozenset(("WAIT", "WAITAOF"))
# The pauses between tries of calls that did not run (a failover in progress).
_FIRST_PAUSE, _LONGEST_PAUSE = 0.05, 0.5


def redis_py() -> Any:
    """The redis package, imported on first need (ConfigurationError when not installed)."""
    try:
        import redis
    except ImportError:  # pragma: no cover - the test install has it
        raise ConfigurationError(
            "Sentinel, Cluster and driver='redis-py' go through redis-py, which is not "
            "installed: pip install 'culex[redis-py]'"
        ) from None
    return redis


def client_options(
    address: Address, socket_timeout: float, *, asynchronous: bool
) -> dict[str, Any]:
    """redis-py's keyword arguments for a data node of ``address`` (login, TLS, timeouts),
    for its blocking or its asyncio client (each takes a retry policy of its own kind:
    redis-py 8.2 warns of a blocking one given to an asyncio client)."""
    redis = redis_py()
    kind = redis.asyncio.retry if asynchronous else redis.retry
    retry = kind.Retry(redis.backoff.NoBackoff(), 0)
    options: dict[str, Any] = {
        # culex decides what is tried again, and for how long (see the module's docstring)
        "retry": retry,
        "username": address.username,
        "password": address.password,
        "socket_timeout": socket_timeout,
        "socket_connect_timeout": socket_timeout,
        "decode_responses": False,
        "encoding_errors": "surrogateescape",  # (an id read back from bad bytes: those bytes)
        "protocol": 2,  # the replies culex's parsers read (redis-py 8 speaks RESP3 by default)
    }
    if address.tls:
        tls = dict(address.tls_options)
        if "ssl_server_hostname" in tls:
            raise ConfigurationError(
                f"{address.shown}: ssl_server_hostname works with culex's own driver only; "
                "redis-py checks the certificate against each node's host"
            )
        options["ssl"] = True
        options["ssl_cert_reqs"] = tls.get("ssl_cert_reqs", "required")
        if not address.tls_verify:
            options["ssl_check_hostname"] = False
        for name in ("ssl_ca_certs", "ssl_certfile", "ssl_keyfile"):
            if name in tls:
                options[name] = tls[name]
    return options


def _words(call: Call[Any], as_source: bool) -> tuple[Any, ...]:
    if call.script is None:
        return _raw(call.args)
    if as_source:
        return ("EVAL", call.script.source, len(call.keys), *_raw(call.keys), *_raw(call.args))
    return ("EVALSHA", call.script.sha, len(call.keys), *_raw(call.keys), *_raw(call.args))


def _raw(words: tuple[Any, ...]) -> tuple[Any, ...]:
    """``words`` as redis-py can send them: a text that holds a surrogate (a queue name or an
    id read back with surrogateescape, whose bytes are not UTF-8) as those bytes; redis-py
    would fail to encode it (culex's own driver packs it so: drivers._pack_slowly)."""
    if all(not isinstance(word, str) or word.isascii() for word in words):
        return words
    return tuple(
        word.encode("utf-8", "surrogateescape") if isinstance(word, str) else word for word in words
    )


def _command(call: Call[Any]) -> str:
    return "" if call.script is not None else str(call.args[0]).upper()


def _key(call: Call[Any]) -> str | None:
    """The key whose slot serves ``call`` (None: it names none)."""
    if call.script is not None:
        return call.keys[0] if call.keys else None
    if _command(call) in _KEYLESS or len(call.args) < 2:
        return None
    key = call.args[1]
    if _command(call) == "XREAD":  # (its keys follow STREAMS: streams.block)
        key = call.args[call.args.index("STREAMS") + 1]
    elif _command(call) == "XINFO":  # (XINFO STREAM <key>: streams.kept)
        key = call.args[2]
    return key.decode("utf-8", "surrogateescape") if isinstance(key, bytes) else str(key)


def reply_error(exc: Exception) -> ReplyError:
    """redis-py's exception for an error reply, back as the reply it was (code first)."""
    code = getattr(exc, "status_code", None)
    return ReplyError(f"{code} {exc}" if code else str(exc))


class Unreached(ReplyError, OSError):
    """In the place of a call that was never sent: its node could not be reached. Tried
    again like a refusal (TRYAGAIN); if time runs out first, it reads as "cannot reach"."""

    @property
    def code(self) -> str:
        return "TRYAGAIN"


class Lost(ReplyError):
    """In the place of a call whose connection was lost (or too slow) after it was written:
    it may have run, so it is never sent again; its caller gets ``error``."""

    def __init__(self, error: ServerError) -> None:
        super().__init__(str(error))
        self.error = error

    @property
    def code(self) -> str:
        return "LOST"


@dataclass
class Send:
    """One exchange: calls (by index in the batch) for one node, on one connection."""

    node: Any  # a cluster node, or None: the client's own pool
    indices: list[int] = field(default_factory=list)
    words: list[tuple[Any, ...]] = field(default_factory=list)
    blocks: float = 0.0


class Batch:
    """The state of one batch across tries: what each call replied, what is left, how to
    send it. Shared by the sync and async drivers, which only do the exchanges."""

    def __init__(self, calls: Sequence[Call[Any]], deadline: float) -> None:
        self.calls = calls
        self.replies: list[Any] = [None] * len(calls)
        self.todo = list(range(len(calls)))
        self.deadline = deadline
        self.as_source: set[int] = set()  # calls to send as EVAL (NOSCRIPT)
        self.asking: dict[int, tuple[str, int]] = {}  # calls to send to an ASK target
        self.pause = _FIRST_PAUSE
        self.stale = False  # the slot map may be out of date: read it before the next try
        self.refused = False  # a call of this try was refused (or not sent): pause first
        self.tries = 0

    def sends(self, node_of: Any, node_at: Any) -> list[Send]:
        """Group what is left by node. ``node_of(key)``: the node of a key (None for a
        single server or a sentinel's master: one group); ``node_at(host, port)``: the node
        an ASK reply named. A confirming call goes to every node the batch wrote to."""
        groups: dict[Any, Send] = {}

        def group(node: Any) -> Send:
            name = None if node is None else node.name
            if name not in groups:
                groups[name] = Send(node)
            return groups[name]

        for i in self.todo:
            self.replies[i] = None
            call = self.calls[i]
            if _command(call) in _CONFIRMS and groups:
                targets = list(groups.values())
            elif i in self.asking:
                targets = [group(node_at(*self.asking[i]))]
                targets[0].indices.append(-1)
                targets[0].words.append(("ASKING",))
            else:
                targets = [group(node_of(_key(call)))]
            for send in targets:
                send.indices.append(i)
                send.words.append(_words(call, i in self.as_source))
                send.blocks += call.blocks
        return list(groups.values())

    def keep(self, send: Send, replies: list[Any]) -> None:
        """Keep one exchange's replies; a confirming call sent to several nodes keeps the
        reply that confirms least."""
        for i, reply in zip(send.indices, replies, strict=True):
            if i < 0:  # the ASKING before a call sent to an ASK target
                continue
            held = self.replies[i]
            if held is not None:
                reply = _weakest(self.calls[i], held, reply)
            self.replies[i] = reply

    def unreached(self, send: Send, exc: BaseException) -> None:
        """Nothing was sent to ``send``'s node: its calls are tried again."""
        for i in send.indices:
            if i >= 0:
                self.replies[i] = Unreached(str(exc))

    def lost(self, send: Send, error: ServerError) -> None:
        """``send``'s connection was lost after its calls were written: each gets ``error``."""
        for i in send.indices:
            if i >= 0:
                self.replies[i] = Lost(error)

    def settle(self) -> bool:
        """Look at the replies: True when nothing is left to send again, or when time is up
        (after one try again at least: a stale slot map is read again first). Then a call
        that was never answered keeps its refusal, which its caller gets as a
        ServerUnavailable in its place: the other calls' replies are kept. A call refused
        NOSCRIPT is sent again as EVAL even then: NOSCRIPT is never what a caller gets."""
        again: list[int] = []
        self.asking.clear()
        self.refused = False
        self.tries += 1
        for i in self.todo:
            reply = self.replies[i]
            if not isinstance(reply, ReplyError):
                continue
            if reply.code == "NOSCRIPT":
                self.as_source.add(i)
                again.append(i)
            elif reply.code in _NOT_RUN:
                self.refused = True
                if reply.code == "ASK":
                    self.asking[i] = _ask_target(reply)
                else:
                    self.stale = True
                if isinstance(reply, Unreached):  # (its node died: the next is likely a
                    self.as_source.add(i)  # promoted replica, whose script cache is empty)
                again.append(i)
        if again and self.tries > 1 and time.monotonic() >= self.deadline:
            # Time is up: a call refused NOSCRIPT is still sent again, at once, as EVAL
            # (its node answered, and an EVAL is never refused so: one try more at most);
            # the others keep their refusal, which reads as ServerUnavailable.
            again = [i for i in again if self.replies[i].code == "NOSCRIPT"]
            if not again:
                return True
            self.refused = self.stale = False
            self.asking.clear()
        if again:  # a write sent again is confirmed again
            confirms = [i for i in self.todo if _command(self.calls[i]) in _CONFIRMS]
            again = sorted({*again, *(i for i in confirms if i > again[0])})
        self.todo = again
        return not again

    def wait(self) -> float:
        """How long to pause before the next try."""
        if not self.refused or self.asking:  # NOSCRIPT, ASK: at once
            return 0.0
        pause, self.pause = self.pause, min(self.pause * 2, _LONGEST_PAUSE)
        return pause


def _ask_target(reply: ReplyError) -> tuple[str, int]:
    host, _, port = str(reply).split(" ")[2].rpartition(":")
    return host, int(port)


def _weakest(call: Call[Any], held: Any, reply: Any) -> Any:
    """Of two nodes' replies to one confirming call, the one that confirms less."""
    for one in (held, reply):
        if isinstance(one, ReplyError) or not call.parse(one):
            return one
    return held


class Client:
    """redis-py's client for an address, and what both drivers ask of it: which node
    serves a key."""

    def __init__(
        self,
        address: Address,
        socket_timeout: float,
        extra: Mapping[str, Any],
        *,
        asynchronous: bool,
    ) -> None:
        redis = redis_py()
        options = {**client_options(address, socket_timeout, asynchronous=asynchronous), **extra}
        module = redis.asyncio if asynchronous else redis
        self.cluster = address.kind == "cluster"
        self.sentinels: list[Any] = []  # clients of the sentinels: closed with the driver
        if address.kind == "cluster":
            cluster = module.cluster
            nodes = [cluster.ClusterNode(host, port) for host, port in address.nodes]
            try:  # (the blocking client reads the slot map here: no node may answer)
                self.client = cluster.RedisCluster(startup_nodes=nodes, **options)
            except (redis.exceptions.RedisError, redis.exceptions.RedisClusterException) as exc:
                raise server_error(ConnectionError(str(exc)), address.shown) from exc
        elif address.kind == "sentinel":
            sentinel_options = {
                "socket_timeout": socket_timeout,
                "socket_connect_timeout": socket_timeout,
                **address.sentinel_login,
            }
            sentinels = module.sentinel.Sentinel(
                list(address.nodes), sentinel_kwargs=sentinel_options, **options
            )
            self.client = sentinels.master_for(address.service, db=address.db)
            self.sentinels = list(sentinels.sentinels)
        elif address.path is not None:
            self.client = module.Redis(unix_socket_path=address.path, db=address.db, **options)
        else:
            self.client = module.Redis(
                host=address.host, port=address.port, db=address.db, **options
            )

    def node_of(self, key: str | None) -> Any:
        """The cluster node that serves ``key`` (a primary; None: no key), or None when
        there is one server."""
        if not self.cluster:
            return None
        if key is None:
            return self.client.get_default_node()
        return self.client.get_node_from_key(key)

    def node_at(self, host: str, port: int) -> Any:
        node = self.client.get_node(host=host, port=port)
        if node is None:  # not in the map yet: read it again
            raise redis_py().exceptions.RedisError(f"no node {host}:{port} in the slot map")
        return node
