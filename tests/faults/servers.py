"""Private ``redis-server`` processes of a test's own (a Redis Cluster, a Sentinel deployment): each
on a loopback port, configured by a file in a directory of its own under a temporary root, without
persistence unless told; all of them killed and removed together. And the fault world whose queue
is such a deployment (``redis_world``): outlast's tables and the world's effects in schemas of the
shared test Postgres."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Protocol, TypeVar

import redis

from tests.apps import faults as faults_app
from tests.conftest import drop_schemas, migrate_schema
from tests.faults import TIMEOUT, FaultWorld, redis_binary


def client(port: int, password: str | None = None) -> redis.Redis:
    """A short-lived client of one private server (close it)."""
    return redis.Redis(
        host="127.0.0.1", port=port, password=password, socket_timeout=2, socket_connect_timeout=2,
        decode_responses=True,
    )  # fmt: skip


def is_master(port: int, password: str | None = None) -> bool:
    """The server on ``port`` answers, as a master (a primary)."""
    with contextlib.closing(client(port, password)) as r, contextlib.suppress(redis.RedisError):
        return bool(r.execute_command("ROLE")[0] == "master")
    return False


class RedisProcesses:
    """Start private servers, kill one, destroy them all with their directories."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.exe = str(redis_binary("redis-server"))
        self.procs: dict[int, subprocess.Popen[bytes]] = {}

    def home(self, port: int) -> Path:
        """The directory of the server on ``port``: its config, log and files."""
        return self.root / str(port)

    def spawn(self, port: int, config: str, command: list[str] | None = None) -> None:
        """Start a server on ``port`` with ``config`` (lines of redis.conf) after its port,
        address, directory and log. The config is a file: a sentinel rewrites its own, and so
        does a promoted replica. ``command``: another program than redis-server (a sentinel),
        given the file as its first argument."""
        d = self.home(port)
        d.mkdir(parents=True)
        conf = d / "redis.conf"
        conf.write_text(f"port {port}\nbind 127.0.0.1\ndir {d}\nlogfile {d / 'redis.log'}\n{config}")
        command = command or [self.exe]
        self.procs[port] = subprocess.Popen(
            [*command[:1], str(conf), *command[1:]],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            start_new_session=True,
        )

    def kill(self, port: int) -> None:
        self.procs[port].send_signal(signal.SIGKILL)
        self.procs[port].wait(TIMEOUT)

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


class Deployment(Protocol):
    @property
    def url(self) -> str: ...

    def start(self) -> None: ...
    def destroy(self) -> None: ...


D = TypeVar("D", bound=Deployment)


@contextlib.contextmanager
def redis_world(
    services: tuple[str, str], tmp_path: Path, make: Callable[[Path], D], name: str
) -> Iterator[tuple[FaultWorld, D]]:
    """A fault world whose queue is a deployment ``make`` builds under a temporary root (started
    here, destroyed after); ``name`` names the root."""
    shared_db, _shared_redis = services
    deployment = make(Path(tempfile.mkdtemp(prefix=f"outlast-{name}-")))
    tag = uuid.uuid4().hex[:10]
    w = FaultWorld(
        shared_db, deployment.url, f"t_{tag}", f"t{tag}", tmp_path,
        effects_url=shared_db, effects_schema=f"fx_{tag}",
    )  # fmt: skip
    try:
        deployment.start()
        migrate_schema(w.database_url, w.schema)
        faults_app.setup(w.effects_url, w.effects_schema)
        yield w, deployment
    finally:
        w.stop_all()
        deployment.destroy()
        drop_schemas(shared_db, w.schema, w.effects_schema)
