"""The producer's side of ``enqueue()``: its Python alone, and the first call after a pause.

    python bench/producer.py [--calls 100000] [--paused 300] [--floor 20000]

Two figures that the harness's A and C hide inside a round trip:

- **Python per call, the wire cut off**: ``--calls`` calls of the harness's job
  (``Noop(stamp=...).enqueue()``) with the connection's exchange answered at once by a
  canned reply, so what is timed is culex's own code from the job object to the
  ``Task``: params, id, script call, RESP packing, reply parsing. Best of three rounds.
- **After a pause**: ``--paused`` calls, each after a sleep of 0, 1 or 10 ms (C's gap),
  against a private server: the whole call, the part spent in the exchange (send, server,
  reply), and the rest, which is the producer's Python run on caches that the pause let
  go cold; and the server's own time for the script (INFO commandstats). Then, after the
  same pauses, a PING over a bare socket and a 300-step Python loop, each done twice in
  a row: what the pause costs without culex.

- **Python after a round trip**: ``enqueue()`` with its exchange replaced three ways:
  a canned reply; a pure-Python wait of 20 µs, then the canned reply; a PING over a
  bare socket, then the canned reply. The median time of the call outside the exchange:
  what a round trip through the kernel costs the Python that runs after it.
- **The floor of a call in a loop** (``--floor``): A's loop of calls, with no Python
  between them but a socket's send and receive of bytes packed beforehand: a PING; an
  LPUSH of 300 bytes (huey's enqueue, its message pickled); ``enqueue.lua`` with a new
  task id each call (culex's enqueue). Then ``enqueue()`` itself. Three rounds, taken in
  turn; the mean µs per call of each round. What A can reach at best, before any Python.

To compare two checkouts, run it with ``PYTHONPATH=<checkout>/src`` for each in turn.
Same server kind and settings as compare.py. Prints the figures; asserts nothing.
"""

from __future__ import annotations

import socket
import statistics
import time
from collections.abc import Callable
from typing import Any

import redis
from server import arguments, private_server

import culex
from culex._redis import connections as wire

PAUSES = (0.0, 0.001, 0.010)


class Noop(culex.QueuedJob):  # the harness's job (adapters/culex.py), without its body
    queue = "bench"
    stamp: float

    async def perform(self) -> None: ...


def python_alone(calls: int) -> float:
    """µs per enqueue() with the exchange answered at once (best of three rounds)."""
    real = wire.SyncConnection.exchange

    def canned(
        self: wire.SyncConnection, packed: bytes, count: int, blocks: float = 0.0
    ) -> list[Any]:
        return [[b"waiting", b"0"]]

    wire.SyncConnection.exchange = canned  # type: ignore[method-assign]
    try:
        rounds = []
        for _ in range(3):
            start = time.perf_counter()
            for _ in range(calls):
                Noop(stamp=1.0).enqueue()
            rounds.append((time.perf_counter() - start) / calls * 1e6)
        return min(rounds)
    finally:
        wire.SyncConnection.exchange = real  # type: ignore[method-assign]


def paused_enqueues(pause: float, calls: int) -> tuple[float, float, float]:
    """Medians (µs) of an enqueue() after ``pause`` s of sleep: the whole call, its
    exchange, and the rest of the call."""
    real = wire.SyncConnection.exchange
    exchanges: list[float] = []

    def timed(self: wire.SyncConnection, packed: bytes, count: int, *blocks: float) -> list[Any]:
        start = time.perf_counter()
        try:
            return real(self, packed, count, *blocks)  # (older checkouts take no blocks)
        finally:
            exchanges.append(time.perf_counter() - start)

    wire.SyncConnection.exchange = timed  # type: ignore[method-assign]
    try:
        whole = []
        for _ in range(calls):
            time.sleep(pause)
            start = time.perf_counter()
            Noop(stamp=1.0).enqueue()
            whole.append(time.perf_counter() - start)
    finally:
        wire.SyncConnection.exchange = real  # type: ignore[method-assign]
    rest = [w - e for w, e in zip(whole, exchanges, strict=True)]
    return tuple(statistics.median(x) * 1e6 for x in (whole, exchanges, rest))  # type: ignore[return-value]


def replaced(
    instead: Callable[[], None], exchanges: list[float], reply: list[Any]
) -> Callable[[wire.SyncConnection, bytes, int, float], list[Any]]:
    """An exchange that runs ``instead``, notes how long it took, and returns ``reply``."""

    def exchange(
        self: wire.SyncConnection, packed: bytes, count: int, blocks: float = 0.0
    ) -> list[Any]:
        start = time.perf_counter()
        instead()
        exchanges.append(time.perf_counter() - start)
        return reply

    return exchange


def python_after(ping: Callable[[], None], calls: int) -> dict[str, float]:
    """Median µs of enqueue() outside its exchange, by what the exchange does instead."""
    canned_reply = [[b"waiting", b"0"]]

    def canned() -> None:
        pass

    def spin() -> None:
        deadline = time.perf_counter() + 0.00002
        while time.perf_counter() < deadline:
            pass

    real = wire.SyncConnection.exchange
    results = {}
    try:
        for name, instead in (("canned", canned), ("a 20 µs spin", spin), ("a PING", ping)):
            exchanges: list[float] = []
            wire.SyncConnection.exchange = replaced(instead, exchanges, canned_reply)  # type: ignore[method-assign,assignment]
            whole = []
            for _ in range(calls):
                start = time.perf_counter()
                Noop(stamp=1.0).enqueue()
                whole.append(time.perf_counter() - start)
            rest = [w - e for w, e in zip(whole, exchanges, strict=True)]
            results[name] = statistics.median(rest) * 1e6
    finally:
        wire.SyncConnection.exchange = real  # type: ignore[method-assign]
    return results


def paused(pause: float, calls: int, step: Callable[[], None]) -> tuple[float, float]:
    """Medians (µs) of ``step`` run after ``pause`` s of sleep, and run again at once."""
    first, second = [], []
    for _ in range(calls):
        time.sleep(pause)
        start = time.perf_counter()
        step()
        middle = time.perf_counter()
        step()
        first.append(middle - start)
        second.append(time.perf_counter() - middle)
    return statistics.median(first) * 1e6, statistics.median(second) * 1e6


def floor(sock: socket.socket, calls: int, rounds: int = 3) -> dict[str, list[float]]:
    """Mean µs per call of a loop of pre-packed commands on one socket, and of enqueue()."""
    from culex._redis import scripts
    from culex._redis.connections import hiredis_pack
    from culex._redis.keys import queue_keys

    keys = queue_keys("culex", "floor")
    sock.sendall(hiredis_pack([("SCRIPT", "LOAD", scripts.ENQUEUE.source)]))
    sock.recv(64)
    params = '{"stamp": 1700000000.123456}'

    def packets(kind: str, round_: int) -> list[bytes]:
        if kind == "PING":
            return [b"PING\r\n"] * calls
        if kind == "LPUSH":
            return [hiredis_pack([("LPUSH", "huey.bench", b"x" * 300)])] * calls
        return [  # enqueue.lua: the arguments enqueue() sends, a new id each call
            hiredis_pack(
                [
                    (
                        "EVALSHA",
                        scripts.ENQUEUE.sha,
                        4,
                        keys.task(f"{round_}-{i}"),
                        keys.waiting,
                        keys.scheduled,
                        keys.signal,
                        f"{round_}-{i}",
                        "Noop",
                        "floor",
                        params,
                        "",
                        0,
                        3,
                    )
                ]
            )
            for i in range(calls)
        ]

    def raw(batch: list[bytes]) -> float:
        start = time.perf_counter()
        for packet in batch:
            sock.sendall(packet)
            sock.recv(256)  # one short reply, all in one read
        return (time.perf_counter() - start) / calls * 1e6

    def culex_loop() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            Noop(stamp=1700000000.123456).enqueue()
        return (time.perf_counter() - start) / calls * 1e6

    results: dict[str, list[float]] = {
        "PING": [],
        "LPUSH 300 B": [],
        "enqueue.lua": [],
        "enqueue()": [],
    }
    for round_ in range(rounds):
        for kind in ("PING", "LPUSH", "enqueue.lua"):
            batch = packets(kind, round_)
            name = "LPUSH 300 B" if kind == "LPUSH" else kind
            results[name].append(raw(batch))
        results["enqueue()"].append(culex_loop())
    return results


def loop() -> None:
    total = 0
    for i in range(300):
        total += i


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--paused", type=int, default=300)
    parser.add_argument("--floor", type=int, default=20_000, help="calls per loop (0: skip)")
    args = parser.parse_args()
    with private_server(args.server) as server, server.socket() as sock:
        stats = redis.Redis(port=server.port)

        def ping() -> None:
            sock.sendall(b"PING\r\n")
            sock.recv(64)

        culex.configure(redis_url=server.url)
        Noop(stamp=1.0).enqueue()  # connect, load the script
        print(f"culex's Python per enqueue(), the wire cut off: {python_alone(args.calls):.1f} µs")
        after = python_after(ping, args.calls)
        print(
            "the same Python (medians, µs) with the exchange replaced by "
            + "; ".join(f"{name}: {us:.1f}" for name, us in after.items())
        )
        for pause in PAUSES:
            stats.config_resetstat()
            whole, exchange, rest = paused_enqueues(pause, args.paused)
            script = stats.info("commandstats")["cmdstat_evalsha"]["usec_per_call"]
            ping_first, ping_again = paused(pause, args.paused, ping)
            loop_first, loop_again = paused(pause, args.paused, loop)
            print(
                f"after {pause * 1000:g} ms asleep (medians, µs): enqueue() {whole:.0f} "
                f"(exchange {exchange:.0f}, the rest {rest:.0f}; the server's time for "
                f"enqueue.lua {script:.0f}, a mean); "
                f"PING {ping_first:.0f}, again at once {ping_again:.0f}; "
                f"a 300-step loop {loop_first:.1f}, again at once {loop_again:.1f}"
            )
        if args.floor:
            print(f"a loop of {args.floor:,} calls, mean µs per call in each of 3 rounds:")
            for name, means in floor(sock, args.floor).items():
                rounds = ", ".join(f"{m:.1f}" for m in means)
                print(f"  {name:12} {rounds}  (best {1e6 / min(means):,.0f}/s)")
        stats.close()


if __name__ == "__main__":
    main()
