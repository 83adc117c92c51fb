"""A worker's links to its servers: a TCP proxy per (worker, server) on 127.0.0.1, on one event
loop thread for all of them. A link can be cut (nothing forwarded either way, sockets left open:
everything hangs), half-open (the server's answers held, the client's bytes still forwarded),
slowed (each chunk delayed), retargeted (a failover: new connections go to the new primary, the
old ones are closed) and mended."""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Callable


class Links:
    """The event loop thread every link runs on."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="nemesis-links", daemon=True)
        self.thread.start()
        self.all: list[Link] = []

    def link(self, name: str, target: Callable[[], int]) -> Link:
        link = Link(self, name, target)
        link.port = asyncio.run_coroutine_threadsafe(link.serve(), self.loop).result(10)
        self.all.append(link)
        return link

    def close(self) -> None:
        for link in self.all:
            asyncio.run_coroutine_threadsafe(link.shut(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)
        self.loop.close()


class Link:
    def __init__(self, links: Links, name: str, target: Callable[[], int]) -> None:
        self.links, self.name, self.target = links, name, target
        self.port = 0
        self.up = asyncio.Event()  # client -> server
        self.down = asyncio.Event()  # server -> client
        self.delay = 0.0
        self._server: asyncio.Server | None = None
        self._clients: set[asyncio.Task[None]] = set()

    async def serve(self) -> int:
        self.up.set()
        self.down.set()
        self._server = await asyncio.start_server(self._client, "127.0.0.1", 0)
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._clients.add(task)
        task.add_done_callback(self._clients.discard)
        # Closed by reset() or shut(): ends quietly (asyncio's server asks a cancelled
        # connection's task for its exception, and logs the CancelledError otherwise).
        with contextlib.suppress(asyncio.CancelledError):
            await self._forward(reader, writer)

    async def _forward(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:  # the accepted connection is closed however this ends (cancelled while cut, say)
            await self.up.wait()  # a cut link accepts and hangs
            try:
                up_reader, up_writer = await asyncio.open_connection("127.0.0.1", self.target())
            except OSError:
                return
            try:
                await asyncio.gather(
                    self._pipe(reader, up_writer, self.up), self._pipe(up_reader, writer, self.down)
                )
            except (OSError, asyncio.IncompleteReadError):
                pass
            finally:
                up_writer.close()
        finally:
            writer.close()

    async def _pipe(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, gate: asyncio.Event
    ) -> None:
        """Forward what ``reader`` gives, each chunk ``delay`` after it was read (as far.py does:
        chunks sent together arrive together, a slowed link's delays do not add up)."""
        loop = asyncio.get_running_loop()
        held: asyncio.Queue[tuple[float, bytes]] = asyncio.Queue()

        async def deliver() -> None:
            while True:
                due, data = await held.get()
                await asyncio.sleep(due - loop.time())
                if not data:
                    writer.close()
                    return
                await gate.wait()  # cut while held: the bytes stay held, not forwarded
                writer.write(data)
                await writer.drain()

        sender = asyncio.ensure_future(deliver())
        try:
            data = b"-"
            while data:
                await gate.wait()
                data = await reader.read(65536)
                held.put_nowait((loop.time() + self.delay, data))
            await sender
        finally:
            sender.cancel()

    def _call(self, fn: Callable[[], None]) -> None:
        self.links.loop.call_soon_threadsafe(fn)

    def cut(self) -> None:
        self._call(lambda: (self.up.clear(), self.down.clear()))

    def half(self) -> None:
        """The server's answers held; what the client sends still goes."""
        self._call(self.down.clear)

    def slow(self, seconds: float) -> None:
        self.delay = seconds

    def mend(self) -> None:
        self.delay = 0.0
        self._call(lambda: (self.up.set(), self.down.set()))

    def reset(self) -> None:
        """Close every connection through the link (its target changed, or died)."""
        self._call(lambda: [t.cancel() for t in list(self._clients)] and None)

    async def shut(self) -> None:
        self.up.set()
        self.down.set()
        if self._server is not None:
            self._server.close()
        for t in list(self._clients):
            t.cancel()
        await asyncio.gather(*self._clients, return_exceptions=True)
