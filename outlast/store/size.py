"""The size family reads what a run keeps stored, by part, and writes its one size warning. The
bytes a run journals are counted by the append itself (``journal_bytes``, from the writer's own
count of the bodies it sends: ``outlast._journal.body_bytes``); nothing here runs on a write."""

from __future__ import annotations

import asyncio
from typing import Any

from psycopg.types.json import Jsonb

from outlast.store.base import Family


class Size(Family):
    """``Size`` reads a run's stored bytes and writes its size warning."""

    async def run_bytes(self, run_id: str) -> dict[str, int]:
        """What the run keeps stored, in bytes, by part (journal, earlier generations, messages,
        state, events), in the order ``sql/size.sql`` says them."""
        return {r["part"]: r["bytes"] for r in await self._rows("run_bytes", run_id=run_id)}

    def submit_size_warning(
        self, run_id: str, detail: dict[str, Any]
    ) -> asyncio.Future[list[dict[str, Any]]]:
        """Mark the run as past its size threshold and write its 'size_warning' event, queued now:
        a row if this write did it, none if the run was marked already (or is final)."""
        return self._submit("size_warning", run_id=run_id, detail=Jsonb(detail))
