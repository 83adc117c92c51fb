"""This module holds the commit of a run's carry forward, which ends its journal's generation.

``run.carry_forward`` raises ``CarriedForward``; the executor settles the workflow, commits the
carry here and runs the workflow again, on the same lease, as the next generation, from an empty
journal.

The run stays the run: its id, messages, state, events, budget and deadline are the run's, not a
generation's. What the ended generation journaled moves, entry for entry, to the generations the
run keeps until they are pruned; its held results are written first, in the same shared commit.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import structlog

from outlast._journal import canonical
from outlast._model import RunRecord
from outlast._payloads import INPUT, by_reference, held_by_reference
from outlast.errors import Fenced
from outlast.store.generations import Carry, Generations
from outlast.worker.control import CarriedForward, RunControl
from outlast.worker.journaled import Journaled
from outlast.worker.writes import JournalWrites

log = structlog.get_logger("outlast.worker")


async def carried(
    generations: Generations,
    writes: JournalWrites,
    control: RunControl,
    run: RunRecord,
    journal: Journaled | None,
    carry: CarriedForward,
) -> RunRecord:
    """Commit the carry (fenced: ``Fenced`` if another worker holds the run now) and return the
    run as its next generation starts: the input it carries, an empty journal."""
    assert journal is not None, "a generation carries forward once its workflow ran"
    held = await _held(writes, run.input), await _held(writes, carry.input)
    ended = Carry(run.generation, held[0], run.op_base, journal.head, journal.length, held[1], carry.op_base)
    written = generations.carry(run.id, control.token, ended)
    if not await writes.fenced("carry", written, chained=True):
        raise Fenced(run.id, control.token)
    nxt = run.generation + 1
    log.info("run.carried_forward", run_id=run.id, generation=nxt, entries=journal.length)
    return dataclasses.replace(
        run, input=carry.input, generation=nxt, op_base=carry.op_base, journal_head="", journal_len=0
    )


async def _held(writes: JournalWrites, value: dict[str, Any]) -> dict[str, Any]:
    """An input past ``OUTLAST_MAX_PAYLOAD`` stored in the payload store (once in the worker: the
    ended generation's input is the one the carry before stored), and what its row holds instead:
    ``{"$refs": {"input": ...}}``, read back whole as a run's input is. A small one as it is."""
    if writes.inline_max is None:
        return value
    text = canonical(value)
    if not by_reference(value, text, writes.inline_max):
        return value
    held, sha, body = held_by_reference(INPUT, text)
    await writes.store_payloads({sha: body})
    return held
