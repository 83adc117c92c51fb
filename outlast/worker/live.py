"""``LiveOutput`` sends the chunks the runs of one worker stream (``run.stream``,
``current_action().stream``) to Redis (``queue/live.py``) in order per run, never waited for.

``send`` checks the chunk and queues it (from the loop, or from a sync tool's thread); one task per
run that has chunks queued sends them, all that are queued in one round trip. A run that never
streams costs nothing: no task, no Redis call. A run's chunks reach it through ``Scrubbed``, which
masks the secret values the run knows (``Secrets.scrub``) before a chunk leaves the process. A chunk
that cannot be sent (Redis out of reach) is dropped and counted: live output is at most once, the
run's result is what lasts. When a run that streamed here ends, an end mark tells its readers at
once.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

import structlog

from outlast._journal import Unstorable, canonical
from outlast._secrets import Secrets
from outlast.errors import InvalidInput, ServiceUnavailable
from outlast.queue import LiveChunks

MAX_CHUNK = 64 * 1024  # bytes of a chunk (a text, or a JSON value's text)
log = structlog.get_logger("outlast.worker")


class Scrubbed:
    """One run's way to its worker's ``LiveOutput`` (``run.stream``, ``current_action().stream``):
    each chunk with the secret values the run knows masked, as a journaled value is."""

    __slots__ = ("_live", "_secrets")

    def __init__(self, live: LiveOutput, secrets: Secrets) -> None:
        self._live, self._secrets = live, secrets

    def send(self, run_id: str, op_id: str | None, chunk: Any) -> None:
        self._live.send(run_id, op_id, self._secrets.scrub(chunk))


class LiveOutput:
    """One per worker: its runs' chunks on their way to Redis."""

    def __init__(self, chunks: LiveChunks, max_chunk: int = MAX_CHUNK) -> None:
        self._chunks = chunks
        self.max_chunk = max_chunk
        self._loop: asyncio.AbstractEventLoop | None = None
        self._queued: dict[str, list[dict[str, str]]] = {}  # per run, while its sender runs
        self._senders: set[asyncio.Task[None]] = set()
        self.streamed: set[str] = set()  # runs that streamed here and have not ended
        self.sent = 0
        self.dropped = 0

    def attach(self, loop: asyncio.AbstractEventLoop) -> None:
        """The worker's loop, where chunks sent from a sync tool's thread are queued."""
        self._loop = loop

    def send(self, run_id: str, op_id: str | None, chunk: Any) -> None:
        """Queue ``chunk`` (a text, or any JSON value) for the run's readers; refuses one over
        ``max_chunk`` bytes, naming the run and the operation."""
        fields = {"d": chunk, "o": op_id or ""} if type(chunk) is str else None
        try:
            if fields is None:
                fields = {"d": canonical(chunk), "o": op_id or "", "j": "1"}
            if len(fields["d"]) * 4 > self.max_chunk and len(fields["d"].encode()) > self.max_chunk:
                raise Unstorable(f"the chunk is over {self.max_chunk} bytes: send it in smaller pieces")
        except Unstorable as exc:
            where = f" (operation {op_id})" if op_id else ""
            raise InvalidInput(f"run '{run_id}'{where}: stream(): {exc}") from None
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # a sync tool's thread
            loop = None
        if loop is not None:
            self._loop = self._loop or loop
            self._put(run_id, fields)
        elif self._loop is not None:
            self._loop.call_soon_threadsafe(self._put, run_id, fields)

    def ended(self, run_id: str) -> None:
        """The run has ended (its final state committed): its readers are told, if it streamed here."""
        if run_id in self.streamed:
            self.streamed.discard(run_id)
            self._put(run_id, {"end": "1"})

    def _put(self, run_id: str, fields: dict[str, str]) -> None:
        queued = self._queued.get(run_id)
        if queued is not None:  # its sender takes it with the rest
            queued.append(fields)
            return
        self._queued[run_id] = [fields]
        if "end" not in fields:
            self.streamed.add(run_id)
        task = asyncio.get_running_loop().create_task(self._send(run_id))
        self._senders.add(task)
        task.add_done_callback(self._senders.discard)

    async def _send(self, run_id: str) -> None:
        """Send what the run has queued, in order, until nothing is left."""
        try:
            while True:
                await asyncio.sleep(0)  # chunks sent in the same turn go in one round trip
                batch = self._queued[run_id]
                self._queued[run_id] = []
                try:
                    await self._chunks.add(run_id, batch)
                    self.sent += len(batch)
                except ServiceUnavailable as exc:
                    self.dropped += len(batch)
                    log.warning("live.dropped", run_id=run_id, chunks=len(batch), error=str(exc))
                if not self._queued[run_id]:
                    return
        finally:
            self._queued.pop(run_id, None)

    async def close(self) -> None:
        """Let the chunks queued be sent (a worker that stops)."""
        with contextlib.suppress(Exception):
            await asyncio.gather(*self._senders)
