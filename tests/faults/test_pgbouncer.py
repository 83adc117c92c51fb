"""outlast through a real PgBouncer (Debian's, 1.18: no protocol-level prepared statements), in
transaction mode and in session mode: no startup option reaches the server, so the schema is set
in each transaction (``OUTLAST_PG_POOLER``); LISTEN goes to ``OUTLAST_LISTEN_URL`` or clients poll.

- migrate, then workflows run by worker processes, in each mode, with and without a LISTEN URL;
- the writer's protection against a late commit: the server process (not the pooler's) of a
  stalled batch is ended before the batch is retried;
- crash-matrix rows through transaction pooling (a representative subset, not the whole matrix:
  ``after_intention`` and ``after_effect`` leave a gap the takeover resolves, ``after_result``
  replays a result, ``before_ack`` redelivers a final run);
- a load whose every run must succeed, on two worker processes.

Each test starts a PgBouncer of its own in front of the test Postgres; outlast's tables, and the
tools' world (read and written directly, ``TEST_WORLD_URL``), are in the test's own schema.
"""

from __future__ import annotations

import asyncio
import os
import socket
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

from outlast import AsyncClient
from outlast.settings import Settings
from outlast.store import Store
from tests.apps import faults as faults_app
from tests.conftest import drop_keys, drop_schemas
from tests.crash import test_matrix
from tests.faults import FaultWorld, check_every_run_once, enqueue_many
from tests.faults.pgbouncer import PrivatePgBouncer

crash_point = test_matrix.test_crash_point  # not collected here under this name


@dataclass
class PooledWorld(FaultWorld):
    """A test's corner reached through PgBouncer: outlast (clients, workers, the CLI) uses
    ``pooled_url``; the test's own reads and the tools' world go to the database directly."""

    pooled_url: str = ""
    mode: str = "transaction"
    listen_url: str | None = None

    def settings(self, **kw: Any) -> Settings:
        pooled = {"database_url": self.pooled_url, "pg_pooler": self.mode, "listen_url": self.listen_url}
        return super().settings(**{**pooled, **kw})

    def env(self, **extra: str) -> dict[str, str]:
        pooled = {
            "OUTLAST_DATABASE_URL": self.pooled_url,
            "OUTLAST_PG_POOLER": self.mode,
            "TEST_WORLD_URL": self.database_url,
        }
        if self.listen_url:
            pooled["OUTLAST_LISTEN_URL"] = self.listen_url
        return super().env(**{**pooled, **extra})


@pytest.fixture
def pooled(
    services: tuple[str, str], tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[PooledWorld]:
    """A PgBouncer in the mode the test asks for (``indirect`` parametrization; default
    transaction), and a schema migrated through it."""
    db, rd = services
    mode, listen = getattr(request, "param", ("transaction", False))
    bouncer = PrivatePgBouncer(db, mode, pool_size=60)  # session mode: a server connection per client one
    tag = uuid.uuid4().hex[:10]
    schema = f"t_{tag}"
    w = PooledWorld(
        db, rd, schema, f"t{tag}", tmp_path, effects_url=db, effects_schema=schema,
        pooled_url=bouncer.url(db), mode=mode, listen_url=db if listen else None,
    )  # fmt: skip
    try:
        bouncer.start()
        migrated = w.cli("migrate")  # through PgBouncer
        assert migrated.returncode == 0, migrated.stderr
        w.sql("CREATE TABLE executions (id serial PRIMARY KEY, run_id text, what text)")
        faults_app.setup(db, schema)
        yield w
    finally:
        w.stop_all()
        bouncer.destroy()
        drop_schemas(db, schema)
        drop_keys(w)


MODES = [("transaction", False), ("transaction", True), ("session", False)]
MODE_IDS = ["transaction-polling", "transaction-listen", "session"]


@pytest.mark.parametrize("pooled", MODES, indirect=True, ids=MODE_IDS)
def test_workflows_run_through_pgbouncer(pooled: PooledWorld) -> None:
    """Migrated above through PgBouncer; here worker processes run workflows through it and a
    client waits for them; `outlast health` says how waiting clients learn of a change."""
    health = pooled.cli("health")
    assert health.returncode == 0, health.stderr
    if pooled.listen_url:
        assert "wake-ups: LISTEN on OUTLAST_LISTEN_URL" in health.stdout, health.stdout
    elif pooled.mode == "transaction":
        assert "wake-ups: polling" in health.stdout, health.stdout
    else:
        assert "wake-ups: LISTEN on the database URL" in health.stdout, health.stdout

    pooled.start("w1", "-c", "8")
    ids = enqueue_many(pooled, "chain", [{"tool": "effect", "n": 3} for _ in range(20)])

    async def wait_all() -> list[str]:
        async with AsyncClient(settings=pooled.settings()) as client:
            runs = await asyncio.gather(*(client.wait(rid, timeout=60, poll=0.5) for rid in ids))
            return [r.state for r in runs]

    assert asyncio.run(wait_all()) == ["succeeded"] * len(ids)
    check_every_run_once(pooled, ids, ops=3)
    watchers = pooled.sql("SELECT count(*) FROM watchers")[0][0]
    assert watchers == 0, "a watcher row was left behind"


@pytest.mark.parametrize("pooled", MODES[:1], indirect=True, ids=MODE_IDS[:1])
async def test_the_runs_list_through_pgbouncer(pooled: PooledWorld) -> None:
    """A page of the runs list (the dashboard's, ``outlast runs``) is composed per query and read
    on a pooled connection: through a pooler, no startup option set its schema, so its
    transaction must."""
    async with AsyncClient(settings=pooled.settings()) as client:
        made = [await client.enqueue("chain", {"tool": "effect", "n": 1}) for _ in range(3)]
        page, cursor = await client.runs_page()
    assert sorted(r.id for r in page) == sorted(r.id for r in made)
    assert cursor is None


# A wait that a cancel does not stop (as a commit waiting for a synchronous standby is not undone by
# one): PgBouncer cancels the query of a client that left, so only an uncancellable stall shows
# what a late commit would do. The test holds advisory lock 42 while the write must wait.
STUBBORN = """
CREATE FUNCTION stubborn() RETURNS boolean LANGUAGE plpgsql AS $$
BEGIN
    LOOP
        BEGIN
            PERFORM pg_advisory_xact_lock_shared(42);
            RETURN true;
        EXCEPTION WHEN query_canceled THEN
            -- not stopped: only the end of the server process ends this transaction
        END;
    END LOOP;
END $$
"""
BUMP = "UPDATE tally SET n = n + 1 WHERE stubborn() RETURNING n"


def stalled(world: PooledWorld) -> int:
    found = world.sql(
        "SELECT count(*) FROM pg_stat_activity WHERE query = %s AND wait_event_type = 'Lock'", BUMP
    )
    return int(found[0][0])


async def test_a_broken_links_server_process_is_ended_before_the_retry(pooled: PooledWorld) -> None:
    """A batch is under way (stalled) when the writer's link to PgBouncer breaks; the writer
    retries on a new connection. Behind PgBouncer the connection's backend pid is the pooler's:
    unless the writer ends the server process it learned from the batch itself, the first try is
    still there and commits when the stall ends, beside the retry (the tally would count two)."""
    pooled.sql("CREATE TABLE tally (n int NOT NULL)")
    pooled.sql("INSERT INTO tally VALUES (0)")
    pooled.sql(STUBBORN)
    store = Store.from_settings(pooled.settings())
    await store.open()
    await store.writer.write("SELECT 1", {})  # the writer's connection
    conn = store.writer.lanes[0]._conn
    assert conn is not None
    with psycopg.connect(pooled.database_url, autocommit=True) as holder:
        holder.execute("SELECT pg_advisory_lock(42)")
        bump = asyncio.create_task(store.writer.write(BUMP, {}))
        while stalled(pooled) == 0:
            await asyncio.sleep(0.05)
        link = socket.socket(fileno=os.dup(conn.pgconn.socket))
        link.shutdown(socket.SHUT_RDWR)  # the link breaks; the server process goes on
        link.close()
        while store.writer.lanes[0]._conn in (None, conn) or stalled(pooled) == 0:  # the retry, stalled
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.5)
        found = stalled(pooled)
        holder.execute("SELECT pg_advisory_unlock(42)")
    assert await asyncio.wait_for(bump, 30) == [{"n": 1}]
    await asyncio.sleep(1.0)  # a late commit of an earlier try would have landed by now
    assert found == 1, f"{found} transactions of the same write were under way at once"
    assert pooled.sql("SELECT n FROM tally") == [(1,)]
    await store.close()


# The crash matrix through transaction pooling, a subset of its rows (each row is six worker
# processes, five tool kinds): the gap rows (resolved by the takeover, in doubt resolved through
# the CLI), a replayed result, and a final run redelivered. before_intention and after_final
# differ from these only before the first or after the last write, which the pooler never sees.
@pytest.mark.crash
@pytest.mark.parametrize("point", ["after_intention", "after_effect", "after_result", "before_ack"])
def test_crash_point_through_transaction_pooling(pooled: PooledWorld, point: str) -> None:
    crash_point(pooled, point)


@pytest.mark.timeout(300)
def test_load_through_transaction_pooling(pooled: PooledWorld) -> None:
    """300 runs of five operations on two worker processes through transaction pooling (prepared
    statements off, the schema set in each transaction, clients polling): every run succeeds,
    every operation has exactly one effect."""
    for k in range(2):
        pooled.start(f"load-{k}", "-c", "32")
    ids = enqueue_many(pooled, "chain", [{"tool": "effect", "n": 5} for _ in range(300)])
    pooled.wait_settled(ids, timeout=240)
    pooled.stop_all()
    check_every_run_once(pooled, ids)
