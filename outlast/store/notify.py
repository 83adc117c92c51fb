"""Wake-ups from Postgres instead of polling: a reader LISTENs on one run's channel and registers
as the run's watcher (a row of ``watchers``); the events trigger of migration 0009 NOTIFYs the
channel of a watched run only, in every commit that gave it an event (every final state writes
one). While its listening connection is lost, the reader polls.

A client's reader (``wait``, ``follow``) listens on a connection of its own (``RunWatch``), up to
MAX_LISTENERS. The dashboard's readers, one per open live page, share one connection per process
(``Listener``, read through ``SharedWatch``): however many pages are open, the viewers hold one
connection of the database's."""

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
Connect = Callable[[], Awaitable[Conn]]
MAX_LISTENERS = 32  # listening connections a client opens at most: more waiting readers poll


def channel(schema: str, run_id: str) -> str:
    """The run's channel, as the trigger names it: an identifier of 40 characters whatever the
    run id (Postgres caps channel names at 63 bytes)."""
    return "outlast_" + hashlib.md5(f"{schema}.{run_id}".encode()).hexdigest()


def _listen(channel: str) -> sql.Composed:
    return sql.SQL("LISTEN {}").format(sql.Identifier(channel))


async def _probe(connect: Connect, channel: str, news: asyncio.Event, timeout: float) -> bool:
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
    """Tells a reader when to look at one run again: as soon as a notification for it arrives,
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
    """A watch on a listening connection of its own: one idle connection between changes."""

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
            await conn.execute(_listen(self.channel))
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
        return self.listening and await _probe(self._connect, self.channel, self._news, timeout)

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


class Listener:
    """One listening connection that many readers share (the dashboard's: one per process, however
    many live pages are open). A channel is LISTENed, and its run registered as watched, when its
    first reader joins; both are undone when its last reader leaves. Each notification sets the
    flag of every reader of its channel: a queue bounded at one wake-up, which loses nothing,
    since the payload is empty and the reader's look reads what changed; a reader slow to look
    holds one pending wake-up, never a growing backlog.

    One task reads the notifications; a LISTEN or its undoing stops that task, runs on the
    connection, and starts it again (psycopg holds the connection for as long as it reads them;
    what arrives meanwhile is kept by the driver for the next read). When the connection is lost
    every reader is woken: each finds itself not listening, polls, and joins again, on a new
    connection opened by the first to try."""

    def __init__(self, connect: Connect) -> None:
        self._connect = connect
        self._conn: Conn | None = None
        self._reading: asyncio.Task[None] | None = None
        self._readers: dict[str, set[asyncio.Event]] = {}  # channel -> its readers' flags
        self._runs: dict[str, str] = {}  # channel -> the run id registered as watched
        self._lock = asyncio.Lock()  # one change of the connection's LISTENs at a time
        self._probing = asyncio.Lock()
        self._heard = 0  # the generation a probe was last heard on (0: none)
        self.generation = 0  # how many connections were opened: a reader's joins are on one

    @property
    def up(self) -> bool:
        return self._reading is not None and not self._reading.done()

    @property
    def channels(self) -> int:
        """How many channels are listened to now."""
        return len(self._readers)

    async def join(self, run_id: str, channel: str, news: asyncio.Event) -> int:
        """Listen on ``channel`` (the run ``run_id``'s) for a reader, whose ``news`` is set at each
        notification; the generation of the connection it listens on (0: it cannot, and polls)."""
        async with self._lock:
            if not self.up and not await self._open():
                return 0
            if channel not in self._readers:
                watch = (Q["watch"], {"run_id": run_id})
                if not await self._run((_listen(channel), None), watch):
                    return 0
                self._readers[channel], self._runs[channel] = set(), run_id
            self._readers[channel].add(news)
            return self.generation

    async def leave(self, channel: str, news: asyncio.Event, generation: int) -> None:
        """The reader of ``news`` stops listening on ``channel``; its last reader gone, the channel
        is no longer listened to. Done even if the caller is cancelled meanwhile (a page closed):
        a channel left listened would have the trigger notify for nobody."""
        if generation != self.generation or news not in self._readers.get(channel, ()):
            return  # its connection is gone, and its LISTENs with it
        self._readers[channel].discard(news)
        await asyncio.shield(self._forget(channel))

    async def _forget(self, channel: str) -> None:
        async with self._lock:
            if channel not in self._readers or self._readers[channel]:
                return  # already forgotten (the connection was lost), or joined again meanwhile
            del self._readers[channel]
            run_id = self._runs.pop(channel)
            if self.up:
                unlisten = sql.SQL("UNLISTEN {}").format(sql.Identifier(channel))
                await self._run((unlisten, None), (Q["unwatch"], {"run_id": run_id}))

    async def hears(self, channel: str, news: asyncio.Event, timeout: float) -> bool:
        """Whether notifications reach the connection (see ``Watch.hears``), probed on ``channel``
        once per connection: once heard, every later reader is told so at once."""
        async with self._probing:
            generation = self.generation
            if not self.up or self._heard == generation:
                return self.up
            if await _probe(self._connect, channel, news, timeout):
                self._heard = generation
            return self._heard == generation

    async def _open(self) -> bool:
        await self.close()
        try:
            self._conn = await self._connect()
        except (ServiceUnavailable, psycopg.Error):
            return False
        self.generation += 1
        self._reading = asyncio.create_task(self._read(self._conn))
        return True

    async def _read(self, conn: Conn) -> None:
        try:
            async for n in conn.notifies():
                for news in self._readers.get(n.channel, ()):
                    news.set()
        except psycopg.Error:
            pass
        self._lost()

    def _lost(self) -> None:
        """The connection is lost: every reader looks, finds itself not listening, and polls."""
        for readers in self._readers.values():
            for news in readers:
                news.set()
        self._readers.clear()
        self._runs.clear()

    async def _run(self, *statements: tuple[sql.Composed | str, dict[str, Any] | None]) -> bool:
        """Run ``statements`` on the connection, its reading stopped meanwhile; whether they ran
        (if not, the connection is given up: each reader polls, then joins a new one)."""
        conn, reading = self._conn, self._reading
        assert conn is not None and reading is not None
        reading.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reading
        try:
            for statement, params in statements:
                await conn.execute(statement, params)
        except BaseException as exc:  # an error or a cancellation mid-statement: not reused
            await self.close()
            self._lost()
            if isinstance(exc, psycopg.Error):
                return False
            raise
        self._reading = asyncio.create_task(self._read(conn))
        return True

    async def close(self) -> None:
        """Stop reading and close the connection (the sweeper removes its watchers' rows)."""
        reading, self._reading = self._reading, None
        conn, self._conn = self._conn, None
        if reading is not None:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
        if conn is not None:
            await conn.close()


class SharedWatch(Watch):
    """A watch through a ``Listener`` that other readers share."""

    def __init__(self, listener: Listener, run_id: str, channel: str, poll: float) -> None:
        super().__init__(run_id, channel, poll)
        self._listener = listener
        self._generation = 0  # of the listener's connection it joined; 0: none

    @property
    def listening(self) -> bool:
        return self._generation != 0 and self._listener.up and self._listener.generation == self._generation

    async def start(self) -> None:
        self._generation = await self._listener.join(self.run_id, self.channel, self._news)

    async def hears(self, timeout: float = 2.0) -> bool:
        return self.listening and await self._listener.hears(self.channel, self._news, timeout)

    async def close(self) -> None:
        generation, self._generation = self._generation, 0
        if generation:
            await self._listener.leave(self.channel, self._news, generation)
