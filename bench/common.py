"""What every part of the bench shares: its configuration, a measurement's result, the machine
(CPU, memory), the private Redis and the Postgres schemas each measurement creates and drops."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import psycopg
import redis
from psycopg import sql

import outlast

DEFAULT_DB = "postgresql://postgres@127.0.0.1:5432/test"


@dataclass(frozen=True)
class Config:
    database_url: str
    redis_url: str
    runs: int  # runs (jobs, tasks, workflows) per throughput measurement
    concurrency: int = 32
    pool: int = 16  # connections of the commit-per-write pool, per process
    tool: str = "bump"


@dataclass
class Result:
    """One throughput measurement: ``runs`` runs of ``k`` operations each in ``seconds``."""

    name: str
    k: int
    processes: int
    runs: int
    seconds: float
    cpu: float = 0.0  # CPU seconds of the process(es) doing the work
    host_busy: float = 0.0  # busy core-seconds of the whole machine meanwhile
    commits: int | None = None
    writes: int | None = None
    writer_busy: float | None = None
    extra: dict[str, float] = field(default_factory=dict)

    @property
    def runs_per_s(self) -> float:
        return self.runs / self.seconds

    @property
    def ops_per_s(self) -> float:
        return self.runs * self.k / self.seconds


def tag() -> str:
    return uuid.uuid4().hex[:10]


# -- the machine -------------------------------------------------------------------------------


def proc_cpu() -> float:
    """CPU seconds of this process and of its waited-for children."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


def pid_cpu(pid: int) -> float:
    """CPU seconds of another process (and its waited-for children), from /proc."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def busy_ticks() -> int:
    """Busy jiffies of the whole machine (all but idle and iowait), from /proc/stat."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4]


@contextmanager
def host_cpu() -> Iterator[list[float]]:
    """Yields a one-element list set, on exit, to the machine's busy core-seconds meanwhile."""
    out = [0.0]
    busy = busy_ticks()
    try:
        yield out
    finally:
        out[0] = (busy_ticks() - busy) / os.sysconf("SC_CLK_TCK")


def outlast_source() -> str:
    """Where the measured outlast comes from, and its commit (+dirty) when it is a git checkout."""
    root = Path(outlast.__file__).resolve().parents[1]
    git = ["git", "-C", str(root)]
    head = subprocess.run([*git, "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    if head.returncode != 0:  # an export (git archive): its commit noted beside it, if at all
        noted = root / ".outlast-commit"
        commit = noted.read_text().strip() if noted.exists() else "unknown commit"
        return f"outlast {commit} (exported to {root})"
    dirty = subprocess.run([*git, "status", "--porcelain", "--", "outlast"], capture_output=True, text=True)
    return f"outlast {head.stdout.strip()}{'+dirty' if dirty.stdout.strip() else ''}"


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- Redis and Postgres --------------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@contextmanager
def private_redis() -> Iterator[str]:
    """A redis-server of the bench's own on a free port, no persistence; stopped at the end."""
    exe = shutil.which("redis-server")
    if exe is None:
        sys.exit("the bench starts a private redis-server: none on PATH")
    port = free_port()
    proc = subprocess.Popen(
        [exe, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    try:
        r = redis.Redis.from_url(url)
        for _ in range(100):
            try:
                r.ping()
                break
            except redis.ConnectionError:
                time.sleep(0.05)
        r.close()
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


def flush_redis(url: str) -> None:
    r = redis.Redis.from_url(url)
    r.flushdb()  # the bench's private server only
    r.close()


def drop_schema(url: str, schema: str) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))


@contextmanager
def scratch_database(url: str, prefix: str) -> Iterator[str]:
    """A database of the bench's own on the same server (for peers that want a whole database)."""
    name = f"{prefix}_{tag()}"
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(sql.SQL("CREATE DATABASE {}").format(sql.Identifier(name)))
    try:
        yield urlunsplit(urlsplit(url)._replace(path=f"/{name}"))
    finally:
        with psycopg.connect(url, autocommit=True) as c:
            c.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
