"""What Redis says of a queue: for ``outlast queues`` and the metrics gauges."""

from __future__ import annotations

from redis.exceptions import ResponseError

from outlast.queue.connection import OUTAGE, Connection
from outlast.queue.entries import GROUP, LEVELS, QueueFigures, to_bytes, to_text


class Figures(Connection):
    """The streams' lengths, pending entries, backlog and their ages."""

    async def figures(self, queue: str) -> QueueFigures:
        """The queue's streams (every level) as Redis sees them: their length, the entries
        delivered and not acknowledged, the age of the oldest of those (from its id, by the Redis
        clock: TIME, which a cluster pipeline refuses, is asked apart) and the dead letters."""
        age = None
        try:
            async with self._gate:
                async with self.redis.pipeline(transaction=False) as p:
                    for level in LEVELS:
                        p.xlen(self.stream(queue, level))
                        p.xpending(self.stream(queue, level), GROUP)
                    p.xlen(self.dead_stream(queue))
                    *per_level, dead = await p.execute(raise_on_error=False)
                lengths, pendings = per_level[0::2], per_level[1::2]
                # no group yet: nothing was ever read
                found = [q for q in pendings if not isinstance(q, ResponseError) and q["pending"]]
                oldest = min(
                    (int(to_text(q["min"]).split("-")[0]) for q in found if q["min"] is not None),
                    default=None,
                )
                if oldest is not None:
                    secs, micros = await self.redis.time()
                    age = max(secs + micros / 1e6 - oldest / 1000, 0.0)
        except OUTAGE as exc:
            raise self._unavailable(exc) from exc
        pending = sum(int(q["pending"]) for q in found)
        return QueueFigures(queue, sum(int(n) for n in lengths), pending, age, int(dead))

    async def backlog(self, queue: str) -> tuple[int, float]:
        """The queue's streams' length (every level), and the age in seconds (by Redis's clock)
        of the oldest entry not yet delivered to any worker (0 when every entry was delivered).
        For the metrics gauges, every few seconds: up to three round trips a level, each on one key."""
        length, age = 0, 0.0
        for level in LEVELS:
            n, a = await self._backlog(self.stream(queue, level))
            length, age = length + n, max(age, a)
        return length, age

    async def _backlog(self, stream: str) -> tuple[int, float]:
        try:
            async with self._gate:
                length = await self.redis.xlen(stream)
                groups = await self.redis.xinfo_groups(stream) if length else []
                last = next((g["last-delivered-id"] for g in groups if to_text(g["name"]) == GROUP), b"0-0")
                first = await self.redis.xrange(stream, min=b"(" + to_bytes(last), count=1) if length else []
                seconds, micros = await self.redis.time() if first else (0, 0)
        except OUTAGE as exc:
            raise self._unavailable(exc) from exc
        if not first:
            return int(length), 0.0
        added_ms = int(to_text(first[0][0]).split("-")[0])
        return int(length), max(0.0, seconds + micros / 1e6 - added_ms / 1000)
