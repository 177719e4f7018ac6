"""What a wake-up costs on this machine: one PING at a time over a bare socket.

    python bench/wakeup.py [--calls 20000]

Three ways to wait for the reply: a blocking ``recv`` (what redis-py, and so every peer,
does), a ``recv(MSG_DONTWAIT)`` polled until the reply is there (culex's spin,
culex/_redis/spin.py), and a blocking ``recv`` with the client and the server pinned to
one core (``os.sched_setaffinity``, Linux only; the harness pins nothing). The gap
between the first two is the wake-up of a sleeping client. Three rounds, so that the
machine's drift shows. Same server kind and settings as compare.py. Prints the figures;
asserts nothing.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable

from server import arguments, private_server

PING = b"PING\r\n"


def blocking(sock: socket.socket) -> None:
    sock.recv(64)


def polling(sock: socket.socket) -> None:
    while True:
        try:
            sock.recv(64, socket.MSG_DONTWAIT)
            return
        except BlockingIOError:
            pass


def round_trip(sock: socket.socket, wait: Callable[[socket.socket], None], calls: int) -> float:
    """Mean µs of a PING sent and its reply read, one at a time."""
    start = time.perf_counter()
    for _ in range(calls):
        sock.sendall(PING)
        wait(sock)
    return (time.perf_counter() - start) / calls * 1e6


def main() -> None:
    parser = arguments(__doc__)
    parser.add_argument("--calls", type=int, default=20_000)
    args = parser.parse_args()
    with private_server(args.server) as server:
        assert server.process is not None
        server_pid = server.process.pid
        cores = os.sched_getaffinity(0)
        with server.socket() as sock:
            for n in range(1, 4):
                block = round_trip(sock, blocking, args.calls)
                poll = round_trip(sock, polling, args.calls)
                one = min(cores)
                os.sched_setaffinity(0, {one})
                os.sched_setaffinity(server_pid, {one})
                try:
                    pinned = round_trip(sock, blocking, args.calls)
                finally:
                    os.sched_setaffinity(0, cores)
                    os.sched_setaffinity(server_pid, cores)
                print(
                    f"round {n}: PING round trip {block:.1f} µs blocking, {poll:.1f} µs "
                    f"polling, {pinned:.1f} µs blocking with both on one core"
                )


if __name__ == "__main__":
    main()
