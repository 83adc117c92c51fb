"""The generations family carries a run forward (``run.carry_forward``). The current generation of
a run's journal is in ``journal``; ``carry`` moves it to ``journal_past`` and starts the next, in
one fenced statement; the ended generations are read back from there."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from outlast._journal import Entry
from outlast._payloads import INPUT
from outlast.store.payloads import Payloads


@dataclass(frozen=True)
class Generation:
    """An ended generation of a run: the input it started with, its operations numbered after
    ``op_base``, and where its hash chain ended."""

    generation: int
    input: dict[str, Any]
    op_base: int
    journal_head: str
    journal_len: int
    carried_at: datetime


@dataclass(frozen=True)
class Carry:
    """What the worker knows of a carry: the generation ending (as it chained it) and the next."""

    generation: int
    input: dict[str, Any]
    op_base: int
    journal_head: str
    journal_len: int
    next_input: dict[str, Any]
    next_base: int


class Generations(Payloads):
    """``Generations`` carries a run forward and reads its ended generations."""

    async def carry(self, run_id: str, token: int, carry: Carry) -> bool:
        """End generation ``carry.generation`` of the run (on a journal of ``journal_len``
        entries, written with it: see ``JournalWrites.fenced``) and start the next with
        ``next_input`` (fenced). False if the token is stale or the journal not that long."""
        rows = await self._write(
            "carry",
            id=run_id,
            token=token,
            generation=carry.generation,
            input=Jsonb(carry.input),
            op_base=carry.op_base,
            journal_head=carry.journal_head,
            journal_len=carry.journal_len,
            next_input=Jsonb(carry.next_input),
            next_base=carry.next_base,
            detail=Jsonb({"generation": carry.generation + 1, "entries": carry.journal_len}),
        )
        return bool(rows)

    async def generations(self, run_id: str) -> list[Generation]:
        """The run's ended generations, oldest first (none until it carries forward)."""
        rows = await self._rows("generations", run_id=run_id)
        await self._read_back(run_id, rows, "input", INPUT)  # an input held by reference, whole
        return [Generation(**r) for r in rows]

    async def journal_past(self, run_id: str, generation: int) -> list[Entry]:
        """The entries of an ended generation of the run, in order ([] if none is kept)."""
        rows = await self._rows("journal_past", run_id=run_id, generation=generation)
        entries = [Entry(r["seq"], r["kind"], r["op_id"], r["body"], r["hash"]) for r in rows]
        return await self.resolve(run_id, entries)
