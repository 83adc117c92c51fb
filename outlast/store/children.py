"""The children family stores child runs started by a run, and their parents' waits."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from outlast.store.base import Family
from outlast.store.records import ChildStart


class Children(Family):
    """``Children`` starts a child run (fenced by its parent), waits for it, and wakes its parent."""

    async def insert_child(self, parent: str, token: int, row: dict[str, Any]) -> ChildStart:
        """Insert a child run of ``parent`` (fenced by the parent's ``token``; refused once the
        parent's cancellation was requested), idempotent on its id. ``row``: id, workflow, queue,
        input, input_hash, program, trace_context."""
        trace = row["trace_context"]
        params = {**row, "input": Jsonb(row["input"])}
        params["trace_context"] = None if trace is None else Jsonb(trace)
        params["window"] = self.tenant_window
        rows = await self._write("insert_child", run_id=parent, token=token, **params)
        r = rows[0]
        return ChildStart(r["held"], r["cancel_requested"], r["created"], r["held_back"])

    async def wait_child(self, run_id: str, token: int, child: str, message: str) -> bool:
        """Give up the lease and wait durably for the run ``child`` (fenced)."""
        detail = Jsonb({"reason": "child", "child": child, "message": message})
        rows = await self._write("wait_child", run_id=run_id, token=token, child=child, detail=detail)
        return bool(rows)

    async def wake_child_waiters(self, limit: int = 500) -> list[str]:
        """Make due the runs waiting for a child that is final; their ids."""
        return [r["id"] for r in await self._rows("wake_child_waiters", limit=limit)]

    async def wake_parent(self, parent: str, child: str) -> str | None:
        """Make ``parent`` due now if it waits for ``child``; its queue, or None."""
        rows = await self._write("wake_parent", id=parent, child=child)
        return rows[0]["queue"] if rows else None

    async def children(self, ids: list[str]) -> list[str]:
        """The unfinished runs started by any of ``ids``."""
        return [r["id"] for r in await self._rows("children", ids=ids)]

    async def children_of(self, run_id: str, most: int) -> list[dict[str, Any]]:
        """The first ``most`` runs ``run_id`` started, oldest first: id, workflow, state, reason."""
        return await self._rows("children_of", run_id=run_id, most=most)

    async def children_tree(self, run_id: str, depth: int, most: int) -> list[dict[str, Any]]:
        """The runs ``run_id`` started and theirs, breadth first, ``depth`` levels and ``most``
        runs at most, in one statement: id, workflow, state, reason, parent, depth."""
        return await self._rows("children_tree", run_id=run_id, depth=depth, most=most)
