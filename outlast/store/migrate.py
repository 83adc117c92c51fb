"""This module keeps the schema: migrations (``steps.py``), applied in order under load, and the
check that the database's schema is one this code may run on (docs/upgrading.md)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from functools import partial

import psycopg
import structlog
from psycopg import sql

from outlast._urls import redact
from outlast.errors import SchemaError
from outlast.store.base import Base, Conn
from outlast.store.queries import Q
from outlast.store.steps import MIGRATIONS, SCHEMA_VERSION, Migration, oldest_code, schema_sql

__all__ = ["MIGRATIONS", "SCHEMA_VERSION", "Migration", "Migrations", "schema_sql"]

log = structlog.get_logger("outlast.store")

# A DDL statement that waits for a lock holds up, behind it, every statement that wants the table:
# under load it gives way after LOCK_WAIT seconds (lock_timeout) and is tried again after a pause
# (doubling, up to MAX_PAUSE), LOCK_TRIES times in all, instead of queueing the writers behind it
# for as long as the longest transaction lasts.
LOCK_WAIT = 3.0
LOCK_TRIES = 12
MAX_PAUSE = 10.0
_GAVE_WAY = (psycopg.errors.LockNotAvailable, psycopg.errors.DeadlockDetected)
# The schema's migrate lock, asked for again every ASK seconds until given, outside a transaction:
# a waiter that waited in a statement, or in a transaction, would hold a snapshot, which a
# concurrent index build waits for (a build under the lock, waiting for the migrate waiting for the
# lock: neither would go on).
_TRY_LOCK = "SELECT pg_try_advisory_xact_lock(hashtext(%(key)s)) AS ok"
_TRY_SESSION_LOCK = "SELECT pg_try_advisory_lock(hashtext(%(key)s)) AS ok"
_UNLOCK = "SELECT pg_advisory_unlock(hashtext(%(key)s))"
ASK = 0.1


class Migrations(Base):
    """``Migrations`` brings the schema up to date, and refuses one missing, older than this code,
    or newer and not declared compatible with it."""

    async def migrate(
        self, to: int = SCHEMA_VERSION, lock_wait: float = LOCK_WAIT, tries: int = LOCK_TRIES
    ) -> int:
        """Bring the schema up to version ``to`` (tests stop short of the newest): each missing
        migration is applied in a transaction of its own, which also records its number (one
        declared ``transaction: none``, statement by statement). Returns the version now recorded.
        Re-running changes nothing; two at once are safe (the schema's advisory lock is held
        throughout, and the version read under it; through a transaction pooler, each step takes it
        for its transaction). A statement that waits ``lock_wait`` seconds for a lock gives way and
        is tried again, ``tries`` times in all (``schema.lock_wait``)."""
        if not 0 <= to <= SCHEMA_VERSION:
            raise ValueError(f"no schema version {to}: this outlast knows 0 to {SCHEMA_VERSION}")
        session = self.pooler != "transaction"  # a session lock would stay on a pooled server connection
        async with self._conn() as conn:
            if session:
                await self._lock(conn, _TRY_SESSION_LOCK)
            try:
                while True:
                    found = await self._version(conn, session)
                    if found >= to:
                        return found
                    step = MIGRATIONS[found]
                    # CONCURRENTLY only where it is needed and can be: runs to keep writing, a session
                    if step.transactional or not session or not await self._has_runs(conn):
                        attempt = partial(self._in_transaction, conn, step, lock_wait, session)
                        await self._giving_way(step, attempt, tries)
                    else:
                        await self._outside_transaction(conn, step, lock_wait, tries)
            finally:
                if session:
                    await conn.execute(_UNLOCK, self._key())

    async def _has_runs(self, conn: Conn) -> bool:
        """Whether the schema holds a run (else a concurrent build would only wait, for nothing)."""
        async with conn.transaction():
            await self._in_schema(conn, local=True)
            row = await (await conn.execute(Q["has_runs"])).fetchone()
        return bool(row and row["yes"])

    def _key(self) -> dict[str, str]:
        return {"key": f"outlast-migrate:{self.schema}"}

    async def _lock(self, conn: Conn, ask: str = _TRY_LOCK) -> None:
        """This schema's migrate lock: for the transaction, or (``_TRY_SESSION_LOCK``) until
        ``_UNLOCK``."""
        while True:
            got = await (await conn.execute(ask, self._key())).fetchone()
            if got and got["ok"]:
                return
            await asyncio.sleep(ASK)

    async def _version(self, conn: Conn, session: bool) -> int:
        """The recorded version (0: none yet), read under the advisory lock."""
        async with conn.transaction():
            if not session:
                await self._lock(conn)
            await self._in_schema(conn, local=True)
            return await self._refuse_newer(conn) or 0

    async def _in_schema(self, conn: Conn, local: bool) -> None:
        schema = sql.Identifier(self.schema)
        await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
        how = sql.SQL("SET LOCAL search_path TO {}" if local else "SET search_path TO {}")
        await conn.execute(how.format(schema))

    async def _in_transaction(self, conn: Conn, step: Migration, lock_wait: float, session: bool) -> None:
        """One migration and its record in one transaction, under the advisory lock (waited for
        without a bound: another migrate of the schema), its statements bounded by ``lock_wait``."""
        async with conn.transaction():
            if not session:
                await self._lock(conn)
            await self._in_schema(conn, local=True)
            if (await self._refuse_newer(conn) or 0) >= step.version:
                return  # another migrate applied it meanwhile
            await self._refuse_older_workers(conn, step)
            await conn.execute(Q["lock_timeout"], {"ms": str(int(lock_wait * 1000)), "local": True})
            await conn.execute((step.sql if step.transactional else step.in_one_transaction()).encode())
            await self._record(conn, step)

    async def _outside_transaction(self, conn: Conn, step: Migration, lock_wait: float, tries: int) -> None:
        """A ``transaction: none`` migration: its statements one at a time (under the session's
        advisory lock), each giving way on a lock as a transaction does; a concurrent index build
        left invalid (by an earlier try, or a migrate that died) is dropped and built again.
        Through a transaction pooler (no session to hold the lock, nor to set the schema outside a
        transaction), or on a schema with no run yet, it runs in one transaction instead, without
        CONCURRENTLY."""
        try:
            await self._in_schema(conn, local=False)
            await self._refuse_older_workers(conn, step)
            await conn.execute(Q["lock_timeout"], {"ms": str(int(lock_wait * 1000)), "local": False})
            for statement in step.statements():
                await self._giving_way(step, partial(self._concurrently, conn, step, statement), tries)
            async with conn.transaction():
                await self._record(conn, step)
        finally:
            await conn.execute("RESET lock_timeout")
            await conn.execute("RESET search_path")

    async def _concurrently(self, conn: Conn, step: Migration, statement: str) -> None:
        """One statement of a ``transaction: none`` migration. Before ``CREATE INDEX CONCURRENTLY
        IF NOT EXISTS name``, an invalid index of that name (a build that gave way or died) would be
        taken for done: it is dropped first."""
        words = statement.split()
        if words[:6] == ["CREATE", "INDEX", "CONCURRENTLY", "IF", "NOT", "EXISTS"]:
            index = words[6]
            if await (await conn.execute(Q["invalid_index"], {"index": index})).fetchone():
                log.warning("schema.invalid_index_dropped", migration=step.name, index=index)
                drop = sql.SQL("DROP INDEX CONCURRENTLY IF EXISTS {}").format(sql.Identifier(index))
                await conn.execute(drop)
        await conn.execute(statement.encode())

    async def _giving_way(self, step: Migration, attempt: Callable[[], Awaitable[None]], tries: int) -> None:
        """``attempt()``, tried again after a pause each time it gives way on a lock (or is chosen
        as a deadlock's victim), ``tries`` times in all."""
        pause = 0.5
        for k in range(1, tries + 1):
            try:
                return await attempt()
            except _GAVE_WAY as exc:
                if k == tries:
                    raise SchemaError(
                        f"migration {step.name} gave way {tries} times to a lock of schema '{self.schema}' "
                        f"({str(exc).splitlines()[0]}): a transaction holds it for longer (pg_stat_activity, "
                        "pg_locks); run outlast migrate again once it has ended (nothing of that statement "
                        "was applied)"
                    ) from exc
                log.warning(
                    "schema.lock_wait", migration=step.name, attempt=k, attempts=tries, retry_in=pause,
                    error=str(exc).splitlines()[0],
                )  # fmt: skip
                await asyncio.sleep(pause)
                pause = min(pause * 2, MAX_PAUSE)

    async def _record(self, conn: Conn, step: Migration) -> None:
        """The version now applied, and the oldest code that may run on it (``oldest_code``)."""
        oldest = str(oldest_code(step.version))
        await conn.execute(Q["record_version"], {"version": str(step.version), "oldest": oldest})

    async def _refuse_older_workers(self, conn: Conn, step: Migration) -> None:
        """A contract is not applied while live workers run code older than it allows: they would
        fail on it. (Workers say which version their code knows from 0022 on; before, nothing.)"""
        if step.expand or not (await (await conn.execute(Q["workers_say_code"])).fetchall()):
            return
        older = await (await conn.execute(Q["older_workers"], {"needs": step.code_from})).fetchall()
        if older:
            named = ", ".join(f"{w['name']} (knows {w['code_version'] or 'fewer than 22'})" for w in older)
            raise SchemaError(
                f"migration {step.name} contracts the schema '{self.schema}': code that knows fewer than "
                f"{step.code_from} migrations must not run on it, and live workers do: {named}. Stop them "
                "(SIGTERM hands their runs over), start workers of this outlast, then run outlast migrate "
                "again (docs/upgrading.md)"
            )

    async def _refuse_newer(self, conn: Conn) -> int | None:
        """The recorded version (None: no schema); refused if newer than this code and not declared
        compatible with it."""
        exists = await (await conn.execute("SELECT to_regclass('outlast_meta') IS NOT NULL AS ok")).fetchone()
        if not exists or not exists["ok"]:
            return None
        meta = {r["key"]: r["value"] for r in await (await conn.execute(Q["schema_version"])).fetchall()}
        if "schema_version" not in meta:
            return None
        found = int(meta["schema_version"])
        if found > SCHEMA_VERSION:
            oldest = int(meta.get("oldest_code") or found)  # not said: as if a contract
            if oldest > SCHEMA_VERSION:
                raise SchemaError(
                    f"the database schema '{self.schema}' is version {found}, newer than this outlast "
                    f"knows ({SCHEMA_VERSION}), and contracted since: only code that knows version "
                    f"{oldest} or newer runs on it; upgrade outlast on this machine (docs/upgrading.md)"
                )
            log.info(
                "schema.newer_compatible", schema=self.schema, found=found, knows=SCHEMA_VERSION,
                oldest_code=oldest,
            )  # fmt: skip
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
