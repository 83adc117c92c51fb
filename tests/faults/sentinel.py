"""A Redis Sentinel deployment of the test's own: a primary and its replica (``replicaof``), both
asking for a password, and three sentinels (Debian's ``redis-sentinel``, else ``redis-server
--sentinel``, the same program) watching the primary under the name ``outlast``, quorum 2. All
on free loopback ports under a temporary directory, without persistence.
"""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from urllib.parse import quote

import redis

from tests.conftest import wait_for
from tests.faults import TIMEOUT, free_port, redis_binary
from tests.faults.servers import RedisProcesses, client, is_master

SERVICE = "outlast"
PASSWORD = "pw of the primary"  # a space: the URL must carry it percent-encoded
DOWN_AFTER_MS = 1000


def sentinel_command() -> list[str]:
    """How to start a sentinel: ``redis-sentinel`` on PATH, else ``redis-server --sentinel``."""
    found = shutil.which("redis-sentinel")
    return [found] if found else [str(redis_binary("redis-server")), "--sentinel"]


class PrivateSentinel(RedisProcesses):
    """Start, inspect, break and destroy the deployment."""

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.primary = free_port()
        self.replica = free_port()
        self.sentinels = [free_port() for _ in range(3)]

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinels)
        return f"redis+sentinel://:{quote(PASSWORD, safe='')}@{hosts}/{SERVICE}"

    def start(self) -> None:
        data = f'save ""\nappendonly no\nrequirepass "{PASSWORD}"\nmasterauth "{PASSWORD}"\n'
        self.spawn(self.primary, data)
        self.spawn(self.replica, f"{data}replicaof 127.0.0.1 {self.primary}\n")
        watch = (
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary} 2\n"
            f'sentinel auth-pass {SERVICE} "{PASSWORD}"\n'
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} 10000\n"
        )
        for port in self.sentinels:
            self.spawn(port, watch, sentinel_command())
        wait_for(lambda: self.linked(self.replica), TIMEOUT, 0.05, "the replica to sync with the primary")
        wait_for(self.watching, TIMEOUT, 0.1, "each sentinel to know the replica and the two other sentinels")

    def client(self, port: int, password: str | None = PASSWORD) -> redis.Redis:
        """A client of a server (the primary's password by default) or, with None, a sentinel."""
        return client(port, password)

    def linked(self, replica: int) -> bool:
        with contextlib.closing(self.client(replica)) as r, contextlib.suppress(redis.RedisError):
            return r.info("replication").get("master_link_status") == "up"
        return False

    def watching(self) -> bool:
        for port in self.sentinels:
            with contextlib.closing(self.client(port, None)) as s:
                try:
                    replicas = s.execute_command("SENTINEL", "REPLICAS", SERVICE)
                    others = s.execute_command("SENTINEL", "SENTINELS", SERVICE)
                except redis.RedisError:
                    return False
                if len(others) != 2 or not any("disconnected" not in str(r) for r in replicas):
                    return False
        return True

    def primary_by_sentinels(self) -> set[int]:
        """The primary's port as each sentinel that answers names it."""
        found = set()
        for port in self.sentinels:
            with contextlib.closing(self.client(port, None)) as s, contextlib.suppress(redis.RedisError):
                _host, at = s.execute_command("SENTINEL", "GET-MASTER-ADDR-BY-NAME", SERVICE)
                found.add(int(at))
        return found

    def offsets(self) -> tuple[int, int]:
        """The replication offsets: what the primary wrote, what the replica applied."""
        with (
            contextlib.closing(self.client(self.primary)) as p,
            contextlib.closing(self.client(self.replica)) as r,
        ):
            return int(p.info("replication")["master_repl_offset"]), int(
                r.info("replication")["slave_repl_offset"]
            )

    def cut_replication(self) -> None:
        """The replica stops receiving: it can no longer log in to the primary (wrong
        ``masterauth``) and its link is dropped. What the primary writes now exists only there."""
        with contextlib.closing(self.client(self.replica)) as r:
            r.config_set("masterauth", "not the password")
            r.execute_command("CLIENT", "KILL", "TYPE", "master")
        wait_for(lambda: not self.linked(self.replica), TIMEOUT, 0.02, "the replica's link to go down")

    def restore_auth(self) -> None:
        with contextlib.closing(self.client(self.replica)) as r:
            r.config_set("masterauth", PASSWORD)

    def wait_promoted(self, port: int, timeout: float) -> None:
        def promoted() -> bool:
            return is_master(port, PASSWORD) and self.primary_by_sentinels() == {port}

        wait_for(promoted, timeout, 0.05, f"the sentinels to promote the replica ({port})")
