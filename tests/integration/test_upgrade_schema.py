"""Migrations under load, and code that runs on a newer schema (docs/upgrading.md).

- A DDL statement that waits for a lock held by a long writer transaction gives way after
  ``lock_wait`` (``schema.lock_wait``) and is tried again: once the writer commits, the migration
  is applied; with a single try it fails, saying so, and nothing of it is applied.
- A concurrent index build that gave way leaves an invalid index: it is dropped and built again.
- A schema newer than the code is accepted when the migrations since only expanded it
  (``oldest_code``), and refused, naming both versions, when one contracted it: by ``migrate``,
  by ``check_schema`` and by a real worker process.
- A contract migration is refused while a live worker runs code older than it allows.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from structlog.testing import capture_logs

from outlast import Client
from outlast.errors import SchemaError
from outlast.store import SCHEMA_VERSION, Store
from outlast.store.steps import MIGRATIONS, Migration
from tests.conftest import World
from tests.integration.test_migrations import Schemas, catalog

WAIT = 0.3  # seconds a statement waits for a lock before it gives way, here


@pytest.fixture
def schemas(services: tuple[str, str]) -> Iterator[Schemas]:
    s = Schemas(services[0])
    yield s
    s.drop()


def step(name: str) -> Migration:
    return next(m for m in MIGRATIONS if m.name.startswith(name))


async def _holding(url: str, schema: str, lock: str) -> psycopg.AsyncConnection[Any]:
    """A transaction left open after ``lock``: a writer's holds ROW EXCLUSIVE on its table until it
    ends; any holds its snapshot (repeatable read), which a concurrent index build waits for."""
    holder = await psycopg.AsyncConnection.connect(url, options=f"-c search_path={schema}")
    await holder.set_isolation_level(psycopg.IsolationLevel.REPEATABLE_READ)
    await holder.execute(lock.encode())
    return holder


async def _migrate_behind(
    url: str, schema: str, to: int, lock: str, tries: int
) -> tuple[list[dict[str, Any]], BaseException | int]:
    """Migrate to ``to`` while a writer holds ``lock``; the writer commits once the migration has
    given way twice. The log events seen, and what migrate returned (or raised)."""
    holder = await _holding(url, schema, lock)
    store = Store(url, schema)
    await store.open(check=False)
    try:
        with capture_logs() as logs:
            task = asyncio.ensure_future(store.migrate(to, lock_wait=WAIT, tries=tries))
            while not task.done() and sum(e["event"] == "schema.lock_wait" for e in logs) < 2:
                await asyncio.sleep(0.05)
            await holder.commit()
            try:
                outcome: BaseException | int = await task
            except SchemaError as exc:
                outcome = exc
        return list(logs), outcome
    finally:
        await holder.close()
        await store.close()


def test_a_ddl_behind_a_long_writer_gives_way_and_is_tried_again(schemas: Schemas) -> None:
    """0017 adds a column to `events` in a transaction: it needs ACCESS EXCLUSIVE, which a writer's
    open transaction holds up."""
    name = schemas.new()
    schemas.migrate(name, to=16)
    lock = "LOCK TABLE events IN ROW EXCLUSIVE MODE"
    logs, outcome = asyncio.run(_migrate_behind(schemas.url, name, 17, lock, tries=50))
    assert outcome == 17
    waits = [e for e in logs if e["event"] == "schema.lock_wait"]
    assert len(waits) >= 2 and waits[0]["migration"] == "0017_rerun.sql", waits
    assert "lock timeout" in waits[0]["error"]
    fresh = schemas.new()
    schemas.migrate(fresh, to=17)
    assert catalog(schemas.url, name) == catalog(schemas.url, fresh)


def test_without_the_retry_the_migration_fails_and_applies_nothing(schemas: Schemas) -> None:
    name = schemas.new()
    schemas.migrate(name, to=16)
    before = catalog(schemas.url, name)
    lock = "LOCK TABLE events IN ROW EXCLUSIVE MODE"
    _, outcome = asyncio.run(_migrate_behind(schemas.url, name, 17, lock, tries=1))
    assert isinstance(outcome, SchemaError), outcome
    assert "0017_rerun.sql gave way 1 times" in str(outcome) and "pg_stat_activity" in str(outcome)
    assert catalog(schemas.url, name) == before


def test_a_concurrent_index_build_that_gave_way_is_built_again(schemas: Schemas) -> None:
    """0020 builds its indexes CONCURRENTLY, outside a transaction: a build waits for the
    transactions of the database that hold an older snapshot, gives way, leaves an invalid index,
    which the next try drops and builds again."""
    name = schemas.new()
    schemas.migrate(name, to=19)
    with psycopg.connect(schemas.url, autocommit=True, options=f"-c search_path={name}") as c:
        # A run: on a schema with none, the indexes would be built at once, in a transaction.
        one = b"INSERT INTO runs (id, workflow, queue, input, input_hash) VALUES ('r', 'w', 'q', '{}', 'h')"
        c.execute(one)
    logs, outcome = asyncio.run(_migrate_behind(schemas.url, name, 20, "SELECT 1", tries=50))
    assert outcome == 20
    events = [(e["event"], e.get("index")) for e in logs if e["event"].startswith("schema.")]
    assert ("schema.invalid_index_dropped", "runs_by_created") in events, events
    assert step("0020").transactional is False
    valid = "SELECT bool_and(indisvalid) FROM pg_index WHERE indrelid = %s::regclass"
    with psycopg.connect(schemas.url, autocommit=True) as c:
        assert c.execute(valid.encode(), (f'"{name}".runs',)).fetchone() == (True,)
    fresh = schemas.new()
    schemas.migrate(fresh, to=20)
    assert catalog(schemas.url, name) == catalog(schemas.url, fresh)


def _record(url: str, schema: str, version: int, oldest: int) -> None:
    with psycopg.connect(url, autocommit=True) as c:
        c.execute(
            f"UPDATE \"{schema}\".outlast_meta SET value = CASE key WHEN 'schema_version' THEN %s "
            "ELSE %s END WHERE key IN ('schema_version', 'oldest_code')".encode(),
            (str(version), str(oldest)),
        )


def _check(url: str, schema: str) -> None:
    async def go() -> None:
        store = Store(url, schema)
        await store.open()  # checks the schema
        await store.close()

    asyncio.run(go())


def test_a_newer_schema_that_only_expanded_is_accepted_and_a_contracted_one_refused(schemas: Schemas) -> None:
    name = schemas.new()
    schemas.migrate(name)
    _record(schemas.url, name, SCHEMA_VERSION + 2, SCHEMA_VERSION)  # two expand migrations ahead
    with capture_logs() as logs:
        _check(schemas.url, name)
        assert schemas.migrate(name) == SCHEMA_VERSION + 2  # nothing to do, nothing refused
    seen = [e for e in logs if e["event"] == "schema.newer_compatible"]
    assert seen and seen[0]["found"] == SCHEMA_VERSION + 2 and seen[0]["knows"] == SCHEMA_VERSION

    _record(schemas.url, name, SCHEMA_VERSION + 2, SCHEMA_VERSION + 1)  # the first one contracted
    for attempt in (lambda: _check(schemas.url, name), lambda: schemas.migrate(name)):
        with pytest.raises(SchemaError) as refused:
            attempt()
        said = str(refused.value)
        assert f"version {SCHEMA_VERSION + 2}, newer than this outlast knows ({SCHEMA_VERSION})" in said
        assert f"knows version {SCHEMA_VERSION + 1} or newer" in said and "upgrade outlast" in said


def test_a_worker_starts_on_a_newer_expanded_schema_not_on_a_contracted_one(world: World) -> None:
    _record(world.database_url, world.schema, SCHEMA_VERSION + 1, SCHEMA_VERSION)
    worker = world.worker()
    with Client(settings=world.settings()) as c:
        run = c.enqueue("echo", {"x": 1})
        assert c.wait(run.id, timeout=30).state == "succeeded"
    worker.send_signal(signal.SIGTERM)
    assert worker.wait(30) == 0
    _record(world.database_url, world.schema, SCHEMA_VERSION + 1, SCHEMA_VERSION + 1)
    refused = world.worker()
    assert refused.wait(30) != 0
    assert "contracted since" in world.logs()


def test_a_contract_waits_for_the_older_workers_to_go(world: World) -> None:
    live = (
        "INSERT INTO workers (name, host, pid, queues, concurrency, lease_ttl) "
        "VALUES (%s, 'h', 1, '{q}', 1, 9)"
    )
    world.sql(live, "old-worker")  # code from before 0022: it does not say
    world.sql(live, "new-worker")
    world.sql("INSERT INTO worker_code (name, code_version) VALUES ('new-worker', %s)", SCHEMA_VERSION + 1)
    ahead = SCHEMA_VERSION + 1
    contract = Migration(ahead, f"{ahead:04d}_drop.sql", "", expand=False, code_from=ahead)
    expand = Migration(ahead, f"{ahead:04d}_add.sql", "")

    async def refuse(m: Migration) -> None:
        store = Store(world.database_url, world.schema)
        await store.open()
        try:
            async with store._conn() as conn:
                await store._refuse_older_workers(conn, m)
        finally:
            await store.close()

    asyncio.run(refuse(expand))  # an expand migration never waits for anyone
    with pytest.raises(SchemaError, match=r"contracts the schema .* workers do: old-worker \(knows fewer"):
        asyncio.run(refuse(contract))
    world.sql("UPDATE workers SET last_beat = now() - interval '1 hour' WHERE name = 'old-worker'")
    asyncio.run(refuse(contract))  # gone (no beat for three leases): nothing holds the contract back


@pytest.mark.parametrize("prepare", ["on", "off"])
async def test_a_column_added_under_a_running_store_is_no_failure(world: World, prepare: str) -> None:
    """A statement that returns a table's every column (``SELECT *``, ``RETURNING *``), prepared
    before a migration adds a column, fails with "cached plan must not change result type": the
    pooled reads and the writer prepare it afresh and go on. Unprepared (``off``, as through a
    transaction pooler), the writer's rows are made for the new width."""
    store = Store(world.database_url, world.schema, prepare=prepare)
    await store.open()

    async def serve(k: int) -> None:
        run = {"workflow": "w", "queue": "default", "input": {}, "input_hash": "h", "program": None}
        await store.runs.insert_run(id=f"r{k}", deadline_in=None, **run)
        assert await store.runs.get_run(f"r{k}") is not None
        assert await store.leases.claim(f"r{k}", "me", 30, {"w": "v1"}) is not None

    try:
        for k in range(8):  # psycopg prepares a read at its fifth use; the writer at its first
            await serve(k)
        world.sql("ALTER TABLE runs ADD COLUMN added_by_a_migration integer")
        for k in range(8, 10):
            await serve(k)
    finally:
        await store.close()
