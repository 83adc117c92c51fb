"""Postgres wakes a reader up instead of polling. A reader LISTENs on one run's channel and registers
as the run's watcher (a row of ``watchers``); the events trigger of migration 0009 NOTIFYs the
channel of a watched run only, in every commit that gave it an event (every final state writes
one). While its listening connection is lost, the reader polls.

A client's reader (``wait``, ``follow``) listens on a connection of its own (``RunWatch``), up to
MAX_LISTENERS. The dashboard's readers, one per open live page, share one connection per process
(``outlast.store.listener``): however many pages are open, the viewers hold one connection of the
database's."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Awaitable, Callable
from typing import Any

import psycopg
from psycopg import sql
from psycopg.rows import dict_row

from outlast.errors import ServiceUnavailable
from outlast.store.queries import Q

Conn = psycopg.AsyncConnection[Any]
Connect = Callable[[], Awaitable[Conn]]
MAX_LISTENERS = 32  # listening connections a client opens at most: more waiting readers poll


def channel(schema: str, run_id: str) -> str:
    """The run's channel, as the trigger names it: an identifier of 40 characters whatever the
    run id (Postgres caps channel names at 63 bytes)."""
    return "outlast_" + hashlib.md5(f"{schema}.{run_id}".encode()).hexdigest()


async def open_listening(url: str, schema: str, direct: bool, in_schema: str) -> Conn:
    """A connection of its own for LISTEN at ``url``; TCP keepalives notice a silent network loss.
    A ``direct`` one gets the schema as a startup option; through a session pooler (which keeps
    the session) it is set for the session by ``in_schema``. Raises psycopg's OperationalError."""
    conn = await psycopg.AsyncConnection.connect(
        url,
        connect_timeout=5,
        autocommit=True,
        row_factory=dict_row,
        application_name="outlast-listen",
        keepalives=1,
        keepalives_idle=10,
        keepalives_interval=5,
        keepalives_count=3,
        options=f"-c search_path={schema}" if direct else None,  # None: not sent
    )
    if not direct:
        try:
            await conn.execute(in_schema.replace(", true)", ", false)"), {"schema": schema})
        except BaseException:  # never a connection left open behind the refusal
            await conn.close()
            raise
    return conn


def listen_to(channel: str) -> sql.Composed:
    return sql.SQL("LISTEN {}").format(sql.Identifier(channel))


async def probe(connect: Connect, channel: str, news: asyncio.Event, timeout: float) -> bool:
    """Whether a notification sent on ``channel`` from a session of its own sets ``news`` within
    ``timeout`` seconds (``news`` is cleared after)."""
    try:
        probe = await connect()
    except (ServiceUnavailable, psycopg.Error):
        return False
    try:
        await probe.execute("SELECT pg_notify(%s, 'probe')", [channel])
    except psycopg.Error:
        return False  # the probe could not be sent: nothing is known to reach this session
    finally:
        await probe.close()
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(news.wait(), timeout)
    heard = news.is_set()
    news.clear()
    return heard


class Watch:
    """A ``Watch`` tells a reader when to look at one run again: as soon as a notification for it arrives,
    and every ``poll`` seconds while it cannot listen (listening again is tried at each of those
    looks). Between changes it costs the database nothing.

    The reader looks after ``start`` and after each return of ``changed``; a notification that
    comes while it looks is kept for the next ``changed``, so no change is missed."""

    def __init__(self, run_id: str, channel: str, poll: float) -> None:
        self.run_id = run_id
        self.channel = channel
        self.poll = poll
        self._news = asyncio.Event()

    @property
    def listening(self) -> bool:
        raise NotImplementedError

    async def start(self) -> None:
        """LISTEN and register as the run's watcher; the reader looks only after this, so that no
        change falls between the two. Unable to, the watch polls."""
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def hears(self, timeout: float = 2.0) -> bool:
        """Whether a notification sent from another session reaches this one: not through a
        transaction pooler (pgbouncer), whose LISTEN stays on whichever server connection ran it.
        Then the reader must poll."""
        raise NotImplementedError

    def wake(self) -> None:
        """Make ``changed`` return now (its reader is asked to stop)."""
        self._news.set()

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


class RunWatch(Watch):
    """A ``RunWatch`` is a watch on a listening connection of its own: one idle connection between
    changes."""

    def __init__(
        self,
        connect: Connect,
        run_id: str,
        channel: str,
        poll: float,
        slots: asyncio.Semaphore | None = None,
    ) -> None:
        super().__init__(run_id, channel, poll)
        self._connect = connect
        self._slots = slots or asyncio.Semaphore(1)  # listening connections this one may take
        self._conn: Conn | None = None
        self._task: asyncio.Task[None] | None = None

    @property
    def listening(self) -> bool:
        return self._task is not None and not self._task.done()

    async def start(self) -> None:
        """See ``Watch.start``; it polls too while every listening connection the client may open
        is taken."""
        if self._slots.locked():
            return
        await self._slots.acquire()
        conn = None
        try:
            conn = await self._connect()
            await conn.execute(listen_to(self.channel))
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

    async def hears(self, timeout: float = 2.0) -> bool:
        return self.listening and await probe(self._connect, self.channel, self._news, timeout)

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
