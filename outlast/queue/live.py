"""``LiveChunks`` keeps what a run streams while it runs in Redis, on its way to readers.

One capped stream per run (``PREFIX:live:{RUN}``, its own Redis Cluster slot), its last ``keep``
chunks kept for ``ttl`` seconds after the latest: a reader that connects late gets the recent
ones. Nothing here is durable: a chunk lost with a worker or a Redis is lost (at most once); the
run's result, in Postgres, is what lasts. An entry is ``d`` (the chunk: a text, or JSON with
``j``) and ``o`` (the operation that streamed it, empty for the workflow); ``end`` marks the run's
end, added by the worker that ended a run that streamed.
"""

from __future__ import annotations

from typing import Any

from outlast.queue.connection import OUTAGE
from outlast.queue.streams import Queue

KEEP = 1000  # chunks a run's stream keeps (about: trimmed with MAXLEN ~)
TTL = 300  # seconds a run's stream is kept after its latest chunk
Entry = tuple[str, dict[str, str]]


class LiveChunks:
    """Every run's live stream, in the queue's Redis under its prefix."""

    def __init__(self, queue: Queue, keep: int = KEEP, ttl: int = TTL) -> None:
        self._q = queue
        self.keep, self.ttl = keep, ttl

    def key(self, run_id: str) -> str:
        return f"{self._q.prefix}:live:{{{run_id}}}"

    async def add(self, run_id: str, entries: list[dict[str, str]]) -> None:
        """Add ``entries`` in order, in one round trip, and keep the stream ``ttl`` seconds more.
        Raises ``ServiceUnavailable`` (the caller drops them: at most once)."""
        key = self.key(run_id)
        try:
            async with self._q._gate:
                pipe = self._q.redis.pipeline(transaction=False)
                for fields in entries:
                    pipe.xadd(key, fields, maxlen=self.keep, approximate=True)
                pipe.expire(key, self.ttl)
                await pipe.execute()
        except OUTAGE as exc:
            raise self._q._unavailable(exc) from exc

    async def read(self, run_id: str, after: str, block_ms: int | None, count: int = 256) -> list[Entry]:
        """The entries after id ``after`` ('0': every one kept), waiting up to ``block_ms`` for one
        (None: not waiting)."""
        try:
            async with self._q._gate:
                got: Any = await self._q.redis.xread({self.key(run_id): after}, count=count, block=block_ms)
        except OUTAGE as exc:
            raise self._q._unavailable(exc) from exc
        out: list[Entry] = []
        for _stream, rows in got or []:
            for entry_id, fields in rows:
                out.append((_text(entry_id), {_text(k): _text(v) for k, v in fields.items()}))
        return out


def _text(b: Any) -> str:
    return b.decode() if isinstance(b, bytes) else str(b)
