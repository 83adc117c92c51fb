"""The replayer: the run's journal and the cursor over it.

On resume the workflow runs again from the start; each crossing whose entries are journaled is
served from here (loaded once, in one query) with no effect and no round trip. A crossing that
asks for something else than the journal holds is refused (``ResumeImpossible``); a crossing
past the journal goes live, once cancellation and the deadline have had their say. Every entry
the worker writes is appended here, chained to the one before.

A **held** entry (a read's or an idempotent tool's result, ``hold``) is chained at once and kept
in memory for at most ``hold_ms`` and ``hold_max`` entries: it is written by the run's next
append, chained first in the same fenced statement, or by ``flush``, which every other fenced
write of the run awaits first (``RunControl.fenced``). A held entry lost with its worker is a
result never journaled: the read is redone, the idempotent tool dispatched again with its key.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from outlast import failpoints
from outlast.errors import Cancelled, DeadlineExceeded, Fenced, ResumeImpossible, ServiceUnavailable
from outlast.journal import Entry, make_entry
from outlast.model import Run as RunRecord
from outlast.store import Store
from outlast.store.journal import appended
from outlast.worker.control import JournalEnd, RunControl
from outlast.worker.journaled import Journaled, asked_by_result, describe, describe_entry

__all__ = ["Journaled", "Replayer", "asked_by_result", "describe"]

# The appends that are a fenced write of their own kind (a cancellation, an in-doubt declaration):
# carrying held entries, they are the crash points ``with_result_held:KIND`` and
# ``after_fenced_write:KIND``, as the other fenced writes are in ``RunControl.fenced``.
_CROSSED = frozenset({"cancel", "in_doubt"})


class Replayer:
    """Positions, the journal cursor, appends, and the refusals of a replay that diverges."""

    def __init__(
        self,
        record: RunRecord,
        store: Store,
        control: RunControl,
        journal: Journaled,
        db_now: datetime | None = None,
        hold_ms: float = 0.0,
        hold_max: int = 0,
    ) -> None:
        self.run_id = record.id
        self.deadline = record.deadline
        self.journal = journal
        self._store = store
        self._control = control
        self._clock = (db_now, time.monotonic())
        self._next = 0
        self._served: set[str] = set()
        # the highest position journaled: a patch marker goes live only past it
        self._last = max((int(op[3:]) for op in journal.ops if op.startswith("op-")), default=0)
        self._patches: dict[str, bool] = {}
        self._marks: list[tuple[str, dict[str, Any]]] = []  # patch markers not yet journaled
        self._hold_for = hold_ms / 1000
        self._hold_max = hold_max
        self._held: list[Entry] = []  # chained, not yet sent: written first by the next write
        self._carriers: list[asyncio.Future[Any]] = []  # writes under way that carry held entries
        self._broken: BaseException | None = None  # a flush that failed: the run cannot go on
        self._timer: asyncio.TimerHandle | None = None
        control.flush, control.send = self.flush, self.send
        control.journal_len = journal.length

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

    async def append(self, kind: str, op_id: str, data: dict[str, Any]) -> Entry:
        """Journal one entry as the lease holder (fenced), with the held entries before it, in one
        statement. Parallel calls append concurrently: each entry is chained to the head *before*
        its write commits, and the writer commits a run's writes in order; a write that fails
        leaves the run, so the head never outlives it."""
        if self._control.offline:  # never reached past go_live; a write is refused all the same
            raise JournalEnd(op_id, f"to journal a {kind} entry")
        entry = self._chain(kind, op_id, data)
        held, self._held = self._held, []
        crossed = held and kind in _CROSSED  # a crash test's kill points (inert unless armed)
        if crossed:
            failpoints.hit("with_result_held", kind)
        await self._commit(entry, held)
        if crossed:
            failpoints.hit("after_fenced_write", kind)
        return entry

    async def hold(self, kind: str, op_id: str, data: dict[str, Any]) -> Entry:
        """Chain an entry now and write it with the run's next write (see the module's words), or
        after ``hold_ms``, or once ``hold_max`` entries are held; with no holding, append it."""
        if self._hold_max <= 0:
            return await self.append(kind, op_id, data)
        entry = self._chain(kind, op_id, data)
        self._held.append(entry)
        if len(self._held) >= self._hold_max:
            await self.flush()
        elif self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self._hold_for, self._time_up)
        return entry

    async def flush(self) -> None:
        """Write the held entries, and wait for every write under way that carries some: awaited
        before any fenced write of the run other than an append, and before a dispatch to a tool
        whose result is not held. Raises as the write would (``Fenced``, ``Interrupted``)."""
        self._send_held()
        for carrier in list(self._carriers):  # a done one may still be listed: never spin on it
            with contextlib.suppress(Exception):  # its failure is kept in _broken, raised below
                await asyncio.shield(carrier)
        if self._broken is not None:
            raise self._broken

    def _time_up(self) -> None:
        """The timer's flush, not waited for: a failure is kept and raised at the run's next write."""
        self._timer = None
        with contextlib.suppress(BaseException):
            self._send_held()

    def _chain(self, kind: str, op_id: str, data: dict[str, Any]) -> Entry:
        """The entry, chained to the head now (a patch marker still to journal goes before it)."""
        if self._broken is not None:
            raise self._broken
        marks, self._marks = self._marks, []
        for mark_op, mark in marks:  # journaled with the entry that follows it, in its statement
            self._held.append(self._chain("patch", mark_op, mark))
        j = self.journal
        entry = make_entry(j.head, j.length + 1, kind, op_id, data)
        j.head, j.length = entry.hash, entry.seq
        j.add(entry)
        self._control.journal_len = entry.seq
        return entry

    def _send(self, held: list[Entry], entry: Entry) -> asyncio.Future[list[dict[str, Any]]]:
        written = self._submit(entry, held)
        self._carriers.append(written)
        return written

    async def send(self) -> None:
        """Queue the held entries' write, not waiting for its commit: a write queued next goes in
        the same shared commit, after it (the final state, which its ``journal_len`` condition
        refuses unless they are written). ``flush`` then waits for it."""
        self._send_held()

    def _send_held(self) -> None:
        if self._broken is not None:  # the entries chained after a failed write are void
            raise self._broken
        if self._held:
            held, self._held = self._held, []
            self._send(held[:-1], held[-1])

    async def _commit(self, entry: Entry, held: list[Entry]) -> None:
        """The append, queued at once. One that carries held entries is made even if its caller is
        cancelled (a hand-over), and every flush awaits it until it is done."""
        written = self._send(held, entry) if held else self._submit(entry, held)
        with contextlib.suppress(Exception):  # its failure as _written kept it: raised below
            await (asyncio.shield(written) if held else written)
        self._raise_for(written)

    def _submit(self, entry: Entry, held: list[Entry]) -> asyncio.Future[list[dict[str, Any]]]:
        """The append, queued now; its outcome is read (``_written``) as soon as it comes."""
        written = self._store.submit_append(self.run_id, self._control.token, entry, held)
        written.add_done_callback(self._written)
        return written

    def _written(self, written: asyncio.Future[list[dict[str, Any]]]) -> None:
        """An append's outcome, read once for the run as soon as it comes (before any awaiter of
        it resumes): a failure or a refusal voids every entry chained after it (``_broken``); a
        requested cancellation is noted."""
        if written in self._carriers:
            self._carriers.remove(written)
        if written.cancelled():
            return
        control, exc = self._control, written.exception()
        if exc is None and (cancel := appended(written.result())) is not None:
            if cancel:
                control.cancelled()
            return
        if isinstance(exc, ServiceUnavailable):  # Postgres out of reach past the bound: left
            failure: BaseException = control.leave(str(exc))
            failure.__cause__ = exc
        elif exc is not None:
            failure = exc
        else:  # refused: another worker holds the run now
            control.left = True
            failure = Fenced(self.run_id, control.token)
        self._broken = self._broken or failure

    def _raise_for(self, written: asyncio.Future[list[dict[str, Any]]]) -> None:
        """Raise as this append failed, if it did: its failure voided the run's writes from it on."""
        if self._broken is not None and (written.exception() or appended(written.result()) is None):
            raise self._broken
