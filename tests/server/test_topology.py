"""The test topologies themselves (tests/topology.py), seen with plain redis-py clients: the
cluster spreads keys over its three masters and survives a master's death; the sentinels
hand the master role to the replica. The figures printed (``-s``) are how long each
topology took to start and to fail over."""

from __future__ import annotations

import itertools
import socket
import time
from pathlib import Path

import pytest
import redis
from redis.cluster import ClusterNode, RedisCluster
from redis.crc import key_slot
from redis.sentinel import Sentinel

from ..conftest import wait_until
from ..topology import SERVICE, SLOTS, Cluster, ClusterEntry, Node, SentinelSetup, crc16, keyslot


def cluster_client(cluster: Cluster) -> RedisCluster:
    nodes = [ClusterNode("127.0.0.1", node.port) for node in cluster.nodes]
    return RedisCluster(startup_nodes=nodes, decode_responses=True, socket_timeout=5.0)


def listening(node: Node) -> bool:
    with socket.socket() as probe:
        return probe.connect_ex(("127.0.0.1", node.port)) == 0


def replicated(master: Node) -> None:
    """Wait until the master's one replica has every write made so far.

    WAIT waits for the last write of the connection it is sent on (on a connection that
    wrote nothing it returns at once, whatever the replica has), and a replica takes the
    writes in order: so a write of our own on the master's connection, a key set and
    deleted, then WAIT there. (A replica just synced may get no writes for up to a second:
    the master streams them once the replica's first ack comes.)"""
    client = master.client()
    marker = _own_key(client)
    client.set(marker, "1")
    client.delete(marker)
    assert client.execute_command("WAIT", 1, 10_000) == 1, "the replica lags"


def _own_key(client: redis.Redis) -> str:
    """A key the node of ``client`` serves: on a cluster node, one of its own slots."""
    if not client.info("cluster")["cluster_enabled"]:
        return "replicated"
    nodes = client.execute_command("CLUSTER", "NODES")
    myself = next(ClusterEntry.parse(line) for line in nodes.splitlines() if "myself" in line)
    return next(
        key
        for key in (f"replicated{{{n}}}" for n in itertools.count())
        if any(first <= keyslot(key) <= last for first, last in myself.slots)
    )


# -- slots -------------------------------------------------------------------------------


KEYS = ["", "a", "foo", "123456789", "{user1000}.following", "{user1000}.followers",
        "foo{}{bar}", "foo{{bar}}zap", "foo{bar}{zap}", "{culex:emails}:waiting", "é"]  # fmt: skip


def test_crc16_is_the_xmodem_variant_of_the_cluster_spec() -> None:
    assert crc16(b"123456789") == 0x31C3


@pytest.mark.parametrize("key", KEYS)
def test_keyslot_agrees_with_redis_py(key: str) -> None:
    assert keyslot(key) == key_slot(key.encode())


def test_keyslot_agrees_with_the_server(cluster: Cluster) -> None:
    client = cluster.masters()[0].client()
    for key in [*KEYS, *(f"key-{n}" for n in range(200))]:
        assert keyslot(key) == client.execute_command("CLUSTER", "KEYSLOT", key), key
    assert keyslot("{user1000}.following") == keyslot("{user1000}.followers")


# -- the cluster -------------------------------------------------------------------------


def test_the_cluster_has_three_masters_each_with_a_replica(cluster: Cluster) -> None:
    print(f"cluster started in {cluster.started_in:.2f} s")
    masters = cluster.masters()
    assert len(masters) == 3
    assert sorted(cluster.roles().values()) == ["master"] * 3 + ["slave"] * 3
    for master in masters:
        (replica,) = cluster.replicas_of(master)
        assert replica.master_link_up()
    served = sorted(r for master in masters for r in cluster.slots_of(master))
    assert sum(last - first + 1 for first, last in served) == SLOTS
    assert cluster.url == "redis+cluster://" + ",".join(
        f"127.0.0.1:{node.port}" for node in cluster.nodes
    )


def test_keys_land_on_all_three_masters(cluster: Cluster) -> None:
    client = cluster_client(cluster)
    try:
        keys = [f"key-{n}" for n in range(300)]
        for key in keys:
            client.set(key, key)
    finally:
        client.close()
    per_master = {master: master.client().dbsize() for master in cluster.masters()}
    assert all(count > 30 for count in per_master.values()), per_master
    assert sum(per_master.values()) == len(keys)
    for key in keys:
        assert cluster.master_of_key(key).client().get(key) == key
    for master in cluster.masters():
        (replica,) = cluster.replicas_of(master)
        replicated(master)
        assert replica.client().dbsize() == per_master[master]


def test_the_plain_url_reaches_a_master_of_the_cluster(cluster: Cluster) -> None:
    client = redis.Redis.from_url(cluster.plain_url)
    try:
        assert client.info("cluster")["cluster_enabled"] == 1
        assert client.execute_command("ROLE")[0] == b"master"
        assert cluster.master_of_slot(0).url == cluster.plain_url
    finally:
        client.close()


@pytest.mark.parametrize("turn", [1, 2])
def test_the_fixture_empties_every_master_for_each_test(cluster: Cluster, turn: int) -> None:
    # Whichever turn runs second finds the first one's keys unless the fixture flushed them.
    assert [master.client().dbsize() for master in cluster.masters()] == [0, 0, 0]
    for master in cluster.masters():
        first, last = cluster.slots_of(master)[0]
        keys = (f"turn-{turn}-{n}" for n in range(SLOTS * 100))
        master.client().set(next(k for k in keys if first <= keyslot(k) <= last), turn)
    assert [master.client().dbsize() for master in cluster.masters()] == [1, 1, 1]


class NeverSettling(Cluster):
    def wait_settled(self, timeout: float = 30.0, what: str = "") -> None:
        raise AssertionError("timed out (as this test wants)")


def test_a_cluster_that_fails_to_start_leaves_nothing_running(tmp_path: Path) -> None:
    cluster = NeverSettling(tmp_path)
    with pytest.raises(AssertionError, match="as this test wants"), cluster:
        pass
    assert len(cluster.nodes) == 6
    assert not any(node.alive or listening(node) for node in cluster.nodes)


def test_a_killed_masters_replica_takes_over_its_slots(private_cluster: Cluster) -> None:
    cluster = private_cluster
    print(f"private cluster started in {cluster.started_in:.2f} s")
    client = cluster_client(cluster)
    try:
        client.set("before", "kept")
        old = cluster.master_of_key("before")
        (replica,) = cluster.replicas_of(old)
        replicated(old)

        began = time.monotonic()
        cluster.kill(old)
        new = cluster.wait_failover(old)
        print(f"cluster failover took {time.monotonic() - began:.2f} s")

        assert new is replica and new.role() == "master"
        assert cluster.master_of_key("before") is new
        assert all(cluster.view(node) for node in cluster.alive())
        # The client made before the kill finds the slot's new master by itself.
        assert client.get("before") == "kept"
        assert client.set("before", "after")
        assert new.client().get("before") == "after"
        assert len(cluster.masters()) == 3

        began = time.monotonic()
        cluster.restart(old)
        print(f"the killed master rejoined in {time.monotonic() - began:.2f} s")
        assert old.role() == "slave"
        assert cluster.replicas_of(new) == [old]
        replicated(new)
        old.client().execute_command("READONLY")  # (else a replica answers MOVED)
        assert old.client().get("before") == "after"
    finally:
        client.close()
    cluster.stop()
    assert not any(node.alive or listening(node) for node in cluster.nodes)


def test_a_failover_wait_says_what_it_waited_for(private_cluster: Cluster) -> None:
    cluster = private_cluster
    old = cluster.masters()[0]
    (replica,) = cluster.replicas_of(old)
    cluster.kill(replica)
    cluster.kill(old)  # no replica is left to take over
    with pytest.raises(AssertionError, match=r"a replica to take over the slots of .* down"):
        cluster.wait_failover(old, timeout=0.5)


# -- the sentinel setup ------------------------------------------------------------------


def sentinel_of(setup: SentinelSetup) -> Sentinel:
    hosts = [("127.0.0.1", sentinel.port) for sentinel in setup.sentinels]
    return Sentinel(hosts, socket_timeout=5.0, decode_responses=True)


def test_the_sentinels_know_the_master_and_its_replica(sentinel_setup: SentinelSetup) -> None:
    print(f"sentinel setup started in {sentinel_setup.started_in:.2f} s")
    setup = sentinel_setup
    ports = ",".join(f"127.0.0.1:{sentinel.port}" for sentinel in setup.sentinels)
    assert setup.url == f"redis+sentinel://{ports}/{SERVICE}"
    sentinel = sentinel_of(setup)
    master, replica = setup.master(), setup.replica()
    assert sentinel.discover_master(SERVICE) == ("127.0.0.1", master.port)
    assert sentinel.discover_slaves(SERVICE) == [("127.0.0.1", replica.port)]
    assert master.role() == "master" and replica.role() == "slave"
    client = sentinel.master_for(SERVICE)
    try:
        client.set("written", "through the sentinels")
        replicated(master)
        assert replica.client().get("written") == "through the sentinels"
    finally:
        client.close()


def test_master_for_finds_the_new_master_after_a_failover(
    private_sentinel_setup: SentinelSetup,
) -> None:
    setup = private_sentinel_setup
    print(f"private sentinel setup started in {setup.started_in:.2f} s")
    sentinel = sentinel_of(setup)
    client = sentinel.master_for(SERVICE)
    try:
        client.set("before", "kept")
        replica = setup.replica()
        replicated(setup.master())

        began = time.monotonic()
        old = setup.kill_master()
        new = setup.wait_failover(old)
        print(f"sentinel failover took {time.monotonic() - began:.2f} s")

        assert new is replica and new.role() == "master"
        assert sentinel.discover_master(SERVICE) == ("127.0.0.1", new.port)
        # The client made before the kill asks the sentinels again and finds the new master.
        assert client.get("before") == "kept"
        assert client.set("after", "written")
        assert new.client().get("after") == "written"

        setup.set_down_after(60_000)  # no second failover while the old master syncs
        began = time.monotonic()
        setup.restart(old)
        print(f"the killed master rejoined in {time.monotonic() - began:.2f} s")
        master, replica = setup.master(), setup.replica()
        assert master is new and replica is old
        replicated(master)
        assert master.client().get("after") == "written"
        assert replica.client().get("after") == "written"
        wait_until(
            lambda: sentinel.discover_slaves(SERVICE) == [("127.0.0.1", replica.port)],
            what="the sentinels to list the other server as a replica",
        )
    finally:
        client.close()
    setup.stop()
    assert not any(node.alive or listening(node) for node in setup.nodes)
