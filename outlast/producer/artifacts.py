"""This family lists, reads and deletes the artifacts of a run.

An artifact is a file the run's workflow or tools saved (``run.save_artifact``,
``current_action().save_artifact``); one kept past its run is removed only by a delete."""

from __future__ import annotations

import hashlib
from typing import Any

from outlast.errors import InvalidInput, UnknownRun
from outlast.producer.core import ClientCore


class Artifacts(ClientCore):
    """``Artifacts`` lists a run's artifacts, reads one, deletes one."""

    async def artifacts(self, run_id: str) -> list[dict[str, Any]]:
        """The artifacts of ``run_id``, oldest first: name, op_id, sha256, size, media_type, keep,
        created_at. Those saved with ``keep=True`` are listed after their run is pruned."""
        await self.open()
        found = await self.store.artifacts.artifacts(run_id)
        if not found:
            await self.status(run_id)  # an unknown run is refused, not shown as empty
        return [{**a, "created_at": a["created_at"].isoformat()} for a in found]

    async def artifact(self, run_id: str, name: str, op_id: str | None = None) -> bytes:
        """The bytes of artifact ``name`` of ``run_id`` (of operation ``op_id``; else the latest
        saved under that name), checked against their SHA-256."""
        meta = await self.artifact_of(run_id, name, op_id)
        got = (await self.store.payloads.payloads(run_id, [meta["sha256"]])).get(meta["sha256"])
        if got is None or hashlib.sha256(got).hexdigest() != meta["sha256"]:
            raise InvalidInput(f"run '{run_id}': artifact '{name}': its bytes are missing or changed")
        return got

    async def artifact_of(self, run_id: str, name: str, op_id: str | None = None) -> dict[str, Any]:
        """The index row of artifact ``name`` of ``run_id`` (the latest saved under that name)."""
        rows = [
            a
            for a in await self.artifacts(run_id)
            if a["name"] == name and (op_id is None or a["op_id"] == op_id)
        ]
        if not rows:
            raise UnknownRun(f"run '{run_id}' has no artifact '{name}'")
        return rows[-1]

    async def delete_artifact(self, run_id: str, name: str, op_id: str | None = None) -> int:
        """Delete artifact ``name`` of ``run_id`` (of ``op_id`` only, if given); its bytes are
        swept by the payload sweeper once no other artifact or journal entry refers to them. The
        number deleted. The one way to remove an artifact kept past its run (``keep=True``)."""
        await self.open()
        return await self.store.artifacts.drop_artifact(run_id, name, op_id)
