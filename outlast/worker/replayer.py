"""The replayer holds the run's journal and the cursor over it.

On resume the workflow runs again from the start; each crossing whose entries are journaled is
served from here (loaded once, in one query) with no effect and no round trip. A crossing that
asks for something else than the journal holds is refused (``ResumeImpossible``); a crossing
past the journal goes live, once cancellation and the deadline have had their say. Every entry
the worker writes is appended here, chained to the one before.

A **held** entry (a read's or an idempotent tool's result, ``hold``) is chained at once and kept
by the run's ``JournalWrites`` (``writes.py``) for at most ``hold_ms`` and ``hold_max`` entries: it
is written by the run's next append, chained first in the same fenced statement, or by its
``flush``, which every other fenced write of the run awaits first (``JournalWrites.fenced``). A
held entry lost with its worker is a result never journaled: the read is redone, the idempotent
tool dispatched again with its key.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

from outlast import _failpoints as failpoints
from outlast._journal import Entry, Oversized, make_entry
from outlast._model import RunRecord
from outlast._payloads import INLINE_ONLY, JSON, REFS, Resolved, offload, offload_shown, reads_as_reference
from outlast.errors import Cancelled, DeadlineExceeded, ResumeImpossible
from outlast.worker.control import JournalEnd, RunControl
from outlast.worker.journaled import Journaled, asked_by_result, describe, describe_entry
from outlast.worker.writes import JournalWrites

__all__ = ["Journaled", "Replayer", "asked_by_result", "describe"]

# The appends that are a fenced write of their own kind (a cancellation, an in-doubt declaration):
# carrying held entries, they are the crash points ``with_result_held:KIND`` and
# ``after_fenced_write:KIND``, as the other fenced writes are in ``JournalWrites.fenced``.
_CROSSED = frozenset({"cancel", "in_doubt"})


class Replayer:
    """The ``Replayer`` holds positions, the journal cursor, appends, and the refusals of a replay
    that diverges."""

    def __init__(
        self,
        *,
        record: RunRecord,
        control: RunControl,
        writes: JournalWrites,
        journal: Journaled,
        db_now: datetime | None = None,
    ) -> None:
        self.run_id = record.id
        self.deadline = record.deadline
        self.journal = journal
        self._control = control
        self._writes = writes  # the run's appends, held entries first
        self._clock = (db_now, time.monotonic())
        # Positions go on from the run's earlier generations (``op_base``): an operation id, and
        # the idempotency key made of it, is never used twice in a run carried forward.
        self._base = self._next = record.op_base
        self._served: set[str] = set()
        # the highest position journaled: a patch marker goes live only past it
        self._last = max((int(op[3:]) for op in journal.ops if op.startswith("op-")), default=self._base)
        self._patches: dict[str, bool] = {}
        self._marks: list[tuple[str, dict[str, Any]]] = []  # patch markers not yet journaled

    def position(self) -> str:
        """The next operation id: fixed when a crossing is *made*, so that parallel calls keep
        their identity across resumes."""
        self._next += 1
        return f"op-{self._next}"

    def enter(self, op_id: str) -> None:
        """Every crossing starts here: a worker handing over stops here; a cancellation
        journaled at this crossing is raised again."""
        self._control.check_stop()
        self._served.add(op_id)
        if self.entry(op_id, "cancel") is not None:
            raise Cancelled()

    def patched(self, name: str) -> bool:
        """A patch marker: True where the run takes the new branch, False where its journal shows
        that it went past this point before the patch existed (it replays the old branch). A run
        that takes the new branch journals the marker at this position, written with its next
        entry (no commit of its own: a run that ends before then replays to True again). The same
        name gives the same answer for the rest of the run."""
        if name in self._patches:
            return self._patches[name]
        op_id = f"op-{self._next + 1}"
        mark = self.entry(op_id, "patch")
        taken = mark.data.get("name") == name if mark is not None else self._next >= self._last
        if taken:
            self.enter(self.position())
            if mark is None:
                self._marks.append((op_id, {"name": name}))
        self._patches[name] = taken
        return taken

    def replaying(self) -> bool:
        """True until the workflow has made a crossing past the last journaled one: what it does
        meanwhile (a live chunk) may have been done before the resume."""
        return self._last > self._base and self._next <= self._last

    @property
    def positions(self) -> int:
        """The positions handed out so far, the run's earlier generations' included."""
        return self._next

    def journaled(self, op_id: str) -> bool:
        return op_id in self.journal.ops

    def entry(self, op_id: str, kind: str) -> Entry | None:
        return self.journal.ops.get(op_id, {}).get(kind)

    def history(self, op_id: str) -> list[Entry]:
        return self.journal.history[op_id]

    def serve(self, op_id: str) -> None:
        """Count an operation as asked for (compensations, which no workflow line asks)."""
        self._served.add(op_id)

    def mismatch(self, op_id: str, program: str, program_hash: str | None = None) -> ResumeImpossible:
        """The refusal of a crossing that asks ``program`` where the journal holds something else;
        both arguments hashes are named where there are arguments (a call, an approval)."""
        first = min(self.journal.ops[op_id].values(), key=lambda e: e.seq)
        return ResumeImpossible(
            self.run_id,
            first.seq,
            describe_entry(first),
            program,
            operation=op_id,
            journal_hash=first.data.get("args_hash"),
            program_hash=program_hash,
        )

    def check_consumed(self) -> None:
        """A run that ends while journaled crossings were never asked for has diverged."""
        for op_id in self.journal.ops:
            if op_id not in self._served:
                raise self.mismatch(op_id, "nothing more (the workflow returned)")

    def db_now(self) -> datetime:
        """The clock of due times (``outlast_now()``, the database's plus the schema's offset),
        read at the claim and carried on by the local monotonic clock."""
        at, mono = self._clock
        base = at or datetime.now(UTC)
        return base + timedelta(seconds=time.monotonic() - mono)

    async def go_live(self, op_id: str, asks: Callable[[], str] | None = None) -> None:
        """Where the run would go live or block: a cancellation or a passed deadline stops it;
        an offline replay ends here (``JournalEnd``, naming what the code ``asks``)."""
        if self._control.offline:
            raise JournalEnd(op_id, asks() if asks is not None else "a crossing past the journal")
        if self._control.cancel.is_set():
            await self.append("cancel", op_id, {})
            raise Cancelled()
        if self.deadline is not None and self.db_now() >= self.deadline:
            raise DeadlineExceeded(
                f"run '{self.run_id}': its deadline {self.deadline:%Y-%m-%d %H:%M:%S %Z} passed "
                f"(at {op_id}); to carry on, continue it in a new run"
            )

    async def append(self, kind: str, op_id: str, data: dict[str, Any], take: str | None = None) -> Entry:
        """Journal one entry as the lease holder (fenced), with the held entries before it, in one
        statement (which also takes the message ``take`` from the run's inbox, when given).
        Parallel calls append concurrently: each entry is chained to the head *before* its write
        commits, and the writer commits a run's writes in order; a write that fails leaves the
        run, so the head never outlives it."""
        if self._control.offline:  # never reached past go_live; a write is refused all the same
            raise JournalEnd(op_id, f"to journal a {kind} entry")
        entry = self._chained(kind, op_id, data) or await self._offloaded(kind, op_id, data)
        crossed = kind in _CROSSED and self._writes.held  # a crash test's kill points (inert unless armed)
        if crossed:
            failpoints.hit("with_result_held", kind)
        await self._writes.commit(entry, take)
        if crossed:
            failpoints.hit("after_fenced_write", kind)
        return entry

    async def append_held(
        self,
        kind: str,
        op_id: str,
        data: dict[str, Any],
        key: str,
        ref: Mapping[str, Any],
        got: bytes | str,
        take: str | None = None,
    ) -> Entry:
        """``append`` for an entry whose value at ``key`` is in the payload store already, by
        ``ref`` (a message's take: the reference its row holds), ``got`` the text it was read
        from: journaled by that reference, as ``offload`` would, without serialising the value."""
        if self._control.offline:
            raise JournalEnd(op_id, f"to journal a {kind} entry")
        kept = {k: v for k, v in data.items() if k != key}
        kept[REFS] = {key: {"sha256": ref["sha256"], "size": ref["size"], "media_type": JSON}}
        entry = self._chain(kind, op_id, kept, None, {ref["sha256"]: got})
        await self._writes.commit(entry, take)
        return entry

    async def hold(self, kind: str, op_id: str, data: dict[str, Any]) -> Entry:
        """Chain an entry now and write it with the run's next write (see the module's words), or
        after ``hold_ms``, or once ``hold_max`` entries are held; with no holding, append it."""
        writes = self._writes
        if writes.hold_max <= 0:
            return await self.append(kind, op_id, data)
        entry = self._chained(kind, op_id, data) or await self._offloaded(kind, op_id, data)
        if writes.keep(entry):
            await writes.flush()
        return entry

    def _chained(self, kind: str, op_id: str, data: dict[str, Any]) -> Entry | None:
        """The entry, chained to the head now; None if it passes ``OUTLAST_MAX_PAYLOAD``
        (``_offloaded`` then chains it), or is shown (state, event) holding ``$refs`` itself,
        which its row would read as a reference. Not a coroutine: an entry of every crossing comes here."""
        if kind in INLINE_ONLY and reads_as_reference(kind, data):
            return None
        try:
            return self._chain(kind, op_id, data, self._writes.inline_max)
        except Oversized:
            return None

    async def _offloaded(self, kind: str, op_id: str, data: dict[str, Any]) -> Entry:
        """The entry past ``OUTLAST_MAX_PAYLOAD``, chained once its largest values are stored in
        the payload store: it holds their references (``outlast._payloads``)."""
        inline_max = self._writes.inline_max
        assert inline_max is not None
        if kind in INLINE_ONLY:  # projected by a trigger: its value alone by reference (0036)
            kept, values = offload_shown(kind, data, inline_max)
        else:
            kept, values = offload(data, inline_max)
        await self._writes.store_payloads(values)
        return self._chain(kind, op_id, kept, None, values)

    def _chain(
        self,
        kind: str,
        op_id: str,
        data: dict[str, Any],
        inline_max: int | None = None,
        payloads: Mapping[str, bytes | str] | None = None,
    ) -> Entry:
        """The entry, chained to the head now (a patch marker still to journal goes before it);
        ``Oversized`` past ``inline_max``, before the entry is chained."""
        if self._writes.broken is not None:
            raise self._writes.broken
        marks, self._marks = self._marks, []
        for mark_op, mark in marks:  # journaled with the entry that follows it, in its statement
            self._writes.held.append(self._chain("patch", mark_op, mark))
        j = self.journal
        entry = make_entry(j.head, j.length + 1, kind, op_id, data, inline_max)
        if payloads:
            entry = Resolved(entry.seq, kind, op_id, entry.body, entry.hash, payloads)
        j.head, j.length = entry.hash, entry.seq
        j.add(entry)
        return entry

    async def value(self, op_id: str, name: str, make: Callable[[], Any]) -> Any:
        """A journaled value (``run.now()``, ``uuid()``, ``random()``): made once, then the journal's."""
        replayer = self
        replayer.enter(op_id)
        if replayer.journaled(op_id):
            e = replayer.entry(op_id, "value")
            if e is None or e.data.get("name") != name:
                raise replayer.mismatch(op_id, f"{name}()")
            return e.data["value"]
        await replayer.go_live(op_id, lambda: f"{name}()")
        value = make()
        await replayer.append("value", op_id, {"name": name, "value": value})
        return value
