"""The flow family (0011_flow) stores concurrency slots, and runs parked for a slot or a rate."""

from __future__ import annotations

from datetime import datetime

from psycopg.types.json import Jsonb

from outlast.store.base import Family


class Flow(Family):
    """Take and free concurrency slots under a run's token; park a run until there is room."""

    async def acquire_slot(
        self, key: str, cap: int, run_id: str, token: int, ttl: float, holder: str = ""
    ) -> int | None:
        """Take one of the ``cap`` slots of ``key`` for the run under its current ``token``, held
        ``ttl`` seconds (renewed with its lease): the slot number, or None when all are taken (or
        the token is stale). On a pooled connection of its own, never the writer's batch: it may
        wait for a rival's insert of the same slot."""
        rows = await self._rows(
            "acquire_slot", key=key, cap=cap, run_id=run_id, token=token, ttl=ttl, holder=holder
        )
        return int(rows[0]["slot"]) if rows else None

    async def release_slots(self, run_id: str, token: int, holder: str | None = None) -> int:
        """Free the slots the run holds under ``token`` (only ``holder``'s, when given); the run
        parked for each key freed that was due first is due at once."""
        return len(await self._rows("release_slots", run_id=run_id, token=token, holder=holder))

    async def park(
        self, run_id: str, token: int, reason: str, message: str, wake_at: datetime, slot_key: str | None
    ) -> bool:
        """Wait (fenced) for a slot of ``slot_key`` — woken at once when one is released — or,
        without a key, for room in a rate window; tried again at ``wake_at`` in any case."""
        rows = await self._write(
            "park",
            id=run_id,
            token=token,
            reason=reason,
            slot_key=slot_key,
            wake_at=wake_at,
            detail=Jsonb({"reason": reason, "message": message}),
        )
        return bool(rows)
