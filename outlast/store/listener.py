"""The dashboard's live pages share one listening connection per process, however many pages are open.
It is a ``Listener``, each page's reader a ``SharedWatch`` through it (``outlast.store.notify``
says how a wake-up reaches a reader)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import psycopg
from psycopg import sql

from outlast.errors import ServiceUnavailable
from outlast.store.notify import Conn, Connect, Watch, listen_to, probe
from outlast.store.queries import Q


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
        self._paused = False  # reading stopped while a LISTEN or its undoing runs
        self.generation = 0  # how many connections were opened: a reader's joins are on one

    @property
    def up(self) -> bool:
        """Listening: reading, or paused for a LISTEN (a reader that saw it paused would leave and
        join again, pausing it in turn: with many readers joining at once, none would settle)."""
        return self._reading is not None and (self._paused or not self._reading.done())

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
                if not await self._run((listen_to(channel), None), watch):
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
            if await probe(self._connect, channel, news, timeout):
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
        self._paused = True
        try:
            reading.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await reading
            for statement, params in statements:
                await conn.execute(statement, params)
        except BaseException as exc:  # an error or a cancellation mid-statement: not reused
            self._paused = False
            await self.close()
            self._lost()
            if isinstance(exc, psycopg.Error):
                return False
            raise
        self._paused = False
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
