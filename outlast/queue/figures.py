"""This module reads what Redis says of a queue, for ``outlast queues`` and the metrics gauges."""

from __future__ import annotations

from redis.exceptions import ResponseError

from outlast.queue.connection import OUTAGE, Connection
from outlast.queue.entries import GROUP, LEVELS, QueueFigures, to_bytes, to_text


class Figures(Connection):
    """``Figures`` reads the streams' lengths, pending entries, backlog and their ages."""

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
        length, _, age = await self._backlogs(queue)
        return length, age

    async def depth(self, queue: str) -> tuple[int, float]:
        """The entries of the queue's streams (every level) not yet delivered to any worker (the
        length less the entries pending: an acknowledged entry is deleted), and the age of the
        oldest of them, as ``backlog``. For the charts' rollup, once a minute."""
        length, pending, age = await self._backlogs(queue)
        return max(length - pending, 0), age

    async def _backlogs(self, queue: str) -> tuple[int, int, float]:
        length, pending, age = 0, 0, 0.0
        for level in LEVELS:
            n, p, a = await self._backlog(self.stream(queue, level))
            length, pending, age = length + n, pending + p, max(age, a)
        return length, pending, age

    async def _backlog(self, stream: str) -> tuple[int, int, float]:
        try:
            async with self._gate:
                length = await self.redis.xlen(stream)
                groups = await self.redis.xinfo_groups(stream) if length else []
                group = next((g for g in groups if to_text(g["name"]) == GROUP), None)
                last = group["last-delivered-id"] if group is not None else b"0-0"
                pending = int(group["pending"]) if group is not None else 0
                first = await self.redis.xrange(stream, min=b"(" + to_bytes(last), count=1) if length else []
                seconds, micros = await self.redis.time() if first else (0, 0)
        except OUTAGE as exc:
            raise self._unavailable(exc) from exc
        if not first:
            return int(length), pending, 0.0
        added_ms = int(to_text(first[0][0]).split("-")[0])
        return int(length), pending, max(0.0, seconds + micros / 1e6 - added_ms / 1000)
