"""The first family keeps a run waiting on the first of several waits (``run.first``)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from outlast.store.base import Family


class Firsts(Family):
    """The wait on the first of several waits (fenced), and the sweeper's wake-up of one whose
    child ended."""

    async def wait_first(
        self,
        run_id: str,
        token: int,
        *,
        state: str,
        wake_at: datetime | None,
        child: str | None,
        detail: dict[str, Any],
        channels: list[str] | None = None,
        seen: int | None = None,
    ) -> bool:
        """Give up the lease and wait (``state``: ``waiting``, or ``awaiting_approval`` when an
        approval is among the waits) until ``wake_at``, an answer, a decision, ``child``'s end or a
        message on one of ``channels``; with channels, only if the run's count of accepted messages
        is still ``seen`` (False: look again, as a fenced-out wait is)."""
        rows = await self._write(
            "wait_first",
            run_id=run_id,
            token=token,
            state=state,
            wake_at=wake_at,
            child=child,
            detail=Jsonb(detail),
            channels=channels or None,
            seen=seen,
        )
        return bool(rows)

    async def wake_first_waiters(self, limit: int = 500) -> list[str]:
        """Make due the runs waiting on the first of several waits whose child is final; their ids."""
        return [r["id"] for r in await self._rows("wake_first_waiters", limit=limit)]
