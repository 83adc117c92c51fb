"""A Redis Cluster of the test's own: six ``redis-server --cluster-enabled yes`` processes on free
loopback ports under a temporary directory (no persistence), joined by
``redis-cli --cluster create ... --cluster-replicas 1``: three masters, each with one replica.
"""

from __future__ import annotations

import contextlib
import random
import socket
import subprocess
from pathlib import Path

import redis

from tests.conftest import wait_for
from tests.faults import TIMEOUT, redis_binary
from tests.faults.servers import RedisProcesses, client, is_master

NODES = 6
BUS = 10_000  # a node's cluster bus listens on its port + 10000


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_cluster_port(taken: list[int]) -> int:
    """A free loopback port whose cluster bus port (+10000) is free too."""
    for _ in range(1000):
        port = random.randint(20_000, 55_000)
        if port not in taken and port + BUS not in taken and _bindable(port) and _bindable(port + BUS):
            return port
    raise AssertionError("no free port pair for a cluster node")


class PrivateCluster(RedisProcesses):
    """Start, inspect, fail over and destroy a local six-node Redis Cluster."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.cli = str(redis_binary("redis-cli"))
        self.ports: list[int] = []
        for _ in range(NODES):
            self.ports.append(free_cluster_port(self.ports))

    @property
    def url(self) -> str:
        """outlast's convention: any one node, the client finds the rest."""
        return f"redis+cluster://127.0.0.1:{self.ports[0]}"

    def start(self) -> None:
        for port in self.ports:
            nodes_conf = self.home(port) / "nodes.conf"
            self.spawn(
                port,
                f'save ""\nappendonly no\ncluster-enabled yes\ncluster-config-file {nodes_conf}\n'
                "cluster-node-timeout 2000\n",
            )
        for port in self.ports:
            wait_for(lambda p=port: self._pings(p), TIMEOUT, 0.02, f"cluster node {port} to answer")
        nodes = [f"127.0.0.1:{p}" for p in self.ports]
        subprocess.run(
            [self.cli, "--cluster", "create", *nodes, "--cluster-replicas", "1", "--cluster-yes"],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            check=True,
            timeout=TIMEOUT,
        )
        wait_for(self.healthy, TIMEOUT, 0.1, "the cluster to be ok on every node")

    def _pings(self, port: int) -> bool:
        with contextlib.closing(client(port)) as r:
            try:
                return bool(r.ping())
            except redis.RedisError:
                return False

    def healthy(self) -> bool:
        """Every node says cluster_state:ok and knows three masters, each with a replica."""
        try:
            for port in self.ports:
                with contextlib.closing(client(port)) as r:
                    if r.cluster("info")["cluster_state"] != "ok":
                        return False
            return len(self.replicas()) == NODES // 2
        except (redis.RedisError, KeyError):
            return False

    def _nodes(self) -> list[tuple[str, int, str, str]]:
        """(id, port, role, master id) of every node, as the first reachable node sees them."""
        for port in self.ports:
            with contextlib.closing(client(port)) as r, contextlib.suppress(redis.RedisError):
                text = r.execute_command("CLUSTER", "NODES")
                out = []
                for line in text.splitlines():
                    f = line.split()
                    role = "master" if "master" in f[2] else "replica"
                    out.append((f[0], int(f[1].split("@")[0].rsplit(":", 1)[1]), role, f[3]))
                return out
        raise AssertionError("no cluster node answers")

    def master_of(self, key: str) -> int:
        """The port of the master that holds ``key``'s slot now."""
        for port in self.ports:
            with contextlib.closing(client(port)) as r, contextlib.suppress(redis.RedisError):
                slot = int(r.execute_command("CLUSTER", "KEYSLOT", key))
                for start, end, master, *_replicas in r.execute_command("CLUSTER", "SLOTS"):
                    if start <= slot <= end:
                        return int(master[1])
        raise AssertionError("no cluster node answers")

    def replicas(self) -> dict[int, int]:
        """Master port -> the port of its replica."""
        nodes = self._nodes()
        port_of = {nid: port for nid, port, _role, _m in nodes}
        return {port_of[m]: port for _nid, port, role, m in nodes if role == "replica" and m in port_of}

    def failover(self, master: int) -> int:
        """``CLUSTER FAILOVER`` on the replica of ``master`` (coordinated: the replica catches up,
        then takes over). Returns the replica's port (the new master)."""
        replica = self.replicas()[master]
        with contextlib.closing(client(replica)) as r:
            r.execute_command("CLUSTER", "FAILOVER")
        return replica

    def wait_master(self, port: int, timeout: float = TIMEOUT) -> None:
        wait_for(lambda: is_master(port), timeout, 0.02, f"node {port} to become a master")
