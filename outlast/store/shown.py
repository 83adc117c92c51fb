"""The shown family reads what a run shows while it runs (its state, one row a key with a
version) from outside. The rows are written by the journal entries that record them, in the fenced
append's own statement (migration 0025's trigger): a replayed crossing writes nothing, a lost
acknowledgement nothing twice. Custom events are rows of ``events``, read as every other."""

from __future__ import annotations

from typing import Any

from outlast.store.payloads import Payloads


class StoreShown(Payloads):
    """Read a run's state."""

    async def run_state(self, run_id: str, key: str | None = None) -> list[dict[str, Any]]:
        """The run's state rows (key, value, version, seq, updated_at), one key's or all, by key;
        a value held by reference read back whole (migration 0036)."""
        rows = await self._rows("run_state", run_id=run_id, key=key)
        await self._read_back(run_id, rows, "value", "value")
        return rows
