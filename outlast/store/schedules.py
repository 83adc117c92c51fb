"""The schedules family stores schedules declared in code, their pauses and last ticks."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from outlast._schedules import Schedule
from outlast.store.base import Family


class Schedules(Family):
    """``Schedules`` records, reads, advances and pauses schedules."""

    async def declare_schedule(self, sched: Schedule, queue: str) -> None:
        """Record a schedule as declared in code (its pause and last tick stay as they are)."""
        await self._rows(
            "declare_schedule",
            schedule=sched.name,
            workflow=sched.workflow,
            queue=queue,
            cron=sched.cron,
            tz=sched.tz,
            input=Jsonb(sched.input),
            catch_up=sched.catch_up,
        )

    async def schedules(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        """Every schedule (or those named), each with ``db_now``, the database clock."""
        return await self._rows("schedules", names=names)

    async def advance_schedule(self, name: str, was: datetime, tick: datetime) -> bool:
        """Move the schedule's last tick from ``was`` to ``tick``; False if another worker did,
        or it was paused meanwhile."""
        return bool(await self._rows("advance_schedule", schedule=name, was=was, tick=tick))

    async def pause_schedule(self, name: str, paused: bool) -> dict[str, Any] | None:
        """Pause or resume a schedule (resumed, it goes on from now); None if there is none."""
        rows = await self._rows("pause_schedule", schedule=name, paused=paused)
        return rows[0] if rows else None
