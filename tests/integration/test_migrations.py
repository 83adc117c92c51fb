"""Migrations: a database at any earlier version, migrated, is the same as a fresh one.

"The same" is read from the catalogs: relations, columns (type, nullability, default), indexes,
constraints, triggers, functions and the recorded version, with the schema's own name taken out.
"""

from __future__ import annotations

import asyncio
import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from outlast.errors import SchemaError
from outlast.store import SCHEMA_VERSION, Store
from outlast.store.dump import migrated, pg_dump_of, server_major
from outlast.store.steps import oldest_code
from outlast.store.store import MIGRATIONS
from tests.conftest import migrate_schema

# What the old schema.sql (applied whole, before migrations were files) made: version 4.
OLD_SCHEMA_V4 = Path(__file__).parent / "data" / "schema_v4.sql"
SCHEMA_SQL = Path(__file__).parents[2] / "schema.sql"

CATALOG = {
    "relations": """
        SELECT c.relname, c.relkind FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(s)s ORDER BY 1""",
    "columns": """
        SELECT c.relname, a.attname, format_type(a.atttypid, a.atttypmod), a.attnotnull,
               pg_get_expr(d.adbin, d.adrelid)
        FROM pg_attribute a
        JOIN pg_class c ON c.oid = a.attrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
        WHERE n.nspname = %(s)s AND c.relkind IN ('r', 'p') AND a.attnum > 0 AND NOT a.attisdropped
        ORDER BY c.relname, a.attnum""",
    "indexes": "SELECT indexname, indexdef FROM pg_indexes WHERE schemaname = %(s)s ORDER BY 1",
    "constraints": """
        SELECT c.relname, con.conname, con.contype, pg_get_constraintdef(con.oid)
        FROM pg_constraint con
        JOIN pg_class c ON c.oid = con.conrelid
        JOIN pg_namespace n ON n.oid = con.connamespace
        WHERE n.nspname = %(s)s ORDER BY 1, 2""",
    "triggers": """
        SELECT c.relname, t.tgname, pg_get_triggerdef(t.oid)
        FROM pg_trigger t
        JOIN pg_class c ON c.oid = t.tgrelid
        JOIN pg_namespace n ON n.oid = c.relnamespace
        WHERE n.nspname = %(s)s AND NOT t.tgisinternal ORDER BY 1, 2""",
    "functions": """
        SELECT p.proname, pg_get_functiondef(p.oid)
        FROM pg_proc p JOIN pg_namespace n ON n.oid = p.pronamespace
        WHERE n.nspname = %(s)s ORDER BY 1, 2""",  # 2: overloads (0029's outlast_send_message)
}


def catalog(url: str, schema: str) -> dict[str, list[tuple[Any, ...]]]:
    """Everything the schema holds but its rows (and outlast_meta's rows), names unqualified (and
    the schema a function's fixed search_path names, 0029's outlast_send, said as ``outlast``)."""

    def plain(row: tuple[Any, ...]) -> tuple[Any, ...]:
        def bare(v: str) -> str:
            return v.replace(f"{schema}.", "").replace(f"'{schema}'", "'outlast'")

        return tuple(bare(v) if isinstance(v, str) else v for v in row)

    with psycopg.connect(url, autocommit=True) as c:
        out = {
            k: [plain(r) for r in c.execute(q.encode(), {"s": schema}).fetchall()] for k, q in CATALOG.items()
        }
        out["meta"] = c.execute(
            f'SELECT key, value FROM "{schema}".outlast_meta ORDER BY 1'.encode()
        ).fetchall()
    assert out["relations"], f"schema {schema} is empty"
    return out


class Schemas:
    """Fresh, uniquely named schemas on the test server, dropped afterwards."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.made: list[str] = []

    def new(self) -> str:
        name = f"m_{uuid.uuid4().hex[:10]}"
        self.made.append(name)
        return name

    def migrate(self, schema: str, to: int = SCHEMA_VERSION) -> int:
        async def go() -> int:
            store = Store(self.url, schema)
            await store.open(check=False)
            try:
                return await store.migrate(to)
            finally:
                await store.close()

        return asyncio.run(go())

    def drop(self) -> None:
        with psycopg.connect(self.url, autocommit=True) as c:
            for name in self.made:
                c.execute(f'DROP SCHEMA IF EXISTS "{name}" CASCADE'.encode())


@pytest.fixture(scope="module")
def schemas(services: tuple[str, str]) -> Iterator[Schemas]:
    s = Schemas(services[0])
    yield s
    s.drop()


@pytest.fixture(scope="module")
def fresh(schemas: Schemas) -> dict[str, list[tuple[Any, ...]]]:
    """A schema made from nothing by one ``migrate``: what every other path must arrive at."""
    name = schemas.new()
    assert schemas.migrate(name) == SCHEMA_VERSION
    return catalog(schemas.url, name)


def test_the_version_is_the_newest_migration_file() -> None:
    assert [m.version for m in MIGRATIONS] == list(range(1, SCHEMA_VERSION + 1))
    assert all(m.name.startswith(f"{m.version:04d}_") for m in MIGRATIONS)


@pytest.mark.parametrize("k", range(SCHEMA_VERSION + 1))
def test_a_database_at_every_earlier_version_migrates_to_the_fresh_schema(
    schemas: Schemas, fresh: dict[str, list[tuple[Any, ...]]], k: int
) -> None:
    name = schemas.new()
    assert schemas.migrate(name, to=k) == k  # k = 0: an empty schema
    if k:
        meta = [("oldest_code", str(oldest_code(k))), ("schema_version", str(k))]
        assert catalog(schemas.url, name)["meta"] == meta
    assert schemas.migrate(name) == SCHEMA_VERSION
    assert catalog(schemas.url, name) == fresh


def test_a_test_world_is_the_fresh_schema(schemas: Schemas, fresh: dict[str, list[tuple[Any, ...]]]) -> None:
    """The tests' worlds are made by ``migrate_schema`` (every file in one transaction, for speed):
    the same schema, and the same recorded version, as ``migrate`` makes."""
    name = schemas.new()
    migrate_schema(schemas.url, name)
    assert catalog(schemas.url, name) == fresh
    assert schemas.migrate(name) == SCHEMA_VERSION  # nothing left to apply


def test_a_database_made_by_the_old_schema_sql_is_version_4_and_migrates_to_fresh(
    schemas: Schemas, fresh: dict[str, list[tuple[Any, ...]]]
) -> None:
    old = schemas.new()
    with psycopg.connect(schemas.url, autocommit=True) as c, c.transaction():
        c.execute(f'CREATE SCHEMA "{old}"'.encode())
        c.execute(f'SET LOCAL search_path TO "{old}"'.encode())
        c.execute(OLD_SCHEMA_V4.read_text().encode())
    before = catalog(schemas.url, old)
    assert before["meta"] == [("schema_version", "4")]
    assert schemas.migrate(old, to=4) == 4  # recognised as 4: nothing applied
    assert catalog(schemas.url, old) == before

    # Migrations 0001..0004 make exactly what the old file made (which recorded no oldest_code).
    files = schemas.new()
    assert schemas.migrate(files, to=4) == 4
    made = catalog(schemas.url, files)
    assert made.pop("meta") == [("oldest_code", "4"), ("schema_version", "4")]
    assert made == {k: v for k, v in before.items() if k != "meta"}

    assert schemas.migrate(old) == SCHEMA_VERSION
    assert catalog(schemas.url, old) == fresh


def test_rerunning_migrate_changes_nothing_even_two_at_once(
    schemas: Schemas, fresh: dict[str, list[tuple[Any, ...]]]
) -> None:
    name = schemas.new()

    async def twice_at_once() -> list[int]:
        stores = [Store(schemas.url, name) for _ in range(2)]
        for s in stores:
            await s.open(check=False)
        try:
            return list(await asyncio.gather(*(s.migrate() for s in stores)))
        finally:
            for s in stores:
                await s.close()

    assert asyncio.run(twice_at_once()) == [SCHEMA_VERSION, SCHEMA_VERSION]
    assert catalog(schemas.url, name) == fresh
    assert schemas.migrate(name) == SCHEMA_VERSION
    assert catalog(schemas.url, name) == fresh


def test_a_newer_recorded_version_is_refused_and_nothing_is_applied(schemas: Schemas) -> None:
    name = schemas.new()
    schemas.migrate(name, to=2)
    with psycopg.connect(schemas.url, autocommit=True) as c:
        c.execute(
            f'UPDATE "{name}".outlast_meta SET value = %s '
            "WHERE key IN ('schema_version', 'oldest_code')".encode(),
            (str(SCHEMA_VERSION + 1),),  # a contract this code does not know
        )
    before = catalog(schemas.url, name)
    with pytest.raises(SchemaError, match="newer than this outlast knows"):
        schemas.migrate(name)
    assert catalog(schemas.url, name) == before


def test_rows_survive_the_partitioning_of_journal_and_events(schemas: Schemas) -> None:
    """Migration 0005 moves journal and events into hash partitions: every row comes along, and
    event ids go on from the same sequence."""
    name = schemas.new()
    schemas.migrate(name, to=4)
    with psycopg.connect(schemas.url, autocommit=True) as c, c.transaction():
        c.execute(f'SET LOCAL search_path TO "{name}"'.encode())
        for i in range(40):
            c.execute(
                b"INSERT INTO runs (id, workflow, queue, input, input_hash) VALUES (%s, 'w', 'q', '{}', 'h')",
                (f"r{i}",),
            )
            c.execute(
                b"INSERT INTO journal (run_id, seq, kind, body, hash) VALUES (%s, 1, 'k', 'b', 'h')",
                (f"r{i}",),
            )
            c.execute(b"INSERT INTO events (run_id, kind) VALUES (%s, 'enqueued')", (f"r{i}",))
    assert schemas.migrate(name) == SCHEMA_VERSION
    with psycopg.connect(schemas.url, autocommit=True) as c:
        c.execute(f'SET search_path TO "{name}"'.encode())
        spread = b"SELECT count(*), count(DISTINCT tableoid) > 8 FROM journal"  # over the partitions
        assert c.execute(spread).fetchone() == (40, True)
        assert c.execute(b"SELECT count(*), max(id) FROM events").fetchone() == (40, 40)
        new = c.execute(b"INSERT INTO events (run_id, kind) VALUES ('r0', 'x') RETURNING id").fetchone()
        assert new == (41,)


def test_schema_sql_is_what_the_migrations_make(services: tuple[str, str]) -> None:
    """schema.sql, at the top of the repository, is regenerated with every migration."""
    text = SCHEMA_SQL.read_text()
    printed_by = re.search(r"as pg_dump (\d+) prints it", text)
    assert printed_by, "schema.sql lacks its generated header"
    server = server_major(services[0])
    if int(printed_by[1]) != server:  # pg_dump's output differs between majors
        pytest.skip(f"schema.sql is pg_dump {printed_by[1]}'s; this server is Postgres {server}")
    if pg_dump_of(server) is None:
        pytest.skip(f"no pg_dump of Postgres {server}: schema.sql cannot be compared")
    assert migrated(services[0]) == text, (
        "schema.sql differs from a freshly migrated schema; regenerate it: "
        "python -m outlast.store.dump > schema.sql (the embedded default)"
    )


def test_pauses_in_force_move_to_their_table_and_older_code_still_sees_them(schemas: Schemas) -> None:
    """Migration 0035 copies each pause in force (a row of outlast_meta keyed ``pause:SCOPE:TARGET``,
    as code before it wrote them) to ``pauses``, who, why and when kept; and mirrors each way what
    is written after it, so that older code, on outlast_meta, and newer code see the same pauses."""
    name = schemas.new()
    schemas.migrate(name, to=next(m.version for m in MIGRATIONS if m.name.endswith("_pauses.sql")) - 1)
    by = {"principal": "ops", "kind": "cli"}
    value = {
        "scope": "workflow",
        "target": "payouts",
        "by": by,
        "why": "incident 7",
        "at": "2026-01-02T03:04:05+00:00",
    }
    meta = b"SELECT key, value::jsonb FROM outlast_meta WHERE starts_with(key, 'pause:') ORDER BY key"
    with psycopg.connect(schemas.url, autocommit=True) as c:
        c.execute(f'SET search_path TO "{name}"'.encode())
        c.execute(
            b"INSERT INTO outlast_meta (key, value) VALUES ('pause:workflow:payouts', %s)",
            (json.dumps(value),),
        )
    assert schemas.migrate(name) == SCHEMA_VERSION
    with psycopg.connect(schemas.url, autocommit=True) as c:
        c.execute(f"SET search_path TO \"{name}\"; SET TimeZone = 'UTC'".encode())
        held = b"SELECT to_jsonb(p) FROM outlast_pauses_of('r1', 'payouts', 'q1') p ORDER BY scope"
        assert [r[0] for r in c.execute(held)] == [value]
        # older code pauses a queue, newer code a run: each is seen by the other
        c.execute(b"""INSERT INTO outlast_meta (key, value) VALUES ('pause:queue:q1', '{"scope": "queue",
                      "target": "q1", "by": null, "why": "old", "at": "2026-01-02T03:04:06+00:00"}')""")
        c.execute(
            b"INSERT INTO pauses (scope, target, why, at) VALUES ('run', 'r1', 'new', '2026-01-02T03:04:07Z')"
        )
        assert [r[0]["why"] for r in c.execute(held)] == ["old", "new", "incident 7"]
        assert [k for k, _ in c.execute(meta)] == ["pause:queue:q1", "pause:run:r1", "pause:workflow:payouts"]
        assert dict(c.execute(meta).fetchall())["pause:run:r1"]["at"] == "2026-01-02T03:04:07+00:00"
        # older code lifts the run's pause, newer code the workflow's
        c.execute(b"DELETE FROM outlast_meta WHERE key = 'pause:run:r1'")
        c.execute(b"DELETE FROM pauses WHERE scope = 'workflow'")
        assert [r[0]["why"] for r in c.execute(held)] == ["old"]
        assert [k for k, _ in c.execute(meta)] == ["pause:queue:q1"]
