"""A Redis Sentinel deployment of the test's own: a primary and its replica (``replicaof``), both
asking for a password, and three sentinels (Debian's ``redis-sentinel``, else ``redis-server
--sentinel``, the same program) watching the primary under the name ``outlast``, quorum 2. All
on free loopback ports under a temporary directory, without persistence.
"""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import time
from pathlib import Path
from urllib.parse import quote

import redis

from tests.conftest import wait_for
from tests.faults import TIMEOUT, free_port, redis_binary

SERVICE = "outlast"
PASSWORD = "pw of the primary"  # a space: the URL must carry it percent-encoded
DOWN_AFTER_MS = 1000


def sentinel_command() -> list[str]:
    """How to start a sentinel: ``redis-sentinel`` on PATH, else ``redis-server --sentinel``."""
    found = shutil.which("redis-sentinel")
    return [found] if found else [str(redis_binary("redis-server")), "--sentinel"]


class PrivateSentinel:
    """Start, inspect, break and destroy the deployment."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.exe = str(redis_binary("redis-server"))
        self.primary = free_port()
        self.replica = free_port()
        self.sentinels = [free_port() for _ in range(3)]
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    @property
    def url(self) -> str:
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinels)
        return f"redis+sentinel://:{quote(PASSWORD, safe='')}@{hosts}/{SERVICE}"

    def _spawn(self, port: int, command: list[str], config: str) -> None:
        d = self.root / str(port)
        d.mkdir(parents=True)
        conf = d / "redis.conf"  # a file: a sentinel rewrites its own; a promoted replica its own
        conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {d}\nlogfile {d / 'redis.log'}\n{config}")
        self.procs[port] = subprocess.Popen(
            [*command[:1], str(conf), *command[1:]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )

    def start(self) -> None:
        data = f'save ""\nappendonly no\nrequirepass "{PASSWORD}"\nmasterauth "{PASSWORD}"\n'
        self._spawn(self.primary, [self.exe], data)
        self._spawn(self.replica, [self.exe], f"{data}replicaof 127.0.0.1 {self.primary}\n")
        watch = (
            f"sentinel monitor {SERVICE} 127.0.0.1 {self.primary} 2\n"
            f'sentinel auth-pass {SERVICE} "{PASSWORD}"\n'
            f"sentinel down-after-milliseconds {SERVICE} {DOWN_AFTER_MS}\n"
            f"sentinel failover-timeout {SERVICE} 10000\n"
        )
        for port in self.sentinels:
            self._spawn(port, sentinel_command(), watch)
        wait_for(lambda: self.linked(self.replica), TIMEOUT, 0.05, "the replica to sync with the primary")
        wait_for(self.watching, TIMEOUT, 0.1, "each sentinel to know the replica and the two other sentinels")

    def client(self, port: int, password: str | None = PASSWORD) -> redis.Redis:
        return redis.Redis(
            host="127.0.0.1", port=port, password=password, socket_timeout=2, socket_connect_timeout=2,
            decode_responses=True,
        )  # fmt: skip

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

    def kill(self, port: int) -> None:
        self.procs[port].send_signal(signal.SIGKILL)
        self.procs[port].wait(TIMEOUT)

    def wait_promoted(self, port: int, timeout: float) -> None:
        def promoted() -> bool:
            with contextlib.closing(self.client(port)) as r, contextlib.suppress(redis.RedisError):
                return r.execute_command("ROLE")[0] == "master" and self.primary_by_sentinels() == {port}
            return False

        wait_for(promoted, timeout, 0.05, f"the sentinels to promote the replica ({port})")

    def destroy(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
        deadline = time.monotonic() + TIMEOUT
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(deadline - time.monotonic(), 0.1))
        self.procs.clear()
        shutil.rmtree(self.root, ignore_errors=True)
