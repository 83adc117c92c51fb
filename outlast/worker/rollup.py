"""The dashboard charts' rollup is a step of every worker's sweeper, every ``OUTLAST_ROLLUP_EVERY`` seconds
(a minute), at the same moments in every worker (multiples of it on the wall clock). At each step:

- every worker adds the latencies its operations took since its last step (``outlast._latency``:
  bucket counts per tool, kept in memory by the hook an operation's end already calls) to the
  minute they fall in, once per flush id: kept and sent again while Postgres is away;
- one worker a step (the one whose conditional update takes the turn) counts the runs started,
  finished and failed per minute from the runs' own times, catching up every minute since the
  last counted, and samples each queue's depth and oldest entry's age from Redis.

The charts read only this rollup (migration 0021): at most minutes x (1 + queues + tools) rows,
kept eight days.
"""

from __future__ import annotations

import math
import time
import uuid
from datetime import UTC, datetime
from typing import Any

from outlast._latency import TALLY, Tally
from outlast.errors import ServiceUnavailable
from outlast.queue import Queue
from outlast.store.rollup import RolledUp, Rollups

USUAL = 5  # minutes a step counts: the one closed since the last, and those before it again
PENDING_MOST = 60  # flushes kept while Postgres is away (an hour at the default step); older dropped


class Rollup:
    """``Rollup`` is one worker's part in the rollup: its latencies, and its turns at counting and
    sampling."""

    def __init__(self, rollups: Rollups, queue: Queue, every: float, tally: Tally = TALLY) -> None:
        self.rollups = rollups
        self.queue = queue
        self.every = every
        self.tally = tally
        now = time.time()
        self.since = now  # start of what the tally holds
        self.next = math.floor(now / every + 1) * every
        self.pending: dict[str, tuple[datetime, dict[str, list[int]]]] = {}  # flush id -> what

    def due(self) -> bool:
        return time.time() >= self.next

    async def step(self, log: Any, open_minute: bool = False) -> RolledUp | None:
        """The latencies flushed; then, on this worker's turn, the runs counted and the queues
        sampled. What the turn wrote, or None (another worker's turn). ``open_minute``: count
        the current minute so far too (tests)."""
        now = time.time()
        self.next = math.floor(now / self.every + 1) * self.every
        await self.flush(now)
        if not await self.rollups.rollup_turn(self.every):
            return None
        done = await self.rollups.roll_up(await self.samples(log), open_minute=open_minute)
        if done.minutes > USUAL:  # minutes missed (no worker, Postgres away), caught up
            log.info(
                "charts.caught_up",
                minutes=done.minutes,
                since=f"{done.since:%Y-%m-%d %H:%M}",
                until=f"{done.until:%Y-%m-%d %H:%M}",
            )
        return done

    async def flush(self, now: float) -> None:
        """Add what the tally counted since the last flush to the minute in the middle of that
        span, under an id of its own; a flush Postgres did not take is kept for the next step."""
        counts = self.tally.take()
        if counts:
            middle = (self.since + now) / 2
            minute = datetime.fromtimestamp(middle - middle % 60, UTC)
            self.pending[uuid.uuid4().hex] = (minute, counts)
            for stale in list(self.pending)[:-PENDING_MOST]:
                del self.pending[stale]
        self.since = now
        for flush_id, (minute, c) in list(self.pending.items()):
            await self.rollups.flush_latencies(flush_id, minute, c)
            del self.pending[flush_id]

    async def samples(self, log: Any) -> list[tuple[str, int, float]]:
        """Each queue's depth and oldest entry's age now; none while Redis is away (the runs are
        counted all the same)."""
        out = []
        try:
            for q in await self.rollups.rollup_queue_names():
                depth, age = await self.queue.depth(q)
                out.append((q, depth, age))
        except ServiceUnavailable as exc:
            log.warning("charts.queues_not_sampled", error=str(exc))
            return []
        return out
