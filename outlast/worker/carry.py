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

import structlog

from outlast._model import RunRecord
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
    ended = Carry(
        run.generation, run.input, run.op_base, journal.head, journal.length, carry.input, carry.op_base
    )
    written = generations.carry(run.id, control.token, ended)
    if not await writes.fenced("carry", written, chained=True):
        raise Fenced(run.id, control.token)
    nxt = run.generation + 1
    log.info("run.carried_forward", run_id=run.id, generation=nxt, entries=journal.length)
    return dataclasses.replace(
        run, input=carry.input, generation=nxt, op_base=carry.op_base, journal_head="", journal_len=0
    )
