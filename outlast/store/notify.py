"""Wake-ups from Postgres instead of polling: a reader LISTENs on one run's channel, on a
connection of its own, and registers as the run's watcher (a row of ``watchers``); the events
trigger of migration 0009 NOTIFYs the channel of a watched run only, in every commit that gave it
an event (every final state writes one). While that connection is lost, the reader polls."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import sql

from outlast.errors import ServiceUnavailable
from outlast.store.queries import Q

Conn = psycopg.AsyncConnection[Any]
MAX_LISTENERS = 32  # listening connections a client opens at most: more waiting readers poll


def channel(schema: str, run_id: str) -> str:
    """The run's channel, as the trigger names it: an identifier of 40 characters whatever the
    run id (Postgres caps channel names at 63 bytes)."""
    return "outlast_" + hashlib.md5(f"{schema}.{run_id}".encode()).hexdigest()


class RunWatch:
    """Tells a reader when to look at one run again: as soon as a notification for it arrives,
    and every ``poll`` seconds while the listening connection is lost (a new one is tried at each
    of those looks). Between changes it costs the database nothing: one idle connection.

    The reader looks after ``start`` and after each return of ``changed``; a notification that
    comes while it looks is kept for the next ``changed``, so no change is missed."""

    def __init__(
        self,
        connect: Callable[[], Awaitable[Conn]],
        run_id: str,
        channel: str,
        poll: float,
        slots: asyncio.Semaphore | None = None,
    ) -> None:
        self._connect = connect
        self.run_id = run_id
        self.channel = channel
        self.poll = poll
        self._slots = slots or asyncio.Semaphore(1)  # listening connections this one may take
        self._news = asyncio.Event()
        self._conn: Conn | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def listening(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """LISTEN and register as the run's watcher; the reader looks only after this, so that no
        change falls between the two. Unable to — Postgres out of reach, or every listening
        connection the client may open taken — the watch polls (and tries again at each look)."""
        if self._slots.locked():
            return
        await self._slots.acquire()
        conn = None
        try:
            conn = await self._connect()
            await conn.execute(sql.SQL("LISTEN {}").format(sql.Identifier(self.channel)))
            await conn.execute(Q["watch"], {"run_id": self.run_id})
        except (ServiceUnavailable, psycopg.Error):
            if conn is not None:
                await conn.close()
            self._slots.release()
            return
        except BaseException:  # cancelled once connected: the connection is not left open
            if conn is not None:
                await conn.close()
            self._slots.release()
            raise
        self._conn = conn
        self._task = asyncio.create_task(self._listen(conn))

    async def _listen(self, conn: Conn) -> None:
        try:
            async for _ in conn.notifies():
                self._news.set()
        except psycopg.Error:
            pass  # the connection is lost: the reader polls from now on
        finally:
            self._news.set()  # look again: whatever came after the last notification is read then

    async def changed(self, timeout: float | None = None) -> None:
        """Return when the run may have changed since the last return, or after ``timeout``
        seconds at most (``poll`` at most while not listening)."""
        if not self.listening:
            await self.close()
            await self.start()
            if self.listening:
                return  # listening again: look once, for what came while no one listened
            timeout = self.poll if timeout is None else min(timeout, self.poll)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._news.wait(), timeout)
        self._news.clear()

    async def hears(self, timeout: float = 2.0) -> bool:
        """Whether a notification sent from another session reaches this one: not through a
        transaction pooler (pgbouncer), whose LISTEN stays on whichever server connection ran it.
        Then the reader must poll."""
        if not self.listening:
            return False
        try:
            probe = await self._connect()
        except (ServiceUnavailable, psycopg.Error):
            return False
        try:
            await probe.execute("SELECT pg_notify(%s, 'probe')", [self.channel])
        except psycopg.Error:
            return False  # the probe could not be sent: nothing is known to reach this session
        finally:
            await probe.close()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._news.wait(), timeout)
        heard = self._news.is_set()
        self._news.clear()
        return heard

    async def close(self) -> None:
        task, self._task = self._task, None
        conn, self._conn = self._conn, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if conn is not None:
            try:
                with contextlib.suppress(psycopg.Error):  # else the sweeper removes the row
                    await conn.execute(Q["unwatch"], {"run_id": self.run_id})
                await conn.close()
            finally:
                self._slots.release()
