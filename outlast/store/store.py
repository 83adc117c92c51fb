"""Postgres access: the only place that speaks SQL. Driver errors are wrapped here."""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncIterator, Sequence
from datetime import datetime
from importlib import resources
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import psycopg
import psycopg_pool
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from outlast.errors import SchemaError, ServiceUnavailable
from outlast.journal import Entry
from outlast.model import Run
from outlast.store.queries import Q
from outlast.store.writer import Writer

SCHEMA_VERSION = 1
Conn = psycopg.AsyncConnection[dict[str, Any]]


def redact(url: str) -> str:
    """The URL without its password, for messages."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def schema_sql() -> str:
    """The one schema: inside the wheel, or at the top of the source tree."""
    packaged = resources.files("outlast").joinpath("schema.sql")
    if packaged.is_file():
        return packaged.read_text()
    return (Path(__file__).resolve().parents[2] / "schema.sql").read_text()


class Store:
    """One process's access to Postgres: a small pool for reads and one shared-commit writer."""

    def __init__(self, url: str, schema: str = "outlast", max_size: int = 8) -> None:
        self.url = url
        self.schema = schema
        self._pool = psycopg_pool.AsyncConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            open=False,
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "options": f"-c search_path={schema}",
            },
        )
        self.writer = Writer(self._connect)
        self.reads = 0  # read round trips, for the cost model's measurements

    async def _connect(self) -> Conn:
        try:
            return await psycopg.AsyncConnection.connect(
                self.url,
                connect_timeout=5,
                autocommit=True,
                row_factory=dict_row,
                options=f"-c search_path={self.schema}",
            )
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc) from exc

    def _unavailable(self, exc: Exception) -> ServiceUnavailable:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return ServiceUnavailable(f"cannot reach Postgres at {redact(self.url)}: {first}")

    async def open(self, check: bool = True) -> None:
        """Connect; with ``check``, refuse a schema that is missing or newer than this code."""
        probe = await self._connect()  # fails fast, with the driver's reason, if unreachable
        await probe.close()
        try:
            await self._pool.open(wait=True, timeout=10)
        except psycopg_pool.PoolTimeout as exc:
            raise self._unavailable(exc) from exc
        if check:
            await self.check_schema()

    async def close(self) -> None:
        await self.writer.close()
        await self._pool.close()

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[Conn]:
        try:
            async with self._pool.connection() as conn:
                yield cast(Conn, conn)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout) as exc:
            raise self._unavailable(exc) from exc

    async def _rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        self.reads += 1
        async with self._conn() as conn:
            cur = await conn.execute(Q[name], params)
            return await cur.fetchall() if cur.description else []

    async def _write(self, name: str, **params: Any) -> list[dict[str, Any]]:
        try:
            return await self.writer.write(Q[name], params)
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc) from exc

    # -- schema -------------------------------------------------------------------------

    async def migrate(self) -> int:
        """Apply schema.sql idempotently inside the schema; return the version now recorded."""
        async with self._conn() as conn, conn.transaction():
            await conn.execute("SELECT pg_advisory_xact_lock(hashtext('outlast-migrate'))")
            await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(self.schema)))
            await conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(sql.Identifier(self.schema)))
            await self._refuse_newer(conn)
            await conn.execute(schema_sql().encode())
        return SCHEMA_VERSION

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
        async with self._conn() as conn:
            found = await self._refuse_newer(conn)
        if found is None:
            raise SchemaError(
                f"no outlast schema '{self.schema}' in {redact(self.url)}; run: outlast migrate"
            )

    # -- runs -----------------------------------------------------------------------------

    async def insert_run(
        self,
        *,
        id: str,
        workflow: str,
        queue: str,
        input: dict[str, Any],
        input_hash: str,
        program: str | None,
        deadline_in: float | None,
        parent_id: str | None = None,
    ) -> tuple[Run, bool]:
        """Insert a queued run; if the id exists, return the existing one and False."""
        rows = await self._write(
            "insert_run",
            id=id,
            workflow=workflow,
            queue=queue,
            input=Jsonb(input),
            input_hash=input_hash,
            program=program,
            deadline_in=deadline_in,
            parent_id=parent_id,
        )
        if rows:
            await self.event(id, "enqueued", {"workflow": workflow, "queue": queue})
            return Run.from_row(rows[0]), True
        existing = await self.get_run(id)
        assert existing is not None
        return existing, False

    async def get_run(self, run_id: str) -> Run | None:
        rows = await self._rows("get_run", id=run_id)
        return Run.from_row(rows[0]) if rows else None

    async def list_runs(self, state: str | None, limit: int) -> list[Run]:
        return [Run.from_row(r) for r in await self._rows("list_runs", state=state, limit=limit)]

    async def event(self, run_id: str, kind: str, detail: dict[str, Any]) -> None:
        await self._write("add_event", run_id=run_id, kind=kind, detail=Jsonb(detail))

    async def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        return await self._rows("events", run_id=run_id, after=after)

    # -- leases ---------------------------------------------------------------------------

    async def claim(self, run_id: str, worker: str, ttl: float, programs: dict[str, str]) -> Run | None:
        """Take the run's lease (a new fencing token), or None if it is not to be taken."""
        rows = await self._write("claim", id=run_id, worker=worker, ttl=ttl, programs=json.dumps(programs))
        return Run.from_row(rows[0]) if rows else None

    async def renew(self, held: dict[str, int], ttl: float) -> set[str]:
        """Renew every lease in ``held`` (run id -> token) at once; return those still held."""
        if not held:
            return set()
        ids = list(held)
        rows = await self._rows("renew", ids=ids, tokens=[held[i] for i in ids], ttl=ttl)
        return {r["id"] for r in rows}

    async def finish(
        self,
        run_id: str,
        token: int,
        state: str,
        *,
        result: Any = None,
        error: dict[str, Any] | None = None,
        reason: str | None = None,
    ) -> bool:
        """Commit a final state (fenced). False if the token is stale."""
        rows = await self._write(
            "finish",
            id=run_id,
            token=token,
            state=state,
            reason=reason,
            result=None if result is None else Jsonb(result),
            error=None if error is None else Jsonb(error),
            detail=Jsonb({"reason": reason} if reason else {}),
        )
        return bool(rows)

    async def wait(
        self, run_id: str, token: int, reason: str, message: str, wake_at: datetime | None = None
    ) -> bool:
        """Give up the lease and wait durably with a reason (fenced)."""
        rows = await self._write(
            "wait",
            id=run_id,
            token=token,
            reason=reason,
            wake_at=wake_at,
            detail=Jsonb({"reason": reason, "message": message}),
        )
        return bool(rows)

    async def refuse_program(self, run_id: str, program: str | None, message: str) -> bool:
        rows = await self._write(
            "refuse_unclaimed",
            id=run_id,
            program=program,
            detail=Jsonb({"reason": "program_changed", "message": message}),
        )
        return bool(rows)

    async def release(self, run_id: str, token: int, why: str) -> bool:
        rows = await self._write("release", id=run_id, token=token, detail=Jsonb({"why": why}))
        return bool(rows)

    async def requeue(self, run_id: str, accept_program: bool, detail: dict[str, Any]) -> bool:
        rows = await self._write("requeue", id=run_id, accept_program=accept_program, detail=Jsonb(detail))
        return bool(rows)

    async def due(self, after: float, limit: int = 200) -> list[tuple[str, str]]:
        rows = await self._rows("due", after=after, limit=limit)
        return [(r["id"], r["queue"]) for r in rows]

    # -- journal --------------------------------------------------------------------------

    async def journal(self, run_id: str) -> list[Entry]:
        rows = await self._rows("journal", run_id=run_id)
        return [Entry(r["seq"], r["kind"], r["op_id"], r["body"], r["hash"]) for r in rows]

    async def append(self, run_id: str, token: int, entry: Entry) -> bool:
        """Append one journal entry as the lease holder (fenced). False if refused."""
        rows = await self._write(
            "append",
            run_id=run_id,
            token=token,
            seq=entry.seq,
            kind=entry.kind,
            op_id=entry.op_id,
            body=entry.body,
            hash=entry.hash,
        )
        return bool(rows)

    async def append_unowned(self, run_id: str, reason: str, prev: str, entry: Entry) -> bool:
        """Append an entry to a run that waits for ``reason`` and requeue it, if nothing moved."""
        rows = await self._write(
            "append_unowned",
            run_id=run_id,
            reason=reason,
            prev=prev,
            seq=entry.seq,
            kind=entry.kind,
            op_id=entry.op_id,
            body=entry.body,
            hash=entry.hash,
        )
        return bool(rows)

    async def execute(self, statement: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run a statement of a caller's own (tests and examples only)."""
        async with self._conn() as conn:
            cur = await conn.execute(statement.encode(), params)
            return await cur.fetchall() if cur.description else []
