"""Prometheus metrics: what Redis holds about the queues, in the Prometheus text format.

Optional (``pip install culex[metrics]``: prometheus-client). One scrape reads the queue
names and the server's clock; every count, latency, the runners and the counters
(culex.stats), 10,000 queues a round trip in calls of read_queues.lua of 1,000 queues each
(over 10,000 queues, in two parts at once); the last minute of counters, which the totals
do not hold yet. Every queue is read: a scrape wants every series (its cost at 100,000
queues: docs/metrics.md).
``render`` / ``arender`` give the text; :class:`CulexCollector` joins a registry of your
own; ``culex metrics`` serves it.
Names and labels are fixed (alerts are written against them): docs/metrics.md.
What a scrape reads is in scrape.py, its text in exposition.py.
"""

from __future__ import annotations

import logging
import signal
import threading
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from prometheus_client.core import Metric
from prometheus_client.exposition import CONTENT_TYPE_LATEST
from prometheus_client.registry import Collector

from .. import config
from ..errors import CulexError
from .exposition import Snapshot as Snapshot
from .exposition import families, rendered
from .scrape import aread, read

__all__ = ["CONTENT_TYPE", "CulexCollector", "arender", "render", "serve"]

logger = logging.getLogger("culex")

CONTENT_TYPE = CONTENT_TYPE_LATEST
"""The Content-Type of :func:`render`'s text (the Prometheus text format)."""


def render(settings: config.Settings | None = None) -> bytes:
    """The metrics now, in the Prometheus text format (Content-Type: ``CONTENT_TYPE``)."""
    return rendered(*read(settings or config.settings(), lines=True))


async def arender(settings: config.Settings | None = None) -> bytes:
    """The async twin of :func:`render`."""
    return rendered(*await aread(settings or config.settings()))


class CulexCollector(Collector):
    """A collector for a prometheus_client registry of your own: each scrape reads Redis
    (``registry.register(CulexCollector())``)."""

    def __init__(self, settings: config.Settings | None = None) -> None:
        self.settings = settings

    def collect(self) -> Iterator[Metric]:
        settings = self.settings or config.settings()
        yield from families(read(settings, lines=False)[0])

    def describe(self) -> Iterable[Metric]:
        return []  # (no read when registered)


# -- culex metrics: an HTTP server of /metrics alone -------------------------------------


# How long a connection may keep quiet (a request not sent, a reply not read) before it
# is dropped: each connection has a thread of its own, so a slow one holds only its own.
CLIENT_TIMEOUT = 30.0


def serve(settings: config.Settings, host: str, port: int) -> None:
    """Serve ``GET /metrics`` on ``host:port`` (0: a free port) until SIGTERM or SIGINT;
    prints the address it serves. Each connection is served by a thread of its own, and
    dropped after CLIENT_TIMEOUT seconds of silence: an idle or slow client (a port
    scanner, a stuck proxy) blocks no scrape."""
    server = ThreadingHTTPServer((host, port), _handler(settings))
    server.daemon_threads = True  # (a connection still open does not hold up the exit)
    shown_host, shown_port = server.server_address[:2]

    # Both signals are handled here, not left to Python's default: a process started in
    # the background by a shell inherits SIGINT ignored, and SIGTERM is what a service
    # manager or a container runtime sends. The handler asks the loop to stop from a
    # thread of its own (shutdown() waits for the loop): an exception raised in the
    # handler would be swallowed, and the server kept serving, when the signal lands
    # while a scrape is answered (socketserver reports a handler's exceptions and goes on).
    def stop(signum: int, frame: object) -> None:
        threading.Thread(target=server.shutdown, name="culex-metrics-stop", daemon=True).start()

    for signum in (signal.SIGTERM, signal.SIGINT):
        signal.signal(signum, stop)
    print(f"serving http://{shown_host!s}:{shown_port}/metrics", flush=True)
    try:
        server.serve_forever()
    finally:
        server.server_close()


def _handler(settings: config.Settings) -> type[BaseHTTPRequestHandler]:
    class MetricsHandler(BaseHTTPRequestHandler):
        timeout = CLIENT_TIMEOUT  # (the connection's socket timeout)

        def do_GET(self) -> None:
            if self.path.split("?", 1)[0] != "/metrics":
                self._reply(404, b"not found: culex serves /metrics\n", "text/plain")
                return
            try:
                body = render(settings)
            except CulexError as exc:  # the server is down or refuses: say so, not a trace
                logger.warning("metrics: %s", exc)
                self._reply(503, f"culex: {exc}\n".encode(), "text/plain")
                return
            self._reply(200, body, CONTENT_TYPE)

        def _reply(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            logger.debug("metrics: " + format, *args)

    return MetricsHandler
