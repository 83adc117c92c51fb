"""Runs are admitted here: ``enqueue``, ``enqueue_many`` and ``continue_run``. Everything about a run is
checked before anything is written; the row is committed first, then its id is published."""

from __future__ import annotations

import asyncio
import inspect
import json
import uuid
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from outlast import _tracing as tracing
from outlast._journal import Limit, canonical, digest
from outlast._model import RunRecord, RunState
from outlast._payloads import INPUT, by_reference, column_ref, held_by_reference
from outlast.errors import InvalidInput, RunConflict, RunNotFinished, ServiceUnavailable
from outlast.identity import Principal
from outlast.producer.checks import (
    NO_INPUT,
    RUN_ID_RULE,
    check_budget,
    check_json,
    check_text,
    deadline_seconds,
    new_run_id_problem,
    show,
    start_of,
)
from outlast.producer.core import ClientCore
from outlast.queue import MAX_RUN_ID
from outlast.queue.streams import LEVELS
from outlast.settings import check_name


class Admission(ClientCore):
    """The family that makes runs: one, many, or one that continues a finished run."""

    async def enqueue(
        self,
        workflow: str,
        input: dict[str, Any] = NO_INPUT,
        *,
        run_id: str | None = None,
        queue: str | None = None,
        deadline: timedelta | float | None = None,
        budget: dict[str, float] | None = None,
        start_at: datetime | None = None,
        delay: timedelta | float | None = None,
        priority: str = "normal",
        tenant: str | None = None,
    ) -> RunRecord:
        """Commit the run row (state ``queued``), then add its id to the queue's stream.

        Idempotent on ``run_id``: the same id, workflow, input, tenant and priority return the
        existing run; another of them raises ``RunConflict``. A new run's id is 1 to 200 printable
        characters without ``/`` or ``\\``, and not ``.`` or ``..`` (``InvalidInput`` otherwise; a
        run recorded before this rule keeps its id). ``input`` is a JSON object (omitted:
        ``{}``; None is refused); ``deadline`` is a duration from now (from its start, for a
        delayed run), up to ten years; ``budget`` names limits (e.g. ``{"usd": 5, "calls": 100}``).
        ``start_at`` (aware datetime) or ``delay`` (seconds) delays the run: it is recorded now
        and not delivered before that time (a worker's sweeper publishes it then). ``priority`` is
        the queue's level, ``high``, ``normal`` or ``low`` (served 8:3:1 when all are busy). Bad
        values raise ``InvalidInput`` before anything is written. ``tenant`` is whose run it is
        (kept by its continuations and child runs).
        """
        return await self._admit(
            self._prepare(
                workflow,
                input,
                run_id=run_id,
                queue=queue,
                deadline=deadline,
                budget=budget,
                start=start_of(start_at, delay, f"a run of '{workflow}'"),
                priority=priority,
                tenant=tenant,
            )
        )

    async def enqueue_many(
        self,
        workflow: str,
        inputs: Iterable[dict[str, Any]],
        *,
        run_ids: Sequence[str] | None = None,
        queue: str | None = None,
        deadline: timedelta | float | None = None,
        budget: dict[str, float] | None = None,
        start_at: datetime | None = None,
        delay: timedelta | float | None = None,
        priority: str = "normal",
        tenant: str | None = None,
    ) -> list[RunRecord]:
        """Enqueue many runs of one workflow at once: every input is checked first (one bad input
        and nothing is written), the rows are committed together (the writer shares commits), and
        the ids go to the stream in one pipelined round trip. Give ``run_ids`` to make a retry
        after a failure safe: the runs already recorded are then returned, not made twice.
        ``start_at`` or ``delay`` delays them all, as in ``enqueue``."""
        start = start_of(start_at, delay, f"enqueue_many of '{workflow}'")
        items = list(inputs)
        ids: list[str | None] = list(run_ids) if run_ids is not None else [None] * len(items)
        if len(ids) != len(items):
            raise InvalidInput(f"enqueue_many: {len(items)} inputs but {len(ids)} run ids")
        admitted = [
            self._prepare(
                workflow,
                data,
                run_id=rid,
                queue=queue,
                deadline=deadline,
                budget=budget,
                start=start,
                priority=priority,
                tenant=tenant,
            )
            for data, rid in zip(items, ids, strict=True)
        ]
        await self.open()
        await self._refuse_unsafe_new_ids(admitted)
        outcomes = await asyncio.gather(*(self._insert(a) for a in admitted), return_exceptions=True)
        inserted = [o for o in outcomes if not isinstance(o, BaseException)]
        await self._publish([run for run, publish in inserted if publish])
        failed = [o for o in outcomes if isinstance(o, BaseException)]
        if failed and not isinstance(failed[0], ServiceUnavailable):
            raise failed[0]  # a refusal (e.g. RunConflict): what was recorded is published
        if failed:  # what was recorded is published; say so, and how to retry safely
            raise ServiceUnavailable(
                f"enqueue_many: {len(failed)} of {len(items)} runs could not be recorded ({failed[0]}); "
                f"the other {len(inserted)} are recorded and published: retry with the same run_ids"
            ) from failed[0]
        return [run for run, _ in inserted]

    def _prepare(
        self,
        workflow: str,
        input: dict[str, Any] | None,
        *,
        run_id: str | None,
        queue: str | None,
        deadline: timedelta | float | None = None,
        budget: dict[str, float] | None = None,
        parent: RunRecord | None = None,
        start: dict[str, Any] | None = None,
        priority: str = "normal",
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """Check everything about a run to admit, before anything is written; return the row."""
        check_text(workflow, "the workflow's name", "enqueue")
        if run_id is not None:
            check_text(run_id, "the run id", f"a run of '{workflow}'", MAX_RUN_ID)
        where = f"run '{run_id}'" if run_id else f"a run of '{workflow}'"
        if input is None:
            raise InvalidInput(f"{where}: the input is null; pass a JSON object ({{}} for none)")
        if not isinstance(input, dict):
            raise InvalidInput(f"{where}: the input must be a JSON object, got {type(input).__name__}")
        limit = Limit(self.settings.max_referenced, "OUTLAST_MAX_REFERENCED")
        text = check_json({} if input is NO_INPUT else input, "the input", where, limit)
        ihash = digest(text)
        data = json.loads(text)  # as stored and as the workflow gets it: a Decimal, a UUID as JSON
        held: dict[str, Any] | None = None  # past OUTLAST_MAX_PAYLOAD: the row holds a reference
        if by_reference(data, text, self.settings.max_payload):
            held, _, body = held_by_reference(INPUT, text)
        if queue is not None:
            try:
                check_name(queue)
            except ValueError as exc:
                raise InvalidInput(f"{where}: the queue {exc}") from None
        seconds = deadline_seconds(deadline, where)
        check_budget(budget, where)
        if priority not in LEVELS:
            raise InvalidInput(f"{where}: no priority {priority!r}; use one of {', '.join(LEVELS)}")
        if tenant is not None:
            check_text(tenant, "the tenant", where, 100)
        program = None
        if self.app is not None:
            wf = self.app.get_workflow(workflow)
            program = wf.program
            try:  # the workflow is called as fn(run, **input): the input must fit its signature
                inspect.signature(wf.fn).bind(None, **data)
            except TypeError as exc:
                raise InvalidInput(f"{where}: the input does not fit workflow '{workflow}': {exc}") from None
        return {
            "id": run_id or uuid.uuid4().hex[:20],
            "workflow": workflow,
            "queue": queue or (self.app and self.app.queue_of(workflow)) or self.settings.queue,
            "input": data if held is None else held,
            "input_hash": ihash,
            **({"input_bytes": body} if held is not None else {}),
            "program": program,
            "deadline_in": seconds,
            "deadline_at": parent.deadline if parent else None,
            "parent_id": parent.id if parent else None,
            "budget": None if parent else budget,
            "budget_id": parent.budget_id if parent else None,
            "trace_context": tracing.carrier(),  # every attempt of the run continues this trace
            **(start or {}),
            "priority": parent.priority if parent else priority,
            "tenant": parent.tenant if parent else tenant,
        }

    async def _refuse_unsafe_new_ids(self, rows: list[dict[str, Any]]) -> None:
        """Refuse a given id outside the safe set (``RUN_ID_RULE``) unless a run already has it:
        a run recorded before the rule keeps working, an idempotent enqueue included. Only an
        id outside the set costs a read."""
        for row in rows:
            problem = new_run_id_problem(row["id"])
            if problem is not None and await self.store.runs.get_run(row["id"]) is None:
                raise InvalidInput(
                    f"a run of '{row['workflow']}': the run id {show(row['id'])} {problem}: "
                    f"{RUN_ID_RULE}; give another id (e.g. with '-' or ':' for '/')"
                )

    async def _insert(self, row: dict[str, Any]) -> tuple[RunRecord, bool]:
        """Commit the run row (idempotent on its id); say whether it is to be published."""
        body = row.pop("input_bytes", None)
        if body is not None:  # the input's bytes, stored before the row that refers to them
            await self.store.payloads.put_payloads(row["id"], {row["input_hash"]: body})
        run, created = await self.store.runs.insert_run(**row)
        if not created:
            if run.workflow != row["workflow"]:
                raise RunConflict(run.id, f"workflow ('{run.workflow}')")
            ref = column_ref(run.input, INPUT)
            if (ref["sha256"] if ref else digest(canonical(run.input))) != row["input_hash"]:
                raise RunConflict(run.id, "input")
            if run.tenant != row["tenant"]:
                theirs = "none" if run.tenant is None else f"'{run.tenant}'"
                raise RunConflict(run.id, f"tenant ({theirs})")
            if run.priority != row["priority"]:
                raise RunConflict(run.id, f"priority ('{run.priority}')")
        # A run that starts later than it was admitted (both by the database clock) is published
        # by the sweeper at its time, not now.
        later = run.start_at is not None and run.start_at > run.created_at
        # A run held for its tenant's turn is published by a claim of the tenant's runs, or the
        # sweeper (fair share across tenants).
        return run, (created or run.state == RunState.QUEUED) and not later and not run.held_back

    async def _publish(self, runs: list[RunRecord]) -> None:
        try:
            await self.queue.publish_many([(run.queue, run.id, run.priority) for run in runs])
        except ServiceUnavailable as exc:
            ids = ", ".join(f"'{run.id}'" for run in runs[:3]) + (" ..." if len(runs) > 3 else "")
            raise ServiceUnavailable(
                f"{exc}; run {ids} is recorded (queued) and a worker's sweeper will publish it"
            ) from exc

    async def _admit(self, row: dict[str, Any]) -> RunRecord:
        """Commit one prepared run row, then publish it (unless it exists and is not queued)."""
        await self.open()
        await self._refuse_unsafe_new_ids([row])
        run, publish = await self._insert(row)
        if publish:
            await self._publish([run])
        return run

    async def continue_run(
        self,
        run_id: str,
        input: dict[str, Any] | None = None,
        *,
        run_id_new: str | None = None,
        principal: Principal | None = None,
    ) -> RunRecord:
        """Start a new run that continues a finished one: same workflow, the original's budget
        (shared, not renewed), its deadline and its tenant. The original gets a 'continued' event
        naming the new run and the ``principal`` who asked (the dashboard's retry)."""
        original = await self.status(run_id)
        if not original.final:
            raise RunNotFinished(
                f"run '{run_id}' is {original.state}, not finished: it goes on by itself "
                f"(cancel it first with: outlast cancel {run_id})"
            )
        data = original.input if input is None else input
        new = await self._admit(
            self._prepare(original.workflow, data, run_id=run_id_new, queue=original.queue, parent=original)
        )
        who = principal.record() if principal else {}
        await self.store.runs.event(run_id, "continued", {"as": new.id, **who})
        return new
