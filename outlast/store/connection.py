"""The store talks to Postgres through these: a pool for reads, the shared-commit writer, the renewals'
and the listeners' connections; driver errors are wrapped here."""

from __future__ import annotations

import asyncio
import contextlib
import select
import weakref
from collections.abc import AsyncIterator, Sequence
from typing import Any, Self, cast

import psycopg
import psycopg_pool
from psycopg.rows import dict_row

from outlast._objects import S3Objects
from outlast._payloads import ObjectStore
from outlast._urls import redact
from outlast.errors import ServiceUnavailable
from outlast.settings import Settings
from outlast.store.base import Base, Conn
from outlast.store.listener import Listener, SharedWatch
from outlast.store.notify import MAX_LISTENERS, RunWatch, Watch, channel, open_listening
from outlast.store.queries import Q
from outlast.store.reach import too_old, unreachable
from outlast.store.wire import Wire
from outlast.store.writer import Writer

# Behind a pooler, what a startup option set for the session is set in each transaction instead
# (docs/pgbouncer.md): the first statement of the same Sync, local to the transaction.
_IN_SCHEMA = "SELECT set_config('search_path', %(schema)s, true)"
# The writer's also names the server process and the transaction's start, for ``Writer._bury``;
# with prepared statements, it asks for generic plans, as the direct connection's startup option
# does (unnamed statements are planned at each use: a generic plan then costs more, not less).
_WRITER_PRELUDE = (
    "SELECT pg_backend_pid() AS pid, now()::text AS began, set_config('search_path', %(schema)s, true)"
)
_GENERIC = ", set_config('plan_cache_mode', 'force_generic_plan', true)"


class Connection(Base):
    """``Connection`` holds one process's connections to Postgres: a small pool for reads and one
    shared-commit writer."""

    def __init__(
        self,
        url: str,
        schema: str = "outlast",
        max_size: int = 8,
        retry_for: float = Settings.store_retry,  # the settings' defaults, declared there once
        in_flight: int = Settings.writer_in_flight,
        tenant_window: int = Settings.tenant_window,
        pooler: str = Settings.pg_pooler,
        prepare: str = Settings.pg_prepare,
        listen_url: str | None = Settings.listen_url,
        shared_listening: bool = False,
        objects: ObjectStore | None = None,
    ) -> None:
        self.url = url
        self.schema = schema
        self.objects = objects  # where payloads' bytes are, if not in their rows (OUTLAST_PAYLOAD_STORE)
        # Through a pooler (docs/pgbouncer.md) no startup option reaches the server: the schema and
        # the writer's plans are set in each transaction; without preparation (transaction pooling
        # before PgBouncer 1.21) every statement goes unnamed; LISTEN needs a session of its own.
        self.pooler = pooler
        self.prepare = prepare == "on" or (prepare == "auto" and pooler != "transaction")
        self.listen_url = listen_url or (None if pooler == "transaction" else url)
        self._wires: weakref.WeakKeyDictionary[Conn, Wire] = weakref.WeakKeyDictionary()
        # A tenant's runs published and not started, per queue; its others are held (0014_fair).
        self.tenant_window = tenant_window
        # Each waiting reader listens on a connection of its own, up to MAX_LISTENERS; more poll.
        # With ``shared_listening`` (the dashboard's), every reader listens on one connection.
        self._listen_slots = asyncio.Semaphore(MAX_LISTENERS)
        self._shared = Listener(self._listener) if shared_listening else None
        self._pool = psycopg_pool.AsyncConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            open=False,
            check=_check,  # none stale after a restart
            kwargs={"autocommit": True, "row_factory": dict_row, **self._startup(f"-c search_path={schema}")},
        )
        prelude = (_WRITER_PRELUDE + (_GENERIC if self.prepare else ""), {"schema": schema})
        self.writer = Writer(
            self._connect,
            self._unavailable,
            retry_for,
            make_wire=lambda c: Wire(c, self.prepare, prelude if pooler != "none" else None),
            pooled=pooler != "none",
            in_flight=in_flight,
        )
        self._beat: Conn | None = None  # lease renewals: never queued behind reads or writes
        self.reads = 0  # read round trips, for the cost model's measurements

    @classmethod
    def from_settings(cls, s: Settings, max_size: int = 4, shared_listening: bool = False) -> Self:
        """The store a worker or a client of these settings uses."""
        assert s.database_url
        return cls(
            s.database_url,
            s.schema,
            max_size=max_size,
            retry_for=s.store_retry,
            in_flight=s.writer_in_flight,
            tenant_window=s.tenant_window,
            pooler=s.pg_pooler,
            prepare=s.pg_prepare,
            listen_url=s.listen_url,
            shared_listening=shared_listening,
            objects=S3Objects(s.payload_store) if s.payload_store else None,
        )

    def _startup(self, options: str) -> dict[str, Any]:
        """The connection's arguments: ``options`` straight to the server, or none through a pooler
        (which refuses them), and no psycopg preparation where it cannot last."""
        if self.pooler == "none":
            return {"options": options}
        return {} if self.prepare else {"prepare_threshold": None}

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
                **self._startup(f"-c search_path={self.schema} -c plan_cache_mode=force_generic_plan"),
            )
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc) from exc

    async def _listener(self) -> Conn:
        """A connection of its own for LISTEN (``notify.open_listening``)."""
        if self.listen_url is None:
            raise ServiceUnavailable("no LISTEN through a transaction pooler: set OUTLAST_LISTEN_URL")
        direct = self.listen_url != self.url or self.pooler == "none"
        try:
            return await open_listening(self.listen_url, self.schema, direct, _IN_SCHEMA)
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc, self.listen_url) from exc

    def listener(self) -> Listener:
        """A ``Listener`` of its own (a worker's lingering receives'), connected when first joined."""
        return Listener(self._listener)

    @property
    def wakeups(self) -> str:
        """How a waiting client learns of a run's change, in words (``outlast health``)."""
        if self.listen_url is None:
            return "wake-ups: polling (a transaction pooler, and no OUTLAST_LISTEN_URL)"
        if self.listen_url != self.url:
            return f"wake-ups: LISTEN on OUTLAST_LISTEN_URL ({redact(self.listen_url)})"
        return "wake-ups: LISTEN on the database URL"

    async def check_listen(self) -> str:
        """``wakeups``, once a listening connection could be opened (else ServiceUnavailable)."""
        if self.listen_url is not None:
            await (await self._listener()).close()
        return self.wakeups

    @contextlib.asynccontextmanager
    async def watch(self, run_id: str, poll: float) -> AsyncIterator[Watch]:
        """Listen for the run's changes for as long as the block lasts (see ``Watch``)."""
        name = channel(self.schema, run_id)
        w: Watch
        if self._shared is not None:
            w = SharedWatch(self._shared, run_id, name, poll)
        else:
            w = RunWatch(self._listener, run_id, name, poll, self._listen_slots)
        try:
            await w.start()
            yield w
        finally:
            await w.close()

    def _unavailable(self, exc: BaseException, url: str | None = None) -> ServiceUnavailable:
        return unreachable(exc, url or self.url)

    async def open(self, check: bool = True) -> None:
        """Connect; with ``check``, refuse a schema that is missing or newer than this code."""
        probe = await self._connect()  # fails fast, with the driver's reason, if unreachable
        version = probe.info.server_version
        await probe.close()
        if old := too_old(version, self.url):
            raise old
        try:
            await self._pool.open(wait=True, timeout=10)
        except psycopg_pool.PoolTimeout as exc:
            raise self._unavailable(exc) from exc
        if check:
            await self.check_schema()

    def hurry(self) -> None:
        """A write that fails from now on fails at once, without retries (a stopping worker past
        its grace period: what it cannot write is left to the leases)."""
        self.writer.hurry()

    async def close(self) -> None:
        if self._shared is not None:
            await self._shared.close()
        if self._beat is not None:
            await self._beat.close()
        await self.writer.close()
        await self._pool.close(timeout=0.5)  # not psycopg_pool's 5 s: a worker may hang connecting

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[Conn]:
        try:
            async with self._pool.connection() as conn:
                yield cast(Conn, conn)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout, OSError) as exc:
            raise self._unavailable(exc) from exc

    @contextlib.asynccontextmanager
    async def _scoped(self, conn: Conn) -> AsyncIterator[None]:
        """The block's statements in the store's schema: through a pooler, in one transaction
        that sets it (directly, the connection's startup option did)."""
        if self.pooler == "none":
            yield
            return
        async with conn.transaction():
            await conn.execute(_IN_SCHEMA, {"schema": self.schema})
            yield

    async def _fetch(self, conn: Conn, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """One statement's rows; once more after "cached plan must not change result type" (a
        migration added a column the statement returns, docs/upgrading.md), prepared afresh."""
        try:
            return await self._fetch_once(conn, sql, params)
        except psycopg.errors.FeatureNotSupported:
            if self.pooler == "none":  # psycopg's prepared statements (the wire forgot its own)
                await conn.execute("DEALLOCATE ALL")
            return await self._fetch_once(conn, sql, params)

    async def _fetch_once(self, conn: Conn, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Through a pooler, one implicit transaction in one round trip: the schema set, then the
        statement, one Sync (``Wire``)."""
        if self.pooler == "none":
            cur = await conn.execute(sql, params)
            return await cur.fetchall() if cur.description else []
        wire = self._wires.get(conn)
        if wire is None:
            wire = self._wires[conn] = Wire(conn, self.prepare, (_IN_SCHEMA, {"schema": self.schema}))
        return (await wire.transaction([wire.dump(sql, params)]))[0]

    async def _rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """A read (or a write that never waits for a lock) on a pooled connection; retried a few
        times through a dropped connection, then ServiceUnavailable."""
        for attempt in range(3):
            self.reads += 1
            try:
                async with self._conn() as conn:
                    return await self._fetch(conn, Q[name], params)
            except ServiceUnavailable:
                if attempt == 2:
                    raise
            except psycopg.Error as exc:
                raise self._unavailable(exc) from exc
            await asyncio.sleep(0.1 * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _write(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """A write through the shared-commit writer, ordered by the run it locks."""
        return await self._submit(name, **params)

    def _submit(self, name: str, **params: Any) -> asyncio.Future[list[dict[str, Any]]]:
        key = str(params.get("run_id") or params.get("id") or "")
        return self.writer.submit(Q[name], params, key=key)

    async def _beat_rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """A statement on the lease renewals' connection of its own: never queued behind reads,
        nor behind writes being retried. Tried once more on a fresh connection, after a restart."""
        for attempt in range(2):
            try:
                if self._beat is None or self._beat.closed:
                    self._beat = await self._connect()
                return await self._fetch(self._beat, Q[name], params)
            except psycopg.Error as exc:
                beat, self._beat = self._beat, None
                if beat is not None:
                    await beat.close()
                if attempt:
                    raise self._unavailable(exc) from exc
        raise AssertionError("unreachable")  # pragma: no cover

    async def execute(self, statement: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run a statement of a caller's own (tests and examples only)."""
        async with self._conn() as conn, self._scoped(conn):
            cur = await conn.execute(statement.encode(), params)
            return await cur.fetchall() if cur.description else []


async def _check(conn: psycopg.AsyncConnection[Any]) -> None:
    """The pool's check at each checkout, mostly without a round trip: a connection the server
    ended (a restart, a terminated backend) has its farewell or its end to read while idle, and
    only such a one is asked (and dropped if dead). The round trip on every read cost a draining
    worker 1-7% of its CPU (py-spy)."""
    if conn.closed or select.select([conn.pgconn.socket], [], [], 0)[0]:
        await psycopg_pool.AsyncConnectionPool.check_connection(conn)
