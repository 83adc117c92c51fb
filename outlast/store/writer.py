"""Shared commits: one writer per process gathers the writes due at the same moment into one
transaction and one commit. Each write is still committed before its caller goes on; only the
commit is shared. Writes are conditional statements that return no rows when refused, so one
refused write never spoils its neighbours; a batch that fails anyway is retried write by write.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import psycopg

MAX_BATCH = 256


@dataclass
class _Write:
    sql: str
    params: dict[str, Any]
    done: asyncio.Future[list[dict[str, Any]]] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class Writer:
    """Runs one loop that commits queued writes in batches on its own connection."""

    def __init__(self, connect: Any) -> None:
        self._connect = connect
        self._queue: asyncio.Queue[_Write] = asyncio.Queue()
        self._task: asyncio.Task[None] | None = None
        self._conn: psycopg.AsyncConnection[dict[str, Any]] | None = None
        self.commits = 0
        self.writes = 0

    async def write(self, sql: str, params: dict[str, Any]) -> list[dict[str, Any]]:
        """Commit one statement (shared with whatever else is due) and return its rows."""
        if self._task is None or self._task.done():
            self._task = asyncio.create_task(self._loop(), name="outlast-writer")
        w = _Write(sql, params)
        await self._queue.put(w)
        return await w.done

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None
        if self._conn is not None:
            await self._conn.close()
            self._conn = None

    async def _loop(self) -> None:
        while True:
            batch = [await self._queue.get()]
            while len(batch) < MAX_BATCH and not self._queue.empty():
                batch.append(self._queue.get_nowait())
            try:
                await self._commit(batch)
            except Exception as exc:  # connection trouble: fail these writes, reconnect next time
                await self._drop()
                for w in batch:
                    if not w.done.done():
                        w.done.set_exception(exc)

    async def _connection(self) -> psycopg.AsyncConnection[dict[str, Any]]:
        if self._conn is None or self._conn.closed:
            self._conn = await self._connect()
        return self._conn

    async def _drop(self) -> None:
        if self._conn is not None:
            await self._conn.close()
        self._conn = None

    async def _commit(self, batch: list[_Write]) -> None:
        conn = await self._connection()
        try:
            rows = await self._run(conn, batch)
        except psycopg.errors.Error:
            if len(batch) == 1:
                raise
            # One bad write aborted the shared transaction: give each its own.
            for w in batch:
                try:
                    w.done.set_result((await self._run(conn, [w]))[0])
                except psycopg.errors.Error as exc:
                    w.done.set_exception(exc)
            return
        for w, r in zip(batch, rows, strict=True):
            w.done.set_result(r)

    async def _run(
        self, conn: psycopg.AsyncConnection[dict[str, Any]], batch: list[_Write]
    ) -> list[list[dict[str, Any]]]:
        # Pipeline mode: the batch's statements go out without waiting for each reply; the cost
        # of a batch is then about one round trip and one commit, not one per statement.
        try:
            async with conn.pipeline(), conn.transaction():
                cursors = [await conn.execute(w.sql, w.params) for w in batch]
            out = [await c.fetchall() if c.description else [] for c in cursors]
        except psycopg.OperationalError:
            await self._drop()
            raise
        self.commits += 1
        self.writes += len(batch)
        return out
