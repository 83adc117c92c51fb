"""The runs family covers a run's row and events, its enqueue and cancellation, and counts of runs."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

from psycopg.types.json import Jsonb

from outlast._model import RunRecord, RunState
from outlast.store.base import budget_arrays
from outlast.store.payloads import Payloads


class Runs(Payloads):
    """``Runs`` inserts, reads, lists and counts runs, and handles their events, cancellation and
    dead letters requeued. ``get_run`` reads back an input or a result held by reference
    (``Payloads``); a list of runs shows them as references."""

    async def insert_run(
        self,
        *,
        id: str,
        workflow: str,
        queue: str,
        input: dict[str, Any],
        input_hash: str,
        program: str | None,
        deadline_in: float | None,
        deadline_at: datetime | None = None,
        parent_id: str | None = None,
        budget: dict[str, float] | None = None,
        budget_id: str | None = None,
        trace_context: dict[str, str] | None = None,
        start_at: datetime | None = None,
        start_in: float | None = None,
        priority: str = "normal",
        tenant: str | None = None,
    ) -> tuple[RunRecord, bool]:
        """Insert a queued run (with its budget, if given); if the id exists, return the existing
        one and False. A continued run passes the budget_id it shares instead of a budget.
        ``trace_context`` is the producer's trace, continued by every attempt of the run; a run
        with ``start_at`` (or ``start_in`` seconds from now, by the database clock) is not
        delivered before then: the sweeper publishes it; ``tenant`` is whose run it is."""
        limits = budget or {}
        names, values = budget_arrays(limits)
        rows = await self._write(
            "insert_run",
            id=id,
            workflow=workflow,
            queue=queue,
            input=Jsonb(input),
            input_hash=input_hash,
            program=program,
            deadline_in=deadline_in,
            deadline_at=deadline_at,
            parent_id=parent_id,
            budget_id=budget_id or (id if limits else None),
            budget_names=names,
            budget_limits=values,
            trace_context=None if trace_context is None else Jsonb(trace_context),
            start_at=start_at,
            start_in=start_in,
            priority=priority,
            tenant=tenant,
            window=self.tenant_window,
        )
        if rows:
            return RunRecord.from_row(rows[0]), True
        rows = await self._rows("get_run", id=id)  # its input as stored: a reference is compared as one
        return RunRecord.from_row(rows[0]), False

    async def get_run(self, run_id: str, whole: bool = True) -> RunRecord | None:
        """The run, its input and result whole (read back only if held by reference; ``whole``
        False: left references)."""
        rows = await self._rows("get_run", id=run_id)
        if not rows:
            return None
        run = RunRecord.from_row(rows[0])
        return await self.whole_record(run) if whole else run

    async def list_runs(
        self,
        state: str | None,
        limit: int,
        *,
        workflow: str | None = None,
        queue: str | None = None,
        since: datetime | timedelta | None = None,
        tenant: str | None = None,
    ) -> list[RunRecord]:
        """The latest runs, newest first; each filter given narrows them (an age ``since`` by the
        database clock)."""
        age = since.total_seconds() if isinstance(since, timedelta) else None
        at = since if isinstance(since, datetime) else None
        rows = await self._rows(
            "list_runs",
            state=state,
            limit=limit,
            workflow=workflow,
            queue=queue,
            since=at,
            age=age,
            tenant=tenant,
        )
        return [RunRecord.from_row(r) for r in rows]

    async def event(self, run_id: str, kind: str, detail: dict[str, Any]) -> int | None:
        """Add an event to the run; its id (None: no such run). Its write id, drawn here once,
        lets the statement sent again after a lost acknowledgement find the event it added."""
        rows = await self._write(
            "add_event", run_id=run_id, kind=kind, detail=Jsonb(detail), write_id=uuid.uuid4().hex
        )
        return int(rows[0]["id"]) if rows else None

    async def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        """The run's events after ``after``; a custom event's data held by reference read back
        whole (migration 0036)."""
        rows = await self._rows("events", run_id=run_id, after=after)
        custom = [r["detail"] for r in rows if r["kind"].startswith("custom:")]
        await self._read_back(run_id, custom, "data", "data")
        return rows

    async def cancel(self, run_id: str, detail: dict[str, Any]) -> tuple[str, str] | None:
        """Record a cancellation request; returns (state, queue) or None if already final. Its
        write id, drawn here once, lets the statement sent again after a lost acknowledgement
        find the request it recorded (and say the run's state now)."""
        rows = await self._write("cancel", id=run_id, detail=Jsonb(detail), write_id=uuid.uuid4().hex)
        return (rows[0]["state"], rows[0]["queue"]) if rows else None

    async def requeue_dead_letter(self, run_id: str, detail: dict[str, Any]) -> tuple[str, str, str] | None:
        """Stamp an unfinished run as published now, with a 'requeued' event; its (queue,
        state, priority), or None when the run is final (or missing). Sent again after a lost
        acknowledgement, it finds its event by the write id drawn here once."""
        rows = await self._write(
            "requeue_dead_letter", id=run_id, detail=Jsonb(detail), write_id=uuid.uuid4().hex
        )
        return (rows[0]["queue"], rows[0]["state"], rows[0]["priority"]) if rows else None

    async def count_by_state(self, most: int) -> dict[str, int]:
        """Runs counted by state, each up to ``most`` + 1: a count past ``most`` means more (a
        state without runs is left out)."""
        rows = await self._rows("count_by_state", states=list(RunState), most=most)
        return {r["state"]: r["n"] for r in rows if r["n"]}

    async def unfinished_by_queue(self) -> dict[str, dict[str, int]]:
        """Unfinished runs: queue -> state -> count."""
        out: dict[str, dict[str, int]] = {}
        for r in await self._rows("unfinished_by_queue"):
            out.setdefault(r["queue"], {})[r["state"]] = r["n"]
        return out

    async def run_gauges(self) -> tuple[int, float]:
        """For the metrics gauges: how many runs wait on an unresolved in-doubt operation, and the
        longest time in seconds a running run has gone without progress (0 when none runs)."""
        row = (await self._rows("run_gauges"))[0]
        return int(row["in_doubt"]), float(row["stalled"])

    async def parked(self) -> list[dict[str, Any]]:
        """The parked runs (waiting until a person acts) per workflow and reason: workflow,
        reason, n."""
        return await self._rows("parked")

    async def change_mark(self) -> int:
        """A number that moves whenever an event is written for any run."""
        row = (await self._rows("change_mark"))[0]
        return int(row["last_value"]) if row["is_called"] else 0
