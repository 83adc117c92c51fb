"""A writer's lane owns one connection and commits one batch at a time on it.

A batch is one transaction. A batch that fails is tried write by write to find the one that
spoiled it; a connection that broke is replaced, once the server process of the dropped one is
seen gone (``Lane._bury``); what failed for a reason that can pass (the server restarting, a
deadlock victim, a trigger raising for a while) is retried with backoff for up to ``retry_for``
seconds, and only then reported to its caller. Every statement is safe to run again after a
commit whose acknowledgement was lost: it either finds its own effect or is refused by its
condition. The writer (``writer.py``) decides which writes a lane gets; a lane retries its own
batch without touching another lane's.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import psycopg
import structlog
from psycopg import pq
from psycopg.pq import TransactionStatus

from outlast import _metrics as metrics
from outlast.errors import ServiceUnavailable
from outlast.store.wire import Dumped, Row, Wire

# A batch carries at most this many bytes of parameters (and at least one write): large payloads
# go in several transactions, each well within the stall bound, rather than in one that is not.
MAX_BATCH_BYTES = 4 << 20
STALL = 15.0  # a transaction not done in this long: its server is gone, or it is too big
# Errors that say something about the statement itself, not the server: tried a few times only.
_DETERMINISTIC = (psycopg.errors.DataError, psycopg.errors.IntegrityError, psycopg.errors.NotSupportedError)
_QUICK_TRIES = 3
# A server process, while it runs the given transaction (NULL: whatever it runs).
_RUNNING = (
    "SELECT 1 FROM pg_stat_activity WHERE pid = %(pid)s"
    " AND (%(began)s::timestamptz IS NULL OR xact_start = %(began)s::timestamptz)"
)
_TERMINATE = _RUNNING.replace("SELECT 1", "SELECT pg_terminate_backend(pid)")

log = structlog.get_logger("outlast.store")
Conn = psycopg.AsyncConnection[dict[str, Any]]


@dataclass(slots=True)
class _Write:
    sql: str
    params: dict[str, Any]
    key: str  # the run the statement locks: batches lock runs in this order
    done: asyncio.Future[list[Row]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )
    tries: int = 0
    dumped: Dumped | None = None  # its parameters as sent, adapted once


def _deliver(w: _Write, rows: list[Row]) -> None:
    if not w.done.done():  # a caller that gave up (cancelled) never spoils its neighbours
        w.done.set_result(rows)


def _fail(w: _Write, exc: BaseException) -> None:
    if not w.done.done():
        w.done.set_exception(exc)


class Lane:
    """Commits batches on one connection of its own, retrying its own failures."""

    def __init__(
        self,
        *,
        connect: Callable[[], Awaitable[Conn]],
        unavailable: Callable[[BaseException], ServiceUnavailable],
        retry_for: float,
        make_wire: Callable[[Conn], Wire],
        pooled: bool,
    ) -> None:
        self._connect = connect
        self._make_wire = make_wire
        # Behind a pooler the connection's backend pid is the pooler's own: the server's comes
        # with each batch (the wire's prelude), and is the one a retry must see gone.
        self._pooled = pooled
        self._unavailable = unavailable
        self.retry_for = retry_for
        self.hurried = False  # a stopping worker: a write that fails is not retried (Writer.hurry)
        self._conn: Conn | None = None
        self._wire: Wire | None = None
        self._warned = False
        # The server process of a dropped connection (behind a pooler: and its transaction's start).
        self._dead: tuple[int, str | None] | None = None
        self.commits = 0
        self.writes = 0
        self.busy = 0.0  # seconds spent committing (and retrying), for the busy ratio

    async def settle(self, writes: list[_Write]) -> None:
        """Commit the writes together; find and retry whatever fails, within the bound. While it
        retries, this lane's later batches wait: their runs may be the same."""
        started = time.monotonic()
        try:
            await self._settle(writes)
        finally:
            self.busy += time.monotonic() - started

    async def _settle(self, writes: list[_Write]) -> None:
        deadline = time.monotonic() + self.retry_for
        delay = 0.02
        while True:
            writes = [w for w in writes if not w.done.done()]
            if not writes:
                return
            try:
                rows = await self._run(writes)
            except Exception as exc:
                if isinstance(exc, TimeoutError) and len(writes) > 1:
                    # More than one transaction can carry within the stall bound (large
                    # payloads): halves, one after the other, so each run's order is kept.
                    half = len(writes) // 2
                    await self._settle(writes[:half])
                    await self._settle(writes[half:])
                    return
                failed: list[tuple[_Write, Exception | None]]
                if self._conn is None or len(writes) == 1:
                    failed = [(w, exc) for w in writes]
                else:
                    failed = await self._one_by_one(writes)
                late = self.hurried or time.monotonic() > deadline
                for w, why in failed:  # each judged by its own failure
                    if why is None:  # not tried: behind its run's earlier write, tried first
                        continue
                    w.tries += 1
                    if late or (isinstance(why, _DETERMINISTIC) and w.tries >= _QUICK_TRIES):
                        _fail(w, self._failure(why))
                if not self._warned:
                    self._warned = True
                    log.warning("store.writes_failing", retry_for=self.retry_for, error=str(exc))
                await asyncio.sleep(0 if self.hurried else delay)
                delay = min(delay * 2, 0.5)
                writes = [w for w, _ in failed]
                continue
            for w, r in zip(writes, rows, strict=False):  # rows: those of the writes that fitted
                _deliver(w, r)
            if self._warned:
                self._warned = False
                log.info("store.writes_recovered")
            deadline, delay = time.monotonic() + self.retry_for, 0.02

    def _failure(self, exc: BaseException) -> ServiceUnavailable:
        if isinstance(exc, ServiceUnavailable):
            return exc
        err = self._unavailable(exc)
        err.__cause__ = exc
        return err

    async def _one_by_one(self, writes: list[_Write]) -> list[tuple[_Write, Exception | None]]:
        """One write spoiled the shared transaction: give each its own; return those that fail,
        each with its own error. A run's writes keep their order: those after one of its writes
        that failed are not tried now (None), and go after it when it is retried."""
        failed: list[tuple[_Write, Exception | None]] = []
        behind: set[str] = set()  # runs whose write failed here
        for i, w in enumerate(writes):
            if w.key and w.key in behind:
                failed.append((w, None))
                continue
            try:
                _deliver(w, (await self._run([w]))[0])
            except Exception as exc:
                failed.append((w, exc))
                behind.add(w.key)
                if self._conn is None:  # the connection broke: the rest are not tried now
                    failed.extend((rest, exc) for rest in writes[i + 1 :])
                    break
        return failed

    async def _run(self, batch: list[_Write]) -> list[list[Row]]:
        """One transaction of the batch's first writes, up to MAX_BATCH_BYTES (at least one);
        their rows. Drops the connection if it broke or stalled."""
        conn, wire = await self.open()
        dumped: list[Dumped] = []
        size = 0
        for w in batch:
            d = w.dumped = w.dumped or wire.dump(w.sql, w.params)
            size += d.size
            if dumped and size > MAX_BATCH_BYTES:
                break
            dumped.append(d)
        try:
            # The statements go out without waiting for each reply: a batch costs about one
            # round trip and one commit, not one per statement.
            async with asyncio.timeout(STALL):  # no task of its own, unlike wait_for
                out = await wire.transaction(dumped)
        except BaseException:
            if (
                conn.broken
                or conn.closed
                or conn.pgconn.pipeline_status != pq.PipelineStatus.OFF
                or conn.info.transaction_status != TransactionStatus.IDLE
            ):
                await self.drop()
            raise
        self.commits += 1
        self.writes += len(dumped)
        metrics.commit_batch(len(dumped))
        return out

    async def open(self) -> tuple[Conn, Wire]:
        """The lane's connection, made (and the dropped one's server process buried) if need be."""
        if self._conn is None or self._wire is None or self._conn.closed:
            conn = await asyncio.wait_for(self._connect(), STALL)
            try:
                await asyncio.wait_for(self._bury(conn), STALL)
            except BaseException:  # the dead one is still to bury: by the next connection
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(conn.close(), 1)
                raise
            self._conn, self._wire = conn, self._make_wire(conn)
        return self._conn, self._wire

    async def _bury(self, conn: Conn) -> None:
        """Before a write is retried on a new connection, the server process of the dropped one
        must be gone: a transaction it still runs could commit after the retry looked for its
        effect (and the retry would then be refused, or count twice). Behind a pooler, only while
        it still runs the transaction left under way: the pooler may have handed it on since.
        Forgotten only once seen gone: a failure or the caller's time limit keeps it to bury."""
        if self._dead is None:
            return
        dead = {"pid": self._dead[0], "began": self._dead[1]}
        await conn.execute(_TERMINATE, dead)
        while await (await conn.execute(_RUNNING, dead)).fetchone() is not None:
            await asyncio.sleep(0.05)
        self._dead = None

    async def drop(self) -> None:
        """Close the connection; its server process is buried before this lane's next write."""
        conn, wire, self._conn, self._wire = self._conn, self._wire, None, None
        if self._pooled:  # the server process of the batch left under way, if any
            self._dead = wire.server_tx if wire is not None else None
        if conn is not None:
            if not self._pooled:
                with contextlib.suppress(Exception):
                    self._dead = (conn.info.backend_pid, None)
            try:
                await asyncio.wait_for(conn.close(), 1)
            except Exception:  # closing a dead link is best effort
                pass
