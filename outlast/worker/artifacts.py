"""This module stores a run's artifacts, kept whole outside its journal.

An artifact is a file a workflow (``run.save_artifact``) or a tool
(``current_action().save_artifact``) saves as the run's.

The bytes are a value of the payload store (stored once per run under their SHA-256, as the
journal's values by reference are, through the run's writes: an outage of the store is waited
out), then indexed by (run, operation, name) in the artifacts family. A save is idempotent on
(run, operation, name, SHA-256): a replayed crossing or a tool dispatched again writes nothing
twice. In a workflow the save is a journaled crossing (a ``value`` entry named ``artifact``): a
replay returns the journaled reference and stores nothing.
"""

from __future__ import annotations

import asyncio
import hashlib
import mimetypes
import os
from pathlib import Path
from typing import Any

from outlast._journal import Unstorable
from outlast._payloads import too_large
from outlast.errors import InvalidInput
from outlast.store.artifacts import Artifacts
from outlast.worker.control import RunControl
from outlast.worker.replayer import Replayer
from outlast.worker.writes import JournalWrites

NAME_CHARS = 200
OCTETS = "application/octet-stream"
Data = bytes | bytearray | memoryview | str | os.PathLike[str]


def media_type_of(name: str, given: str | None) -> str:
    """The media type given, else the one the name's extension says, else octet-stream."""
    return given or mimetypes.guess_type(name)[0] or OCTETS


async def read(data_or_path: Data) -> bytes:
    """The bytes to save: bytes as they are, a path (``str`` or ``os.PathLike``) read whole."""
    if isinstance(data_or_path, bytes | bytearray | memoryview):
        return bytes(data_or_path)
    if isinstance(data_or_path, str | os.PathLike):
        path = os.fspath(data_or_path)
        return await asyncio.to_thread(Path(path).read_bytes)
    raise InvalidInput(f"an artifact is bytes or a path, not {type(data_or_path).__name__}")


class RunArtifacts:
    """``RunArtifacts`` saves one run's artifacts: the bytes through its writes, the index row."""

    def __init__(
        self, artifacts: Artifacts, writes: JournalWrites, control: RunControl, replayer: Replayer
    ) -> None:
        self.run_id = control.run_id
        self._artifacts, self._writes, self._control, self._replayer = artifacts, writes, control, replayer

    async def save(
        self, op_id: str, name: str, data_or_path: Data, media_type: str | None, keep: bool
    ) -> dict[str, Any]:
        """Store ``data_or_path`` as artifact ``name`` of operation ``op_id``; its reference."""
        if not isinstance(name, str) or not name.strip() or len(name) > NAME_CHARS or "\x00" in name:
            raise InvalidInput(f"run '{self.run_id}': an artifact's name is text of 1 to {NAME_CHARS} chars")
        data = await read(data_or_path)
        limit = self._writes.referenced
        if limit is not None and len(data) > limit:
            exc = Unstorable(f"{len(data)} bytes is over the limit of {int(limit)} ({limit.setting})")
            raise too_large(self.run_id, f"artifact '{name}'", exc)
        kind = media_type_of(name, media_type)
        sha = hashlib.sha256(data).hexdigest()
        ref: dict[str, Any] = {"sha256": sha, "size": len(data), "media_type": kind}
        await self._writes.store_payloads({sha: data}, kind)
        await self._control.db(self._artifacts.put_artifact(self.run_id, op_id, name, ref, keep))
        return {"name": name, "op_id": op_id, **ref, "keep": keep}

    async def crossing(
        self, op_id: str, name: str, data_or_path: Data, media_type: str | None, keep: bool
    ) -> dict[str, Any]:
        """A workflow's save: journaled once (a ``value`` named ``artifact``), then the journal's."""
        replayer = self._replayer
        replayer.enter(op_id)
        if replayer.journaled(op_id):
            e = replayer.entry(op_id, "value")
            if e is None or e.data.get("name") != "artifact" or e.data["value"].get("name") != name:
                raise replayer.mismatch(op_id, f"save_artifact({name!r})")
            saved: dict[str, Any] = e.data["value"]
            return saved
        await replayer.go_live(op_id, lambda: f"save_artifact({name!r})")
        saved = await self.save(op_id, name, data_or_path, media_type, keep)
        await replayer.append("value", op_id, {"name": "artifact", "value": saved})
        return saved
