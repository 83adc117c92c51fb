"""The pauses family stores an operator's pause of a run, a workflow or a queue, and lifts it. A
paused run stops at its next crossing (its worker parks it: ``park_paused``) or at its claim, and
waits, reason ``paused``, holding no worker, until every pause that holds it is lifted."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from outlast.store.base import Family

SCOPES = ("run", "workflow", "queue")


class Pauses(Family):
    """``Pauses`` records and lifts pauses, says which hold a run, and parks a held run."""

    async def pause(self, scope: str, target: str, by: dict[str, Any], why: str) -> dict[str, Any]:
        """Record the pause of ``target`` (a run id, a workflow's or a queue's name), who paused it
        (``by``, a principal's record) and why; a pause given again replaces the earlier one."""
        rows = await self._write("pause", scope=scope, target=target, by=Jsonb(by), why=why)
        pause: dict[str, Any] = rows[0]["pause"]
        return pause

    async def unpause(
        self, scope: str, target: str, detail: dict[str, Any]
    ) -> tuple[dict[str, Any] | None, list[tuple[str, str, str]]]:
        """Lift the pause of ``target`` (None: there was none), then queue again the runs it had
        parked that no other pause holds: their (id, queue, priority), to publish."""
        rows = await self._write("unpause", scope=scope, target=target)
        let_go = await self._write("let_go", scope=scope, target=target, detail=Jsonb(detail))
        gone = [(r["id"], r["queue"], r["priority"]) for r in let_go]
        return (rows[0]["pause"] if rows else None), gone

    async def pauses(self) -> list[dict[str, Any]]:
        """Every pause in force, oldest first."""
        return [r["pause"] for r in await self._rows("pauses")]

    async def pause_of(self, run_id: str) -> list[dict[str, Any]]:
        """The pauses that hold the run: its own, its workflow's, its queue's."""
        return [r["pause"] for r in await self._rows("pause_of", id=run_id)]

    async def park_paused(self, run_id: str, token: int, message: str) -> str | None:
        """Park the held run (fenced) while a pause holds it: ``waiting``; ``queued`` if every
        pause was lifted meanwhile (to publish); None if another worker owns it now."""
        rows = await self._write("park_paused", id=run_id, token=token, message=message)
        return str(rows[0]["state"]) if rows else None
