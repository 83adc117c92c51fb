"""This family starts a fork of a run. ``fork(run_id, from_op=OP)`` starts a new run whose journal
is the original's up to operation OP, copied as it is (those results served on replay: their effects not
redone, their idempotency keys kept), then goes on live from OP on the code deployed now. The new
run refers to the original (``parent_id``, a ``forked_from`` event), keeps its tenant, deadline and
budget (shared); the original gets a ``forked`` event naming it."""

from __future__ import annotations

import re
import uuid
from collections import defaultdict
from collections.abc import Sequence

from outlast import _tracing as tracing
from outlast._journal import Entry, operation_state
from outlast._model import RunRecord
from outlast.errors import InvalidInput, RunConflict
from outlast.identity import Principal
from outlast.producer.checks import check_text
from outlast.producer.core import ClientCore
from outlast.queue import MAX_RUN_ID

_OP = re.compile(r"op-(\d+)")


def _position(op_id: str | None) -> int | None:
    m = _OP.fullmatch(op_id or "")
    return int(m.group(1)) if m else None


def _order(op_id: str | None) -> int:
    return _position(op_id) or 0


def forked_journal(run_id: str, entries: Sequence[Entry], from_op: str) -> list[Entry]:
    """The entries a fork from ``from_op`` starts with: every entry before the first one of
    ``from_op`` or of a later operation. Refused when ``from_op`` is not in the journal, or when an
    operation before it is left open there (no result: the fork would dispatch it again under
    a new key), naming the way out."""
    at = _position(from_op)
    if at is None or not any(e.op_id == from_op for e in entries):
        ops = sorted({e.op_id for e in entries if _position(e.op_id) is not None}, key=_order)
        raise InvalidInput(f"run '{run_id}' has no operation {from_op!r} to fork from; its journal has {ops}")
    cut = next(i for i, e in enumerate(entries) if (_position(e.op_id) or 0) >= at)
    kept = list(entries[:cut])
    by_op: dict[str, list[Entry]] = defaultdict(list)
    for e in kept:
        by_op[e.op_id or ""].append(e)
    open_ops = [op for op, es in by_op.items() if operation_state(es)[0] not in ("done", "none")]
    if open_ops:
        raise InvalidInput(
            f"run '{run_id}': {', '.join(sorted(open_ops, key=_order))} had no result before {from_op} "
            f"was journaled; fork from {min(open_ops, key=_order)} instead"
        )
    return kept


class Forks(ClientCore):
    """``Forks`` starts a run from part of another run's journal."""

    async def fork(
        self,
        run_id: str,
        *,
        from_op: str,
        run_id_new: str | None = None,
        principal: Principal | None = None,
    ) -> RunRecord:
        """Start a new run from ``run_id``'s journal up to operation ``from_op`` (``op-3``): the
        operations before it are served from the copied journal (no effect redone, same keys),
        ``from_op`` and what follows run live, on the code the workers serve now, with the new
        run's keys. Idempotent on ``run_id_new``."""
        original = await self.status(run_id)
        if original.generation:
            raise InvalidInput(
                f"run '{run_id}' was carried forward: a fork starts from its first generation only"
            )
        new_id = (
            check_text(run_id_new, "the run id", "fork", MAX_RUN_ID) if run_id_new else uuid.uuid4().hex[:20]
        )
        kept = forked_journal(run_id, await self.store.journal.journal(run_id), from_op)
        detail = {"from": from_op, "entries": len(kept)} | (principal.record() if principal else {})
        run = await self.store.forks.fork_run(run_id, new_id, kept, detail, tracing.carrier())
        if run is None:  # asked again: the fork made before, else another run's id
            run = await self.status(new_id)
            if run.parent_id != run_id:
                raise RunConflict(new_id, f"origin (it is not a fork of '{run_id}')")
            return run
        await self.queue.publish(run.queue, run.id, priority=run.priority)
        return run
