"""The schema: migrations (``migrations/NNNN_name.sql``), applied in order, and the check that
the database's schema is the one this code needs."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import resources

from psycopg import sql

from outlast.errors import SchemaError
from outlast.store.base import Base, Conn
from outlast.store.connection import redact
from outlast.store.queries import Q


@dataclass(frozen=True)
class Migration:
    """One step of the schema: ``migrations/NNNN_name.sql``, applied once, in order."""

    version: int
    name: str
    sql: str


def _migrations() -> tuple[Migration, ...]:
    found = []
    for f in resources.files("outlast.store").joinpath("migrations").iterdir():
        if not f.name.endswith(".sql"):
            continue
        m = re.fullmatch(r"(\d{4})_[a-z0-9_]+\.sql", f.name)
        if not m:
            raise SchemaError(f"migration file {f.name} is not named NNNN_name.sql")
        found.append(Migration(int(m[1]), f.name, f.read_text()))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise SchemaError(
            f"migrations must be numbered 0001, 0002, ... without gaps: {[m.name for m in found]}"
        )
    return tuple(found)


MIGRATIONS = _migrations()
SCHEMA_VERSION = MIGRATIONS[-1].version  # the newest migration's number


def schema_sql() -> str:
    """The whole schema as one script, every migration in order: for reading; ``migrate``
    applies them one at a time."""
    return "\n".join(f"-- {m.name}\n{m.sql}" for m in MIGRATIONS)


class Migrations(Base):
    """Bring the schema up to date, and refuse one missing, older or newer than this code."""

    async def migrate(self, to: int = SCHEMA_VERSION) -> int:
        """Bring the schema up to version ``to`` (tests stop short of the newest): each missing
        migration is applied in a transaction of its own, which also records its number.
        Returns the version now recorded. Re-running changes nothing; two at once are safe
        (each step holds the advisory lock and re-reads the version under it)."""
        if not 0 <= to <= SCHEMA_VERSION:
            raise ValueError(f"no schema version {to}: this outlast knows 0 to {SCHEMA_VERSION}")
        schema = sql.Identifier(self.schema)
        async with self._conn() as conn:
            while True:
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(hashtext('outlast-migrate'))")
                    await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
                    await conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(schema))
                    # A database made by the old schema.sql recorded its version the same way.
                    found = await self._refuse_newer(conn) or 0
                    if found >= to:
                        return found
                    step = MIGRATIONS[found]
                    await conn.execute(step.sql.encode())
                    await conn.execute(
                        "INSERT INTO outlast_meta (key, value) VALUES ('schema_version', %s)"
                        " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                        (str(step.version),),
                    )

    async def _refuse_newer(self, conn: Conn) -> int | None:
        exists = await (await conn.execute("SELECT to_regclass('outlast_meta') IS NOT NULL AS ok")).fetchone()
        if not exists or not exists["ok"]:
            return None
        row = await (await conn.execute(Q["schema_version"])).fetchone()
        found = int(row["value"]) if row else None
        if found is not None and found > SCHEMA_VERSION:
            raise SchemaError(
                f"the database schema '{self.schema}' is version {found}, newer than this "
                f"outlast knows ({SCHEMA_VERSION}); upgrade outlast on this machine"
            )
        return found

    async def check_schema(self) -> None:
        async with self._conn() as conn, self._scoped(conn):
            found = await self._refuse_newer(conn)
        if found is None:
            raise SchemaError(
                f"no outlast schema '{self.schema}' in {redact(self.url)}; run: outlast migrate"
            )
        if found < SCHEMA_VERSION:
            raise SchemaError(
                f"the database schema '{self.schema}' is version {found}, older than this outlast "
                f"needs ({SCHEMA_VERSION}); run: outlast migrate"
            )
