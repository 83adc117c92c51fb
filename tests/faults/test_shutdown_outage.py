"""SIGTERM while Postgres is gone. A worker holding runs mid-tool loses its Postgres (killed, or
its database unreachable), then gets SIGTERM: it exits within its grace period (+5 s), not after
its writer's ``retry_for`` (60 s). What it could not write is left to the lease, as after a
crash: Postgres comes back, another worker takes the runs over, and every operation has exactly
one effect (the tools are reconciled and idempotent: nothing in doubt). Every line its JSON log
got, psycopg_pool's own failed connection attempts included, is JSON. So too when its link to
Postgres is half-open (connections accepted, never answered) and its pool is reconnecting: the
closes after the stop are bounded, and a pool parent does not wait on a child past the bound."""

from __future__ import annotations

import json
import signal
import subprocess
import time
import uuid
from pathlib import Path

import psycopg
import pytest

from tests.apps import faults as faults_app
from tests.conftest import drop_keys, drop_schemas, migrate_schema, wait_for
from tests.faults import FaultWorld, PrivatePostgres, PrivateRedis, _children, enqueue_many
from tests.nemesis.links import Links

pytestmark = pytest.mark.crash

GRACE = 3.0
RUNS = 6


def is_json(line: str) -> bool:
    try:
        return isinstance(json.loads(line), dict)
    except ValueError:
        return False


@pytest.mark.timeout(240)
def test_sigterm_with_postgres_killed_mid_tool(fw: FaultWorld) -> None:
    assert fw.pg is not None
    a = fw.start("gone-a", "-c", "8", "--grace", f"{GRACE:g}", OUTLAST_GRACE=f"{GRACE:g}")
    ids = enqueue_many(fw, "mixed", [{"seconds": 1.0} for _ in range(RUNS)])
    busy = "SELECT count(*) FROM runs WHERE state = 'running' AND journal_len > 0"
    wait_for(lambda: fw.sql(busy)[0][0] == RUNS, 60, 0.05, "every run to be mid-tool")
    fw.pg.stop()  # its connections cut, nothing answers
    time.sleep(0.5)  # the tools' calls end, their results have nowhere to go
    began = time.monotonic()
    a.send_signal(signal.SIGTERM)
    try:
        rc = a.wait(GRACE + 5)
        took = time.monotonic() - began
    except subprocess.TimeoutExpired:
        took = time.monotonic() - began
        a.kill()
        a.wait(10)
        fw.pg.start()
        pytest.fail(
            f"the worker had not exited {took:.1f}s after SIGTERM (grace {GRACE:g}s) with Postgres gone\n"
            + fw.log_tail()
        )
    print(f"\nworker exited {took:.1f}s after SIGTERM (grace {GRACE:g}s), code {rc}")
    plain = [line for line in (fw.tmp / "worker-0.log").read_text().splitlines() if not is_json(line)]
    assert not plain, f"{len(plain)} lines of its JSON log are not JSON, e.g. {plain[:3]}"
    fw.pg.start()
    fw.start("gone-b")
    fw.wait_settled(ids, timeout=120, what="another worker to finish the runs")
    states = fw.states()
    assert states == {"succeeded": RUNS}, states
    effects = fw.effects()
    wanted = {(rid, f"op-{k}") for rid in ids for k in range(1, 6)}
    assert set(effects) == wanted and set(effects.values()) == {1}, sorted(effects.items())[:10]


@pytest.mark.timeout(180)
def test_sigterm_with_its_database_dropped_mid_tool(
    services: tuple[str, str], private_servers: tuple[PrivatePostgres, PrivateRedis], tmp_path: Path
) -> None:
    """The database itself dropped under the worker (``DROP DATABASE ... WITH (FORCE)``): every
    connection cut, every new one refused. Nothing is left to recover; the worker still exits
    within its grace period (+5 s) of SIGTERM."""
    pg, rd = private_servers
    pg.ensure_up()
    rd.ensure_up()
    tag = uuid.uuid4().hex[:10]
    with psycopg.connect(pg.url(), autocommit=True) as c:
        c.execute(f'CREATE DATABASE "d_{tag}"'.encode())
    w = FaultWorld(
        pg.url(f"d_{tag}"), rd.url, f"t_{tag}", f"t{tag}", tmp_path,
        effects_url=services[0], effects_schema=f"fx_{tag}", pg=pg, rd=rd,
    )  # fmt: skip
    migrate_schema(w.database_url, w.schema)
    faults_app.setup(w.effects_url, w.effects_schema)
    try:
        a = w.start("dropped-a", "-c", "8", "--grace", f"{GRACE:g}", OUTLAST_GRACE=f"{GRACE:g}")
        enqueue_many(w, "mixed", [{"seconds": 1.0} for _ in range(RUNS)])
        busy = "SELECT count(*) FROM runs WHERE state = 'running' AND journal_len > 0"
        wait_for(lambda: w.sql(busy)[0][0] == RUNS, 60, 0.05, "every run to be mid-tool")
        with psycopg.connect(pg.url(), autocommit=True) as c:
            c.execute(f'DROP DATABASE "d_{tag}" WITH (FORCE)'.encode())
        time.sleep(0.5)
        began = time.monotonic()
        a.send_signal(signal.SIGTERM)
        try:
            a.wait(GRACE + 5)
        except subprocess.TimeoutExpired:
            pytest.fail(
                f"the worker had not exited {time.monotonic() - began:.1f}s after SIGTERM "
                f"(grace {GRACE:g}s) with its database dropped\n" + w.log_tail()
            )
        print(f"\nworker exited {time.monotonic() - began:.1f}s after SIGTERM (grace {GRACE:g}s)")
    finally:
        w.stop_all()
        drop_keys(w)
        drop_schemas(w.effects_url, w.effects_schema)
        with psycopg.connect(pg.url(), autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "d_{tag}" WITH (FORCE)'.encode())


@pytest.mark.timeout(240)
@pytest.mark.parametrize("processes", [1, 2])
def test_sigterm_with_its_postgres_link_half_open(fw: FaultWorld, processes: int) -> None:
    """Its connections to Postgres closed and every new one accepted and never answered: the pool
    is reconnecting (each attempt hanging) when SIGTERM comes with grace 1 s."""
    assert fw.pg is not None
    port = fw.pg.port
    links = Links()
    try:
        link = links.link("pg", lambda: port)
        url = fw.pg.url().replace(f":{port}/", f":{link.port}/")
        a = fw.start(
            "half-a", "-c", "8", "--processes", str(processes), "--grace", "1", OUTLAST_DATABASE_URL=url
        )
        ids = enqueue_many(fw, "mixed", [{"seconds": 1.0} for _ in range(RUNS)])
        busy = "SELECT count(*) FROM runs WHERE state = 'running' AND journal_len > 0"
        wait_for(lambda: fw.sql(busy)[0][0] == RUNS, 60, 0.05, "every run to be mid-tool")
        children = [
            pid for pid in _children(a.pid) if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes()
        ]
        assert len(children) == (processes if processes > 1 else 0), children
        link.half()
        link.reset()  # its connections closed: the pool's workers reconnect, and hang
        time.sleep(1.0)
        began = time.monotonic()
        a.send_signal(signal.SIGTERM)
        try:
            a.wait(1 + 5)
            took = time.monotonic() - began
        except subprocess.TimeoutExpired:
            took = time.monotonic() - began
            a.kill()
            a.wait(10)
            pytest.fail(
                f"the worker (--processes {processes}) had not exited {took:.1f}s after SIGTERM "
                f"(grace 1s) with its Postgres link half-open\n" + fw.log_tail()
            )
        print(f"\nworker (--processes {processes}) exited {took:.1f}s after SIGTERM (grace 1s)")
        left = [pid for pid in children if Path(f"/proc/{pid}").exists()]
        assert not left, f"worker processes {left} outlived their pool"
        link.mend()
    finally:
        links.close()
    fw.start("half-b")
    fw.wait_settled(ids, timeout=120, what="another worker to finish the runs")
    assert fw.states() == {"succeeded": RUNS}, fw.states()
    effects = fw.effects()
    wanted = {(rid, f"op-{k}") for rid in ids for k in range(1, 6)}
    assert set(effects) == wanted and set(effects.values()) == {1}, sorted(effects.items())[:10]
