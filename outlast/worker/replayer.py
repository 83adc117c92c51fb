"""The replayer: the run's journal and the cursor over it.

On resume the workflow runs again from the start; each crossing whose entries are journaled is
served from here (loaded once, in one query) with no effect and no round trip. A crossing that
asks for something else than the journal holds is refused (``ResumeImpossible``); a crossing
past the journal goes live, once cancellation and the deadline have had their say. Every entry
the worker writes is appended here, chained to the one before.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

from outlast.errors import Cancelled, DeadlineExceeded, Fenced, ResumeImpossible
from outlast.journal import Entry, canonical, make_entry, operation_state
from outlast.model import Run as RunRecord
from outlast.store import Store
from outlast.worker.control import JournalEnd, RunControl


class Journaled:
    """The journal of one run, indexed by operation, with the chain head to append after."""

    def __init__(self, entries: list[Entry]) -> None:
        self.entries = entries
        self.head = entries[-1].hash if entries else ""
        self.length = len(entries)
        self.ops: dict[str, dict[str, Entry]] = {}  # the latest entry of each kind
        self.history: dict[str, list[Entry]] = {}  # every entry, in order
        for e in entries:
            self.add(e)

    def add(self, e: Entry) -> None:
        if e.op_id is not None:
            self.ops.setdefault(e.op_id, {})[e.kind] = e
            self.history.setdefault(e.op_id, []).append(e)

    def pending(self) -> list[tuple[str, dict[str, Any]]]:
        """Operations with an intention and no outcome: the gaps a crash left."""
        return [
            (op, kinds["intention"].data)
            for op, kinds in self.ops.items()
            if "intention" in kinds and operation_state(self.history[op])[0] == "pending"
        ]


def describe(tool: str, args: dict[str, Any]) -> str:
    return f"{tool}({canonical(args)})"


def _describe_entry(e: Entry) -> str:
    d = e.data
    if e.kind in ("intention", "refused"):
        return describe(d["tool"], d["args"])
    if e.kind == "approval":
        return f"approval of {describe(d['action'], d['args'])}"
    if e.kind == "timer":
        return "sleep()"
    if e.kind == "patch":
        return f"patched({d['name']!r})"
    if e.kind == "child":
        return f"start of child run {d['child']} ({d['workflow']})"
    if e.kind == "child_result":
        return f"result of child run {d['child']}"
    return f"{d.get('name', e.kind)}()"


class Replayer:
    """Positions, the journal cursor, appends, and the refusals of a replay that diverges."""

    def __init__(
        self,
        record: RunRecord,
        store: Store,
        control: RunControl,
        journal: Journaled,
        db_now: datetime | None = None,
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
            _describe_entry(first),
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
        """Journal one entry as the lease holder (fenced). Parallel calls append concurrently:
        each entry is chained to the head *before* its write commits, and the writer commits a
        run's writes in order; a write that fails leaves the run, so the head never outlives it."""
        if self._control.offline:  # never reached past go_live; a write is refused all the same
            raise JournalEnd(op_id, f"to journal a {kind} entry")
        marks, self._marks = self._marks, []
        for mark_op, mark in marks:  # a patch marker goes before the entry that follows it
            await self.append("patch", mark_op, mark)
        j = self.journal
        entry = make_entry(j.head, j.length + 1, kind, op_id, data)
        j.head, j.length = entry.hash, entry.seq
        j.add(entry)
        control = self._control
        cancel = await control.db(self._store.append(self.run_id, control.token, entry))
        if cancel is None:
            control.left = True
            raise Fenced(self.run_id, control.token)
        if cancel:
            control.cancel.set()
        return entry
