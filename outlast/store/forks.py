"""The forks family starts a run from part of another's journal (``outlast fork RUN --from OP``)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from psycopg.types.json import Jsonb

from outlast._journal import Entry
from outlast._model import RunRecord
from outlast.store.base import Family


class Forks(Family):
    """``Forks`` commits a fork: the new run and the journal it starts with, in one statement."""

    async def fork_run(
        self,
        original: str,
        run_id: str,
        entries: Sequence[Entry],
        detail: dict[str, Any],
        trace_context: dict[str, str] | None = None,
    ) -> RunRecord | None:
        """Commit the fork ``run_id`` of ``original`` with ``entries`` (a prefix of its journal,
        copied as they are); None if ``run_id`` exists already."""
        rows = await self._write(
            "fork_run",
            original=original,
            id=run_id,
            head=entries[-1].hash if entries else "",
            len=len(entries),
            seqs=[e.seq for e in entries],
            kinds=[e.kind for e in entries],
            ops=[e.op_id for e in entries],
            bodies=[e.body for e in entries],
            hashes=[e.hash for e in entries],
            detail=Jsonb(detail),
            trace_context=None if trace_context is None else Jsonb(trace_context),
        )
        return RunRecord.from_row(rows[0]) if rows else None
