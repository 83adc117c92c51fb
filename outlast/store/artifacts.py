"""The artifacts family holds the index of the files a run saved.

They are saved by ``run.save_artifact`` or a tool's ``current_action().save_artifact``: one row by
(run, operation, name) with the SHA-256, size and media type of bytes the payloads family stores
(``sql/artifacts.sql``, migration 0035)."""

from __future__ import annotations

from typing import Any

from outlast.store.base import Family


class Artifacts(Family):
    """Index a run's artifacts, list them, delete one."""

    async def put_artifact(self, run_id: str, op_id: str, name: str, ref: dict[str, Any], keep: bool) -> bool:
        """Index artifact ``name`` of operation ``op_id`` (its bytes stored already, ``ref``: sha256,
        size, media_type). True if this wrote the row, False if it held these bytes already."""
        rows = await self._rows("artifact_put", run_id=run_id, op_id=op_id, artifact=name, keep=keep, **ref)
        return bool(rows)

    async def artifacts(self, run_id: str) -> list[dict[str, Any]]:
        """The artifacts of ``run_id``, oldest first."""
        return await self._rows("artifacts_of", run_id=run_id)

    async def drop_artifact(self, run_id: str, name: str, op_id: str | None = None) -> int:
        """Delete artifact ``name`` of ``run_id`` (of ``op_id`` only, if given): the rows deleted."""
        return len(await self._rows("artifact_drop", run_id=run_id, artifact=name, op_id=op_id))
