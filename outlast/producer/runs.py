"""This family deals with runs after admission: reading them (status, list, events, journal,
budget), waiting for and following them, and acting on them (cancel, resume)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
from collections.abc import AsyncGenerator, AsyncIterator
from datetime import datetime, timedelta
from typing import Any

from outlast._journal import Entry, first_bad_crossing
from outlast._listing import MAX_PAGE, PAGE, RunQuery, after_of, cursor_of
from outlast._model import RunRecord, RunState
from outlast.errors import InvalidInput, RunChanged, RunFinished, RunNotWaiting, WaitTimeout
from outlast.identity import Principal
from outlast.producer.checks import MAX_LIST, show
from outlast.producer.core import ClientCore
from outlast.store.notify import Watch


class Runs(ClientCore):
    """``Runs`` is the family a caller meets after ``enqueue``: a run's state, events and journal, and its
    cancellation or resumption."""

    async def wait(self, run_id: str, timeout: float | None = None, poll: float = 1.0) -> RunRecord:
        """Wait until the run is final and return it, with its stored result. Never runs the work.

        Woken by Postgres (LISTEN/NOTIFY) when the run changes, it costs the database nothing
        between changes; while its listening connection is lost it looks every ``poll`` seconds."""
        loop = asyncio.get_running_loop()
        until = None if timeout is None else loop.time() + timeout
        run = await self._status(run_id, whole=False)  # read whole once final
        if run.final:
            return await self.store.runs.whole_record(run)  # no read unless held by reference
        async with self.store.watch(run_id, poll) as watch:
            while True:
                run = await self._status(run_id, whole=False)  # after LISTEN: no change falls between
                if run.final:
                    return await self.store.runs.whole_record(run)
                left = None if until is None else until - loop.time()
                if left is not None and left <= 0:
                    raise WaitTimeout(f"run '{run_id}' is still {run.state} after {timeout}s (it goes on)")
                await watch.changed(left)

    async def runs(
        self,
        state: str | None = None,
        limit: int = 50,
        *,
        workflow: str | None = None,
        queue: str | None = None,
        since: datetime | timedelta | None = None,
        tenant: str | None = None,
    ) -> list[RunRecord]:
        """The latest runs, newest first: in ``state``, of ``workflow``, on ``queue``, created
        at or after ``since`` (a time, or an age by the database clock), of ``tenant`` (each when
        given)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST:
            raise InvalidInput(f"the number of runs to list must be from 1 to {MAX_LIST}, got {show(limit)}")
        await self.open()
        if state is not None and state not in set(RunState):
            known = ", ".join(RunState)
            raise InvalidInput(f"no run state '{state}' (states: {known})")
        return await self.store.runs.list_runs(
            state, limit, workflow=workflow, queue=queue, since=since, tenant=tenant
        )

    async def runs_page(
        self, query: RunQuery | None = None, *, limit: int = PAGE, cursor: str | None = None
    ) -> tuple[list[RunRecord], str | None]:
        """One page of the runs ``query`` asks for (newest first by its sort's time) and the cursor
        of the next page (None after the last). A cursor is opaque and stable: a run enqueued (or
        started, or finished) while someone pages goes before the first page, so a page never
        repeats nor skips one."""
        q = query or RunQuery()
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
            raise InvalidInput(f"a page holds 1 to {MAX_PAGE} runs, got {show(limit)}")
        await self.open()
        rows = await self.store.listing.runs_page(q, after_of(q, cursor), limit + 1)
        page = [RunRecord.from_row(r) for r in rows[:limit]]
        return page, cursor_of(q, rows[limit - 1]) if len(rows) > limit else None

    @contextlib.asynccontextmanager
    async def watch_run(self, run_id: str, poll: float = 1.0) -> AsyncIterator[Watch]:
        """Woken by Postgres whenever the run has an event, for as long as the block lasts: a
        look after entering and after each ``changed()`` misses nothing (``follow`` reads so)."""
        await self.status(run_id)
        async with self.store.watch(run_id, poll) as watch:
            yield watch

    @contextlib.asynccontextmanager
    async def watch_runs(self, poll: float = 1.0) -> AsyncIterator[Watch]:
        """Woken by Postgres whenever any run has an event (a live list: see migration 0020),
        for as long as the block lasts. ``hears()`` says whether notifications reach this client
        (not through a transaction pooler); ``changed()`` polls every ``poll`` seconds while they
        do not."""
        await self.open()
        async with self.store.watch("", poll) as watch:
            yield watch

    async def children(self, run_id: str, most: int) -> list[dict[str, Any]]:
        """The first ``most`` child runs the run started (``run.start``), oldest first: id,
        workflow, state, reason."""
        await self.status(run_id)
        return await self.store.children.children_of(run_id, most)

    async def children_tree(self, run_id: str, depth: int, most: int) -> list[dict[str, Any]]:
        """The runs the run started and theirs, breadth first (``depth`` levels, ``most`` runs at
        most), read in one statement: id, workflow, state, reason, parent, depth."""
        return await self.store.children.children_tree(run_id, depth, most)

    async def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        await self.status(run_id)
        return await self.store.runs.events(run_id, after)

    async def follow(self, run_id: str, after: int = 0, poll: float = 1.0) -> AsyncGenerator[dict[str, Any]]:
        """Every event of the run after event ``after``, as it happens, until the run is final.
        Woken by Postgres as ``wait`` is; each look resumes after the last event seen, so a lost
        listening connection (``poll`` seconds between looks meanwhile) loses nothing."""
        await self.status(run_id)
        async with self.store.watch(run_id, poll) as watch:
            while True:
                final = (await self.status(run_id)).final  # read before the events: none is missed
                for event in await self.store.runs.events(run_id, after):
                    after = event["id"]
                    yield event
                if final:
                    return
                await watch.changed()

    async def journal(self, run_id: str, generation: int | None = None) -> list[Entry]:
        """The run's journal: its current generation's, or an earlier ``generation``'s (a run
        carried forward keeps them until they are pruned)."""
        return (await self.chain(run_id, generation))[0]

    async def chain(self, run_id: str, generation: int | None = None) -> tuple[list[Entry], str]:
        """The entries and the chain's head of a generation of the run's journal (None: the
        current one). An earlier generation no longer kept (pruned) is refused."""
        run = await self.status(run_id)
        if generation is None or generation == run.generation:
            return await self.store.journal.journal(run_id), run.journal_head
        ended = {g.generation: g for g in await self.store.generations.generations(run_id)}
        if generation not in ended:
            kept = ", ".join(map(str, [*ended, run.generation]))
            raise InvalidInput(f"run '{run_id}' has no generation {generation} kept (kept: {kept})")
        return await self.store.generations.journal_past(run_id, generation), ended[generation].journal_head

    async def journal_times(self, run_id: str) -> dict[int, datetime]:
        """When each journal entry (by its number) was committed, by the database clock."""
        await self.status(run_id)
        return await self.store.journal.journal_times(run_id)

    async def size(self, run_id: str) -> dict[str, Any]:
        """What the run keeps stored: ``bytes`` in all, its ``parts`` (journal, earlier
        generations, messages, state, events), the bytes it has ``journaled`` in its life (the
        count OUTLAST_RUN_SIZE_WARN is compared with) and when it passed that (``warned_at``)."""
        run = await self.status(run_id)
        parts = await self.store.size.run_bytes(run_id)
        warned = run.size_warned_at.isoformat() if run.size_warned_at else None
        return {
            "bytes": sum(parts.values()),
            "parts": parts,
            "journaled": run.journal_bytes,
            "warned_at": warned,
        }

    async def budget(self, run_id: str) -> list[dict[str, Any]]:
        """The run's budget limits with what is spent and reserved ([] without a budget)."""
        run = await self.status(run_id)
        return await self.store.budgets.budget(run.budget_id) if run.budget_id else []

    async def verify(self, run_id: str, generation: int | None = None) -> int | None:
        """The first crossing whose chain does not verify, or None: in the current generation of
        the run's journal, or in ``generation``."""
        return first_bad_crossing(*(await self.chain(run_id, generation)))

    async def generations(self, run_id: str) -> list[dict[str, Any]]:
        """The generations of the run's journal kept, oldest first, the current one last: each
        one's number, the input it started with, its entries and its chain's head."""
        run = await self.status(run_id)
        ended = [dataclasses.asdict(g) for g in await self.store.generations.generations(run_id)]
        now = {"generation": run.generation, "input": run.input, "op_base": run.op_base}
        return [*ended, now | {"journal_head": run.journal_head, "journal_len": run.journal_len}]

    async def cancel(self, run_id: str, *, principal: Principal | None = None) -> RunRecord:
        """Record a cancellation. A queued run that never started is cancelled at once; a running
        one stops at its next crossing (a tool in flight that returns within a heartbeat of the worker
        seeing the request has its result journaled; a sync tool with no ``timeout=`` still running
        then is abandoned); a waiting one is taken up by a worker to stop, running the
        compensations it asked for. The child runs it started, and theirs, are cancelled with it.
        The ``principal`` who asked (the dashboard's) is recorded in the run's 'cancel' event."""
        run = await self.status(run_id)
        if run.final:
            raise RunFinished(f"run '{run_id}' is already {run.state}: a final state never changes")
        got = await self.store.runs.cancel(
            run_id, {"by": "client", **(principal.record() if principal else {})}
        )
        if got is None:
            raise RunFinished(f"run '{run_id}' finished meanwhile; see: outlast status {run_id}")
        state, queue = got
        if state == RunState.CANCELLING:
            await self.queue.publish(queue, run_id, priority=run.priority)
        await self._cancel_children(run_id, run.priority)
        return await self.status(run_id)

    async def _cancel_children(self, run_id: str, priority: str) -> None:
        """Cancel the unfinished runs ``run_id`` started, level by level: each level is read after
        the cancellation of the one above is committed, and a run whose cancellation is requested
        starts no child (``insert_child``), so none is missed. Children have their root's
        ``priority``, and their entries go to its level."""
        level = [run_id]
        while level:
            below = await self.store.children.children(level)
            for child in below:
                got = await self.store.runs.cancel(child, {"by": "parent", "with": run_id})
                if got is not None and got[0] == RunState.CANCELLING:
                    await self.queue.publish(got[1], child, priority=priority)
            level = below

    async def resume(
        self, run_id: str, *, accept_program_change: bool = False, principal: Principal | None = None
    ) -> RunRecord:
        """Put a waiting run back in the queue; ``accept_program_change`` migrates it to the
        program of the worker that takes it (replay must still match)."""
        run = await self.status(run_id)
        if run.final:
            raise RunFinished(
                f"run '{run_id}' is {run.state}: a finished run is never resumed; start a new run"
            )
        if run.state != RunState.WAITING:
            raise RunNotWaiting(f"run '{run_id}' is {run.state}, not waiting: nothing to resume")
        if run.reason == "paused":  # a resume would only park it again at its claim
            raise RunNotWaiting(
                f"run '{run_id}' is paused: see who paused it and why with outlast pauses, then "
                f"outlast unpause {run_id} (or the --workflow or --queue that paused it)"
            )
        # Parked by a bug: resumed on the code deployed since (its fix), whose replay must match
        # the journal crossing for crossing, or the run waits again, resume_impossible.
        accept_program_change = accept_program_change or run.reason == "workflow_error"
        detail = {"accept_program_change": accept_program_change, "was": run.reason}
        detail |= principal.record() if principal else {}
        if not await self.store.leases.requeue(run_id, run.fencing_token, accept_program_change, detail):
            raise RunChanged(f"run '{run_id}' changed meanwhile; look again: outlast status {run_id}")
        await self.queue.publish(run.queue, run_id, priority=run.priority)
        return await self.status(run_id)

    async def resume_workflow(self, workflow: str, *, principal: Principal | None = None) -> list[str]:
        """Resume every run of ``workflow`` parked by a program change, a bug or a replay that
        diverged, each on the program of the worker that takes it: replay checks it crossing for
        crossing, so a run goes on only where the code deployed now agrees with its journal (one
        that diverges waits again, ``resume_impossible``, its first divergence in ``outlast status``).
        The ids resumed (a run that changed meanwhile is left as it is)."""
        moved = []
        for r in await self.store.sweeps.parked_of(workflow):
            detail = {"accept_program_change": True, "was": r["reason"], "bulk": workflow}
            detail |= principal.record() if principal else {}
            if await self.store.leases.requeue(r["id"], r["fencing_token"], True, detail):
                await self.queue.publish(r["queue"], r["id"], priority=r["priority"])
                moved.append(r["id"])
        return moved
