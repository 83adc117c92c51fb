"""This module keeps one run's writes in order: its journal appends (held entries first) and its
other fenced writes behind them.

A **held** entry (a read's or an idempotent tool's result, ``Replayer.hold``) is chained at once
and kept here for at most ``hold_ms`` and ``hold_max`` entries: it is written by the run's next
append, first in the same fenced statement, or by ``flush``, which every other fenced write of the
run awaits first (``fenced``). A write that fails voids every entry chained after it: it is kept
(``broken``) and raised by the run's next write.

Built with the run's ``RunControl`` (whose signals an append's outcome sets) before any part that
writes: the replayer, the dispatcher, the waits, the children, the gate and the executor are each
given it. Nothing refers back here, so a finished run's writes die by reference count.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import Awaitable, Coroutine, Mapping
from typing import Any, TypeVar

from outlast import _failpoints as failpoints
from outlast._journal import Entry, Limit, body_bytes
from outlast._payloads import JSON
from outlast.errors import Fenced, ServiceUnavailable
from outlast.store.journal import Journal, appended
from outlast.store.messages import Messages
from outlast.worker.control import RunControl
from outlast.worker.size import RunSize

T = TypeVar("T")


class JournalWrites:
    """``JournalWrites`` holds the run's held entries, the appends under way that carry some, and
    the fenced writes that wait for them."""

    def __init__(
        self,
        *,
        journal: Journal,
        messages: Messages,
        control: RunControl,
        hold: tuple[float, int] = (0.0, 0),
        size: RunSize | None = None,  # counts what the run's appends journal (None: offline)
        payloads: tuple[int, int] | None = None,
    ) -> None:
        self.run_id = control.run_id
        self._journal, self._messages = journal, messages
        self._control = control
        self._run_size = size
        self.hold_for, self.hold_max = hold[0] / 1000, hold[1]
        # (OUTLAST_MAX_PAYLOAD, OUTLAST_MAX_REFERENCED): an entry past the first holds its largest
        # values by reference, each at most the second; None: no payload store (offline, tests)
        self.inline_max = Limit(payloads[0], "OUTLAST_MAX_PAYLOAD") if payloads else None
        self.referenced = Limit(payloads[1], "OUTLAST_MAX_REFERENCED") if payloads else None
        self.stored: set[str] = set()  # the SHA-256 of the values the run stored: stored once
        self.held: list[Entry] = []  # chained, not yet sent: written first by the next write
        self._carriers: list[asyncio.Future[Any]] = []  # writes under way that carry held entries
        self.broken: BaseException | None = None  # a flush that failed: the run cannot go on
        self._timer: asyncio.TimerHandle | None = None

    async def store_payloads(self, values: Mapping[str, bytes | bytearray], media_type: str = JSON) -> None:
        """Store the values an entry holds by reference, before it is journaled (each once in the
        run). While the payload store is out of reach the run waits, holding its lease (claimed
        again and again it would count as crashing its workers); a hand-over, a cancellation or
        a lost lease leaves it."""
        new = {sha: data for sha, data in values.items() if sha not in self.stored}
        if not new:
            return
        pause = 0.2
        while True:  # an outage of the payload store: the run waits, its lease renewed meanwhile
            try:
                await self._journal.put_payloads(self.run_id, new, media_type)
                break
            except ServiceUnavailable as exc:
                control = self._control
                if control.stop.is_set() or control.lost.is_set() or control.cancel.is_set():
                    raise control.leave(str(exc)) from exc
            await asyncio.sleep(pause)
            pause = min(pause * 2, 5.0)
        failpoints.hit("after_payload_stored")
        self.stored.update(new)

    def keep(self, entry: Entry) -> bool:
        """Hold a chained entry; True once ``hold_max`` are held (flush them now). The first one
        held starts the timer that writes them after ``hold_ms``."""
        self.held.append(entry)
        if len(self.held) >= self.hold_max:
            return True
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(self.hold_for, self._time_up)
        return False

    async def flush(self) -> None:
        """Write the held entries, and wait for every write under way that carries some: awaited
        before any fenced write of the run other than an append, and before a dispatch to a tool
        whose result is not held. Raises as the write would (``Fenced``, ``Interrupted``)."""
        self._send_held()
        for carrier in list(self._carriers):  # a done one may still be listed: never spin on it
            with contextlib.suppress(Exception):  # its failure is kept in broken, raised below
                await asyncio.shield(carrier)
        if self.broken is not None:
            raise self.broken

    async def send(self) -> None:
        """Queue the held entries' write, not waiting for its commit: a write queued next goes in
        the same shared commit, after it (the final state, which its ``journal_len`` condition
        refuses unless they are written). ``flush`` then waits for it."""
        self._send_held()

    async def fenced(self, what: str, pending: Awaitable[T], *, chained: bool = False) -> T:
        """Await a fenced write of the run other than a journal append (a final state, a wait,
        a park, a slot, a reservation, a child, a release): the run's held entries are written
        first (``flush``), so that no such write is ever committed ahead of them. The write's own
        errors are the caller's, as without this (wrap it in ``RunControl.db`` to leave the run on
        them). ``chained``: a write that is refused unless the journal is as long as the run
        chained it (the final state) goes in the same shared commit as the held entries, after
        them."""
        failpoints.hit("with_result_held", what)
        try:
            await (self.send() if chained else self.flush())
        except BaseException:
            if isinstance(pending, Coroutine):
                pending.close()  # never sent: the write is not made
            raise
        done = await pending
        if chained:
            await self.flush()  # the held entries' own outcome (written, if the write was)
        failpoints.hit("after_fenced_write", what)
        return done

    async def commit(self, entry: Entry, take: str | None = None) -> None:
        """Append ``entry`` with the held entries before it, in one statement, queued at once. One
        that carries held entries is made even if its caller is cancelled (a hand-over), and every
        flush awaits it until it is done. ``take``: the message the entry records, taken from the
        run's inbox by the same statement."""
        held, self.held = self.held, []
        written = self._send(held, entry, take) if held else self._submit(entry, held, take)
        with contextlib.suppress(Exception):  # its failure as _written kept it: raised below
            await (asyncio.shield(written) if held else written)
        if self.broken is not None and (written.exception() or appended(written.result()) is None):
            raise self.broken  # this append failed: its failure voided the run's writes from it on

    def _time_up(self) -> None:
        """The timer's flush, not waited for: a failure is kept and raised at the run's next write."""
        self._timer = None
        with contextlib.suppress(BaseException):
            self._send_held()

    def _send_held(self) -> None:
        if self.broken is not None:  # the entries chained after a failed write are void
            raise self.broken
        if self.held:
            held, self.held = self.held, []
            self._send(held[:-1], held[-1])

    def _send(
        self, held: list[Entry], entry: Entry, take: str | None = None
    ) -> asyncio.Future[list[dict[str, Any]]]:
        written = self._submit(entry, held, take)
        self._carriers.append(written)
        return written

    def _submit(
        self, entry: Entry, held: list[Entry], take: str | None = None
    ) -> asyncio.Future[list[dict[str, Any]]]:
        """The append, queued now; its outcome is read (``_written``) as soon as it comes."""
        token, size = self._control.token, body_bytes((*held, entry))
        written = (
            self._journal.submit_append(self.run_id, token, entry, held, size)
            if take is None
            else self._messages.submit_take(self.run_id, token, entry, held, take, size)
        )
        written.add_done_callback(functools.partial(self._written, size=size))
        return written

    def _written(self, written: asyncio.Future[list[dict[str, Any]]], size: int) -> None:
        """An append's outcome, read once for the run as soon as it comes (before any awaiter of
        it resumes): a failure or a refusal voids every entry chained after it (``broken``); a
        requested cancellation is noted; the ``size`` it journaled is counted (``RunSize``)."""
        if written in self._carriers:
            self._carriers.remove(written)
        if written.cancelled():
            return
        control, exc = self._control, written.exception()
        if exc is None and (cancel := appended(written.result())) is not None:
            if cancel:
                control.cancelled()
            if self._run_size is not None:
                self._run_size.written(size, written.result()[0])
            return
        if isinstance(exc, ServiceUnavailable):  # Postgres out of reach past the bound: left
            failure: BaseException = control.leave(str(exc))
            failure.__cause__ = exc
        elif exc is not None:
            failure = exc
        else:  # refused: another worker holds the run now
            control.dispatch_stopped = True
            failure = Fenced(self.run_id, control.token)
        self.broken = self.broken or failure
