"""How the store talks to Postgres: a pool for reads, the shared-commit writer, the renewals'
and the listeners' connections; driver errors are wrapped here."""

from __future__ import annotations

import asyncio
import contextlib
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any, cast
from urllib.parse import urlsplit, urlunsplit

import psycopg
import psycopg_pool
from psycopg.rows import dict_row

from outlast.errors import ServiceUnavailable
from outlast.settings import Settings
from outlast.store.base import Base, Conn
from outlast.store.notify import MAX_LISTENERS, RunWatch, channel
from outlast.store.queries import Q
from outlast.store.writer import Writer


def redact(url: str) -> str:
    """The URL without its password (after the user, or a ``password=`` parameter), for messages;
    never raises, even on a malformed URL."""
    url = re.sub(r"(?i)\b((?:sentinel_)?password=)[^&\s]*", r"\1***", url)
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # e.g. an unclosed IPv6 bracket: hide whatever sits between user and host
        return re.sub(r"(//[^/@:]*:)[^/]*@", r"\1***@", url)
    if password is None:
        return url
    netloc = parts.netloc.replace(f":{password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


class Connection(Base):
    """One process's connections to Postgres: a small pool for reads and one shared-commit writer."""

    def __init__(
        self,
        url: str,
        schema: str = "outlast",
        max_size: int = 8,
        retry_for: float = Settings.store_retry,  # the settings' defaults, declared there once
        tenant_window: int = Settings.tenant_window,
    ) -> None:
        self.url = url
        self.schema = schema
        # A tenant's runs published and not started, per queue; its others are held (0014_fair).
        self.tenant_window = tenant_window
        # Each waiting reader listens on a connection of its own, up to MAX_LISTENERS; more poll.
        self._listen_slots = asyncio.Semaphore(MAX_LISTENERS)
        self._pool = psycopg_pool.AsyncConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            open=False,
            check=psycopg_pool.AsyncConnectionPool.check_connection,  # none stale after a restart
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "options": f"-c search_path={schema}",
            },
        )
        self.writer = Writer(self._connect, self._unavailable, retry_for)
        self._beat: Conn | None = None  # lease renewals: never queued behind reads or writes
        self.reads = 0  # read round trips, for the cost model's measurements

    async def _connect(self) -> Conn:
        """The writer's and the renewals' connection. Their statements are prepared (psycopg, after
        five uses) and keyed by run: a generic plan serves every run. Postgres would otherwise plan
        each statement that reads the partitioned journal or events afresh (a custom plan, pruned to
        one partition, looks cheaper than the generic plan over all of them), at three times the
        cost of the write itself (bench: the fenced-append limit, 3,100 -> 9,100 writes/s)."""
        try:
            return await psycopg.AsyncConnection.connect(
                self.url,
                connect_timeout=5,
                autocommit=True,
                row_factory=dict_row,
                options=f"-c search_path={self.schema} -c plan_cache_mode=force_generic_plan",
            )
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc) from exc

    async def _listener(self) -> Conn:
        """A connection of its own for LISTEN; TCP keepalives notice a silent network loss."""
        try:
            return await psycopg.AsyncConnection.connect(
                self.url,
                connect_timeout=5,
                autocommit=True,
                row_factory=dict_row,
                application_name="outlast-listen",
                options=f"-c search_path={self.schema}",
                keepalives=1,
                keepalives_idle=10,
                keepalives_interval=5,
                keepalives_count=3,
            )
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc) from exc

    @contextlib.asynccontextmanager
    async def watch(self, run_id: str, poll: float) -> AsyncIterator[RunWatch]:
        """Listen for the run's changes for as long as the block lasts (see ``RunWatch``)."""
        w = RunWatch(self._listener, run_id, channel(self.schema, run_id), poll, self._listen_slots)
        try:
            await w.start()
            yield w
        finally:
            await w.close()

    def _unavailable(self, exc: BaseException) -> ServiceUnavailable:
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
        if self._beat is not None:
            await self._beat.close()
        await self.writer.close()
        await self._pool.close()

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[Conn]:
        try:
            async with self._pool.connection() as conn:
                yield cast(Conn, conn)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout, OSError) as exc:
            raise self._unavailable(exc) from exc

    async def _rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """A read (or a write that never waits for a lock) on a pooled connection; retried a few
        times through a dropped connection, then ServiceUnavailable."""
        for attempt in range(3):
            self.reads += 1
            try:
                async with self._conn() as conn:
                    cur = await conn.execute(Q[name], params)
                    return await cur.fetchall() if cur.description else []
            except ServiceUnavailable:
                if attempt == 2:
                    raise
            except psycopg.Error as exc:
                raise self._unavailable(exc) from exc
            await asyncio.sleep(0.1 * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _write(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """A write through the shared-commit writer, ordered by the run it locks."""
        key = str(params.get("run_id") or params.get("id") or "")
        return await self.writer.write(Q[name], params, key=key)

    async def _beat_rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """A statement on the lease renewals' connection of its own: never queued behind reads,
        nor behind writes being retried. Tried once more on a fresh connection, after a restart."""
        for attempt in range(2):
            try:
                if self._beat is None or self._beat.closed:
                    self._beat = await self._connect()
                return await (await self._beat.execute(Q[name], params)).fetchall()
            except psycopg.Error as exc:
                beat, self._beat = self._beat, None
                if beat is not None:
                    await beat.close()
                if attempt:
                    raise self._unavailable(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def execute(self, statement: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run a statement of a caller's own (tests and examples only)."""
        async with self._conn() as conn:
            cur = await conn.execute(statement.encode(), params)
            return await cur.fetchall() if cur.description else []
