"""The charts' family (0021) holds the rollup the workers' sweepers keep once a minute, and its reads."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from outlast.store.base import Family

KEEP = 8 * 86400.0  # seconds of rollup rows kept: the charts of a week, and the day before
QUEUES_SAMPLED = 200  # queues sampled at most per step


@dataclass(frozen=True)
class RolledUp:
    """``RolledUp`` says what one rollup step wrote: the minutes of runs counted (from ``since`` to
    ``until``), the queues sampled, the old rows deleted."""

    minutes: int
    since: datetime | None
    until: datetime | None
    queues: int
    deleted: int


class Rollups(Family):
    """``Rollups`` makes the rollup's writes (a worker's latencies, one worker's step) and the
    charts' reads."""

    async def flush_latencies(self, flush_id: str, minute: datetime, counts: dict[str, list[int]]) -> None:
        """Add a worker's operation latencies of ``minute`` (bucket counts per tool) to the
        rollup, once per ``flush_id`` (a retry after a lost acknowledgement adds nothing)."""
        tallies = [{"tool": tool, "counts": c} for tool, c in sorted(counts.items())]
        await self._rows("rollup_flush", id=flush_id, minute=minute, tallies=Jsonb(tallies))

    async def rollup_turn(self, every: float) -> bool:
        """Whether this worker takes this step's turn (no other took one within ``every`` / 2)."""
        return bool(await self._rows("rollup_claim", every=every))

    async def rollup_queue_names(self) -> list[str]:
        """The queues to sample: those runs are kept on, and those workers' records name."""
        return [r["queue"] for r in await self._rows("rollup_queue_names", limit=QUEUES_SAMPLED)]

    async def roll_up(
        self, samples: list[tuple[str, int, float]], *, open_minute: bool = False, keep: float = KEEP
    ) -> RolledUp:
        """One step: the runs of the minutes since the last counted (caught up a day at a time),
        ``samples`` (queue, depth, oldest age) as this minute's, old rows deleted. Written whole,
        safe to do again. ``open_minute``: count the current minute so far too (tests)."""
        rows = await self._rows(
            "rollup",
            open=open_minute,
            keep=keep,
            queues=[q for q, _, _ in samples],
            depths=[d for _, d, _ in samples],
            ages=[a for _, _, a in samples],
        )
        return RolledUp(**rows[0])

    async def chart_rows(self, seconds: float) -> dict[str, list[dict[str, Any]]]:
        """The rollup of the last ``seconds``: runs and queue samples per minute; and each tool's
        bucket counts summed over the last day (``whole``) and the last hour (``recent``)."""
        return {
            "runs": await self._rows("chart_runs", seconds=seconds),
            "queues": await self._rows("chart_queues", seconds=seconds),
            "latency": await self._rows("chart_latency", seconds=86400.0, recent=3600.0),
        }
