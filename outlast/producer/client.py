"""Client and AsyncClient: enqueue runs, read their status, wait for results, resolve doubts.

AsyncClient is the one implementation; Client is a thin synchronous facade that runs it on a
private event loop thread (so it also works inside a program that has a loop of its own).
"""

from __future__ import annotations

import asyncio
import math
import threading
import uuid
from collections.abc import AsyncGenerator, Coroutine, Iterable, Iterator, Sequence
from datetime import datetime, timedelta
from typing import Any, TypeVar

from outlast import tracing
from outlast.app import App
from outlast.approvals import Proposed, Verdict, check_comment, decider, judge
from outlast.errors import (
    InvalidInput,
    NotInDoubt,
    RunChanged,
    RunConflict,
    RunFinished,
    RunNotFinished,
    RunNotWaiting,
    ServiceUnavailable,
    UnknownApproval,
    UnknownRun,
    UnknownSchedule,
    WaitTimeout,
)
from outlast.identity import Principal, cli_principal
from outlast.journal import Entry, canonical, digest, first_bad_crossing, make_entry, operation_state
from outlast.model import FINAL_STATES, Run, RunState
from outlast.queue import Queue
from outlast.queue.streams import LEVELS
from outlast.schedules import next_tick
from outlast.services import resolve
from outlast.settings import MAX_AGE, Settings, check_name
from outlast.store import SCHEMA_VERSION, OnWait, Pruned, Store
from outlast.store.sessions import Sessions

T = TypeVar("T")

NO_INPUT: dict[str, Any] = {}  # enqueue's default, by identity: an omitted input is {}; None is refused
MAX_DEADLINE = 10 * 365 * 86400.0  # ten years, in seconds
MAX_LIST = 10_000


def _show(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _check_text(value: object, what: str, where: str, limit: int = 200) -> str:
    """An id or a name: 1 to ``limit`` printable characters (no NUL, newline or other control)."""
    if isinstance(value, str) and 0 < len(value) <= limit and value.isprintable():
        return value
    raise InvalidInput(
        f"{where + ': ' if where else ''}{what} must be 1 to {limit} printable characters "
        f"(no NUL, newline or other control character), got {_show(value)}"
    )


def _check_json(value: Any, what: str, where: str, limit: int) -> str:
    """The canonical text of ``value``, or ``InvalidInput`` naming whose value it is and why."""
    try:
        return canonical(value, limit=limit)
    except InvalidInput as exc:
        raise InvalidInput(f"{where}: {what} is refused: {exc}") from None


def _deadline_seconds(deadline: timedelta | float | None, where: str) -> float | None:
    if deadline is None:
        return None
    seconds = deadline.total_seconds() if isinstance(deadline, timedelta) else deadline
    if isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 < seconds <= MAX_DEADLINE:
        raise InvalidInput(
            f"{where}: the deadline must be a number of seconds in (0, {MAX_DEADLINE:.0f}] (ten years), "
            f"got {_show(deadline)}"
        )
    return float(seconds)


def _start(start_at: datetime | None, delay: timedelta | float | None, where: str) -> dict[str, Any]:
    """A delayed run's start, as the row's ``start_at`` (a timezone-aware datetime) or
    ``start_in`` (``delay`` seconds from now, by the database clock); not both."""
    if start_at is not None and delay is not None:
        raise InvalidInput(f"{where}: give start_at or delay, not both")
    if start_at is not None and (not isinstance(start_at, datetime) or start_at.tzinfo is None):
        raise InvalidInput(
            f"{where}: start_at must be a timezone-aware datetime (e.g. datetime.now(UTC)), "
            f"got {_show(start_at)}"
        )
    seconds = delay.total_seconds() if isinstance(delay, timedelta) else delay
    if seconds is not None and (
        isinstance(seconds, bool) or not isinstance(seconds, int | float) or not 0 <= seconds <= MAX_DEADLINE
    ):
        raise InvalidInput(
            f"{where}: the delay must be a number of seconds in [0, ten years], got {_show(delay)}"
        )
    return {"start_at": start_at, "start_in": None if seconds is None else float(seconds)}


def _check_budget(budget: Any, where: str) -> None:
    if budget is None:
        return
    if not isinstance(budget, dict):
        raise InvalidInput(f"{where}: the budget must map names to limits, got {type(budget).__name__}")
    for name, limit in budget.items():
        _check_text(name, "a budget's name", where, 100)
        number = isinstance(limit, int | float) and not isinstance(limit, bool)
        if not number or limit < 0 or (isinstance(limit, float) and not math.isfinite(limit)):
            raise InvalidInput(f"{where}: budget '{name}' must be a finite number >= 0, got {_show(limit)}")


class AsyncClient:
    """Talks to Postgres (the truth) and Redis (the hand-out) on behalf of an application."""

    def __init__(
        self,
        database_url: str | None = None,
        redis_url: str | None = None,
        *,
        app: App | None = None,
        settings: Settings | None = None,
    ) -> None:
        s = (settings or Settings()).with_(database_url=database_url, redis_url=redis_url)
        self.settings, self.note = resolve(s)
        assert self.settings.database_url and self.settings.redis_url
        self.app = app
        self.store = Store(
            self.settings.database_url,
            self.settings.schema,
            max_size=4,
            retry_for=self.settings.store_retry,
            tenant_window=self.settings.tenant_window,
        )
        self.queue = Queue(self.settings.redis_url, self.settings.prefix)
        self.sessions = Sessions(self.store)  # the dashboard's sign-ins (0016)
        self._opened = False

    @classmethod
    def from_env(cls, app: App | None = None, **overrides: Any) -> AsyncClient:
        return cls(app=app, settings=Settings.from_env(**overrides))

    async def open(self) -> AsyncClient:
        if not self._opened:
            await self.store.open()
            self._opened = True
        return self

    async def close(self) -> None:
        await self.store.close()
        await self.queue.close()

    async def __aenter__(self) -> AsyncClient:
        return await self.open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

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
    ) -> Run:
        """Commit the run row (state ``queued``), then add its id to the queue's stream.

        Idempotent on ``run_id``: the same id, workflow, input, tenant and priority return the
        existing run; another of them raises ``RunConflict``. ``input`` is a JSON object (omitted:
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
                start=_start(start_at, delay, f"a run of '{workflow}'"),
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
    ) -> list[Run]:
        """Enqueue many runs of one workflow at once: every input is checked first (one bad input
        and nothing is written), the rows are committed together (the writer shares commits), and
        the ids go to the stream in one pipelined round trip. Give ``run_ids`` to make a retry
        after a failure safe: the runs already recorded are then returned, not made twice.
        ``start_at`` or ``delay`` delays them all, as in ``enqueue``."""
        start = _start(start_at, delay, f"enqueue_many of '{workflow}'")
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
        parent: Run | None = None,
        start: dict[str, Any] | None = None,
        priority: str = "normal",
        tenant: str | None = None,
    ) -> dict[str, Any]:
        """Check everything about a run to admit, before anything is written; return the row."""
        _check_text(workflow, "the workflow's name", "enqueue")
        if run_id is not None:
            _check_text(run_id, "the run id", f"a run of '{workflow}'")
        where = f"run '{run_id}'" if run_id else f"a run of '{workflow}'"
        if input is None:
            raise InvalidInput(f"{where}: the input is null; pass a JSON object ({{}} for none)")
        if not isinstance(input, dict):
            raise InvalidInput(f"{where}: the input must be a JSON object, got {type(input).__name__}")
        data = {} if input is NO_INPUT else input
        ihash = digest(_check_json(data, "the input", where, self.settings.max_payload))
        if queue is not None:
            try:
                check_name(queue)
            except ValueError as exc:
                raise InvalidInput(f"{where}: the queue {exc}") from None
        seconds = _deadline_seconds(deadline, where)
        _check_budget(budget, where)
        if priority not in LEVELS:
            raise InvalidInput(f"{where}: no priority {priority!r}; use one of {', '.join(LEVELS)}")
        if tenant is not None:
            _check_text(tenant, "the tenant", where, 100)
        program = None
        if self.app is not None:
            program = self.app.get_workflow(workflow).program
        return {
            "id": run_id or uuid.uuid4().hex[:20],
            "workflow": workflow,
            "queue": queue or self.settings.queue,
            "input": data,
            "input_hash": ihash,
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

    async def _insert(self, row: dict[str, Any]) -> tuple[Run, bool]:
        """Commit the run row (idempotent on its id); say whether it is to be published."""
        run, created = await self.store.insert_run(**row)
        if not created:
            if run.workflow != row["workflow"]:
                raise RunConflict(run.id, f"workflow ('{run.workflow}')")
            if digest(canonical(run.input)) != row["input_hash"]:
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

    async def _publish(self, runs: list[Run]) -> None:
        try:
            await self.queue.publish_many([(run.queue, run.id, run.priority) for run in runs])
        except ServiceUnavailable as exc:
            ids = ", ".join(f"'{run.id}'" for run in runs[:3]) + (" ..." if len(runs) > 3 else "")
            raise ServiceUnavailable(
                f"{exc}; run {ids} is recorded (queued) and a worker's sweeper will publish it"
            ) from exc

    async def _admit(self, row: dict[str, Any]) -> Run:
        """Commit one prepared run row, then publish it (unless it exists and is not queued)."""
        await self.open()
        run, publish = await self._insert(row)
        if publish:
            await self._publish([run])
        return run

    async def status(self, run_id: str) -> Run:
        _check_text(run_id, "a run id", "")
        await self.open()
        run = await self.store.get_run(run_id)
        if run is None:
            raise UnknownRun(run_id)
        return run

    async def wait(self, run_id: str, timeout: float | None = None, poll: float = 1.0) -> Run:
        """Wait until the run is final and return it, with its stored result. Never runs the work.

        Woken by Postgres (LISTEN/NOTIFY) when the run changes, it costs the database nothing
        between changes; while its listening connection is lost it looks every ``poll`` seconds."""
        loop = asyncio.get_running_loop()
        until = None if timeout is None else loop.time() + timeout
        run = await self.status(run_id)
        if run.final:
            return run
        async with self.store.watch(run_id, poll) as watch:
            while True:
                run = await self.status(run_id)  # after LISTEN: no change falls between the two
                if run.final:
                    return run
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
    ) -> list[Run]:
        """The latest runs, newest first: in ``state``, of ``workflow``, on ``queue``, created
        at or after ``since`` (a time, or an age by the database clock), of ``tenant`` (each when
        given)."""
        if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_LIST:
            raise InvalidInput(f"the number of runs to list must be from 1 to {MAX_LIST}, got {_show(limit)}")
        await self.open()
        if state is not None and state not in set(RunState):
            known = ", ".join(RunState)
            raise InvalidInput(f"no run state '{state}' (states: {known})")
        return await self.store.list_runs(
            state, limit, workflow=workflow, queue=queue, since=since, tenant=tenant
        )

    async def children(self, run_id: str) -> list[dict[str, Any]]:
        """The child runs the run started (``run.start``): id, workflow, state, reason."""
        await self.status(run_id)
        return await self.store.children_of(run_id)

    async def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        await self.status(run_id)
        return await self.store.events(run_id, after)

    async def follow(self, run_id: str, after: int = 0, poll: float = 1.0) -> AsyncGenerator[dict[str, Any]]:
        """Every event of the run after event ``after``, as it happens, until the run is final.
        Woken by Postgres as ``wait`` is; each look resumes after the last event seen, so a lost
        listening connection (``poll`` seconds between looks meanwhile) loses nothing."""
        await self.status(run_id)
        async with self.store.watch(run_id, poll) as watch:
            while True:
                final = (await self.status(run_id)).final  # read before the events: none is missed
                for event in await self.store.events(run_id, after):
                    after = event["id"]
                    yield event
                if final:
                    return
                await watch.changed()

    async def journal(self, run_id: str) -> list[Entry]:
        await self.status(run_id)
        return await self.store.journal(run_id)

    async def journal_times(self, run_id: str) -> dict[int, datetime]:
        """When each journal entry (by its number) was committed, by the database clock."""
        await self.status(run_id)
        return await self.store.journal_times(run_id)

    async def budget(self, run_id: str) -> list[dict[str, Any]]:
        """The run's budget limits with what is spent and reserved ([] without a budget)."""
        run = await self.status(run_id)
        return await self.store.budget(run.budget_id) if run.budget_id else []

    async def prune(
        self, finished_before: timedelta | float, *, state: str | None = None, dry_run: bool = False
    ) -> tuple[datetime, Pruned]:
        """Delete the runs finished longer ago than ``finished_before`` (seconds, or a timedelta)
        — only final runs, of ``state`` if given — with their journal, events, approvals,
        reservations and the budgets no kept run shares, 500 runs per transaction. A run that a
        kept run continues is kept. ``dry_run`` counts instead. Returns the cutoff (database
        clock) and the counts."""
        age = finished_before.total_seconds() if isinstance(finished_before, timedelta) else finished_before
        if isinstance(age, bool) or not isinstance(age, int | float) or not 0 < age <= MAX_AGE:
            raise InvalidInput(
                f"prune: the age must be a number of seconds in (0, {MAX_AGE:.0f}], got {_show(age)}"
            )
        if state is not None and state not in {s.value for s in FINAL_STATES}:
            final = ", ".join(sorted(FINAL_STATES))
            raise InvalidInput(
                f"prune deletes only finished runs: the state must be one of {final}, got {_show(state)}"
            )
        await self.open()
        before = await self.store.cutoff(float(age))
        if dry_run:
            return before, await self.store.prune_count(before, state)
        return before, await self.store.prune(before, state)

    async def migrate(self, to: int = SCHEMA_VERSION) -> int:
        """Create or upgrade the schema (idempotent); returns the version now recorded."""
        if not self._opened:
            await self.store.open(check=False)
            self._opened = True
        return await self.store.migrate(to)

    async def verify(self, run_id: str) -> int | None:
        """The first crossing whose chain does not verify, or None."""
        run = await self.status(run_id)
        return first_bad_crossing(await self.store.journal(run_id), run.journal_head)

    async def resolve(
        self,
        run_id: str,
        operation_id: str,
        *,
        executed: bool,
        result: Any = None,
        principal: Principal | None = None,
        comment: str | None = None,
    ) -> Run:
        """Record how an in-doubt operation ended, in the journal, and wake the run. The journal
        and the ``resolved`` event name who resolved it (``principal``; without one, the
        operating-system user and host of this program) and why (``comment``, when given)."""
        where = f"run '{run_id}', operation {operation_id}"
        if comment is not None:
            check_comment(comment, where)
        if executed:
            _check_json(result, "the result", where, self.settings.max_payload)
        run = await self.status(run_id)
        entries = await self.store.journal(run_id)
        if operation_state(e for e in entries if e.op_id == operation_id)[0] != "in_doubt":
            raise NotInDoubt(
                f"run '{run_id}': operation {operation_id} is not in doubt "
                f"(see the in-doubt operations with: outlast status {run_id})"
            )
        if run.state != RunState.WAITING or run.reason != "in_doubt":
            raise RunNotWaiting(f"run '{run_id}' is {run.state}, not waiting on an in-doubt operation")
        who = (principal or cli_principal("client")).record()
        data: dict[str, Any] = {"how": "operator", "executed": executed, "who": who}
        if comment is not None:
            data["comment"] = comment
        if executed:
            data["result"] = result
        entry = make_entry(run.journal_head, run.journal_len + 1, "resolution", operation_id, data)
        if await self.store.append(run_id, OnWait("in_doubt", run.journal_head), entry) is None:
            raise RunChanged(f"run '{run_id}' changed while resolving; look again: outlast status {run_id}")
        if executed and run.budget_id is not None:
            # It happened: what it reserved is spent (its estimate is all that is known).
            held = await self.store.reservations(run_id, operation_id)
            await self.store.settle(run.budget_id, run_id, operation_id, held, expected=True)
        detail = {"op": operation_id, "executed": executed, "who": who, "comment": comment}
        await self.store.event(run_id, "resolved", detail)
        await self.queue.publish(run.queue, run_id, priority=run.priority)
        return await self.status(run_id)

    async def continue_run(
        self, run_id: str, input: dict[str, Any] | None = None, *, run_id_new: str | None = None
    ) -> Run:
        """Start a new run that continues a finished one: same workflow, the original's budget
        (shared, not renewed), its deadline and its tenant."""
        original = await self.status(run_id)
        if not original.final:
            raise RunNotFinished(
                f"run '{run_id}' is {original.state}, not finished: it goes on by itself "
                f"(cancel it first with: outlast cancel {run_id})"
            )
        data = original.input if input is None else input
        return await self._admit(
            self._prepare(original.workflow, data, run_id=run_id_new, queue=original.queue, parent=original)
        )

    async def cancel(self, run_id: str) -> Run:
        """Record a cancellation. A queued run that never started is cancelled at once; a running
        one stops at its next crossing (a tool in flight finishes and its result is journaled); a
        waiting one is taken up by a worker to stop, running the compensations it asked for. The
        child runs it started, and theirs, are cancelled with it."""
        run = await self.status(run_id)
        if run.final:
            raise RunFinished(f"run '{run_id}' is already {run.state}: a final state never changes")
        got = await self.store.cancel(run_id, {"by": "client"})
        if got is None:
            raise RunFinished(f"run '{run_id}' finished meanwhile; see: outlast status {run_id}")
        state, queue = got
        if state == RunState.CANCELLING:
            await self.queue.publish(queue, run_id, priority=run.priority)
        await self._cancel_children(run_id)
        return await self.status(run_id)

    async def _cancel_children(self, run_id: str) -> None:
        """Cancel the unfinished runs ``run_id`` started, level by level: each level is read after
        the cancellation of the one above is committed, and a run whose cancellation is requested
        starts no child (``insert_child``), so none is missed."""
        level = [run_id]
        while level:
            below = await self.store.children(level)
            for child in below:
                got = await self.store.cancel(child, {"by": "parent", "with": run_id})
                if got is not None and got[0] == RunState.CANCELLING:
                    await self.queue.publish(got[1], child)
            level = below

    async def schedules(self) -> list[dict[str, Any]]:
        """Every schedule the workers have declared, each with ``next_tick`` (None while paused)."""
        await self.open()
        rows = await self.store.schedules()
        for r in rows:
            after = max(r["last_tick"], r.pop("db_now"))
            r["next_tick"] = None if r["paused"] else next_tick(r["cron"], r["tz"], after)
        return rows

    async def pause_schedule(self, name: str, paused: bool = True) -> dict[str, Any]:
        """Pause a schedule (no tick is enqueued), or resume it (``paused=False``): it goes on
        from now, the ticks of its pause skipped."""
        await self.open()
        row = await self.store.pause_schedule(name, paused)
        if row is None:
            raise UnknownSchedule(name)
        return row

    async def trigger_schedule(self, name: str) -> Run:
        """Enqueue a run of the schedule's workflow and input now, besides its ticks."""
        await self.open()
        rows = await self.store.schedules([name])
        if not rows:
            raise UnknownSchedule(name)
        r = rows[0]
        rid = f"{name}@trigger-{uuid.uuid4().hex[:12]}"
        return await self._admit(self._prepare(r["workflow"], r["input"], run_id=rid, queue=r["queue"]))

    async def approvals(self, run_id: str) -> list[dict[str, Any]]:
        """The run's approval requests, with their decisions."""
        await self.status(run_id)
        return await self.store.approvals(run_id)

    async def approval(self, run_id: str, approval_id: str) -> dict[str, Any]:
        """One approval request of the run, with its decision; ``UnknownApproval`` if none."""
        await self.status(run_id)
        req = await self.store.approval(run_id, approval_id)
        if req is None:
            raise UnknownApproval(run_id, approval_id)
        return req

    async def approve(
        self,
        run_id: str,
        approval_id: str,
        *,
        comment: str,
        args_hash: str,
        principal: Principal | None = None,
        approver: str | None = None,
    ) -> Run:
        """Approve the request ``approval_id`` of the run for the exact action whose arguments
        hash to ``args_hash`` (what the decider saw). The decider is ``principal`` when it was
        authenticated (the dashboard, the API); the CLI's principal (or none, for a program)
        decides as ``approver`` (the CLI's ``--as``), and its user and host are recorded beside."""
        return await self._decide(run_id, approval_id, "approved", comment, args_hash, principal, approver)

    async def reject(
        self,
        run_id: str,
        approval_id: str,
        *,
        comment: str,
        args_hash: str,
        principal: Principal | None = None,
        approver: str | None = None,
    ) -> Run:
        """Reject the request (the decider as for ``approve``); unless the workflow handles it,
        the run ends ``failed``."""
        return await self._decide(run_id, approval_id, "rejected", comment, args_hash, principal, approver)

    async def revise(
        self,
        run_id: str,
        approval_id: str,
        *,
        comment: str,
        args_hash: str,
        args: dict[str, Any],
        principal: Principal | None = None,
        approver: str | None = None,
    ) -> Run:
        """Close the request as revised with new arguments (the decider as for ``approve``); the
        workflow receives them, and acting on them needs a new approval."""
        where = f"run '{run_id}', approval {approval_id}"
        if not isinstance(args, dict):
            raise InvalidInput(f"{where}: revised arguments must be a JSON object, got {type(args).__name__}")
        _check_json(args, "the revised arguments", where, self.settings.max_payload)
        return await self._decide(
            run_id, approval_id, "revised", comment, args_hash, principal, approver, args
        )

    async def _decide(
        self,
        run_id: str,
        approval_id: str,
        status: str,
        comment: str,
        args_hash: str,
        principal: Principal | None,
        approver: str | None,
        new_args: dict[str, Any] | None = None,
    ) -> Run:
        where = f"run '{run_id}', approval {approval_id}"
        check_comment(comment, where)
        who, name = decider(principal, approver, where)
        proposed = Proposed(status, who, name, comment, args_hash, new_args)
        asked = await self.status(run_id)
        req = await self.store.approval(run_id, approval_id)
        if judge(req, proposed, run_id, where) is Verdict.DECIDE:
            decided, queue = await self.store.decide(
                run_id, approval_id, status, name, comment, new_args, proposed.who()
            )
            if decided:
                if queue is not None:
                    await self.queue.publish(queue, run_id, priority=asked.priority)
                return await self.status(run_id)
            req = await self.store.approval(run_id, approval_id)  # decided or expired meanwhile
            run = await self.status(run_id)
            judge(req, proposed, run_id, where, run_state=run.state)
        return await self.status(run_id)  # the same decision again: accepted, changes nothing

    async def counts(self) -> dict[str, int]:
        """How many runs are in each state."""
        await self.open()
        return await self.store.count_by_state()

    async def pending_approvals(self, limit: int = 200) -> list[dict[str, Any]]:
        """Every approval request still waiting for a decision, across runs, oldest first."""
        await self.open()
        return await self.store.pending_approvals(limit)

    async def change_mark(self) -> int:
        """A number that moves whenever anything happens to any run (for live views)."""
        await self.open()
        return await self.store.change_mark()

    async def resume(self, run_id: str, *, accept_program_change: bool = False) -> Run:
        """Put a waiting run back in the queue; ``accept_program_change`` migrates it to the
        program of the worker that takes it (replay must still match)."""
        run = await self.status(run_id)
        if run.final:
            raise RunFinished(
                f"run '{run_id}' is {run.state}: a finished run is never resumed; start a new run"
            )
        if run.state != RunState.WAITING:
            raise RunNotWaiting(f"run '{run_id}' is {run.state}, not waiting: nothing to resume")
        detail = {"accept_program_change": accept_program_change, "was": run.reason}
        if not await self.store.requeue(run_id, accept_program_change, detail):
            raise RunChanged(f"run '{run_id}' changed meanwhile; look again: outlast status {run_id}")
        await self.queue.publish(run.queue, run_id, priority=run.priority)
        return await self.status(run_id)


class Client:
    """The synchronous facade over ``AsyncClient``."""

    def __init__(
        self,
        database_url: str | None = None,
        redis_url: str | None = None,
        *,
        app: App | None = None,
        settings: Settings | None = None,
    ) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, name="outlast-client", daemon=True)
        self._thread.start()

        async def make() -> AsyncClient:
            return AsyncClient(database_url, redis_url, app=app, settings=settings)

        self.aio = self._call(make())
        self.settings = self.aio.settings
        self.note = self.aio.note

    @classmethod
    def from_env(cls, app: App | None = None, **overrides: Any) -> Client:
        return cls(app=app, settings=Settings.from_env(**overrides))

    def _call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result()

    def close(self) -> None:
        self._call(self.aio.close())
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)
        self._loop.close()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def enqueue(self, workflow: str, input: dict[str, Any] = NO_INPUT, **kw: Any) -> Run:
        return self._call(self.aio.enqueue(workflow, input, **kw))

    def enqueue_many(self, workflow: str, inputs: Iterable[dict[str, Any]], **kw: Any) -> list[Run]:
        return self._call(self.aio.enqueue_many(workflow, list(inputs), **kw))

    def status(self, run_id: str) -> Run:
        return self._call(self.aio.status(run_id))

    def wait(self, run_id: str, timeout: float | None = None, poll: float = 1.0) -> Run:
        return self._call(self.aio.wait(run_id, timeout, poll))

    def runs(self, state: str | None = None, limit: int = 50, **filters: Any) -> list[Run]:
        return self._call(self.aio.runs(state, limit, **filters))

    def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        return self._call(self.aio.events(run_id, after))

    def follow(self, run_id: str, after: int = 0, poll: float = 1.0) -> Iterator[dict[str, Any]]:
        events = self.aio.follow(run_id, after, poll)

        async def next_event() -> dict[str, Any] | None:
            return await anext(events, None)

        try:
            while (event := self._call(next_event())) is not None:
                yield event
        finally:  # stopped early: the listening connection is closed now, not at collection
            self._call(events.aclose())

    def journal(self, run_id: str) -> list[Entry]:
        return self._call(self.aio.journal(run_id))

    def verify(self, run_id: str) -> int | None:
        return self._call(self.aio.verify(run_id))

    def prune(self, finished_before: timedelta | float, **kw: Any) -> tuple[datetime, Pruned]:
        return self._call(self.aio.prune(finished_before, **kw))

    def resolve(self, run_id: str, operation_id: str, *, executed: bool, **kw: Any) -> Run:
        return self._call(self.aio.resolve(run_id, operation_id, executed=executed, **kw))

    def resume(self, run_id: str, *, accept_program_change: bool = False) -> Run:
        return self._call(self.aio.resume(run_id, accept_program_change=accept_program_change))

    def cancel(self, run_id: str) -> Run:
        return self._call(self.aio.cancel(run_id))

    def continue_run(self, run_id: str, input: dict[str, Any] | None = None, **kw: Any) -> Run:
        return self._call(self.aio.continue_run(run_id, input, **kw))

    def schedules(self) -> list[dict[str, Any]]:
        return self._call(self.aio.schedules())

    def pause_schedule(self, name: str, paused: bool = True) -> dict[str, Any]:
        return self._call(self.aio.pause_schedule(name, paused))

    def trigger_schedule(self, name: str) -> Run:
        return self._call(self.aio.trigger_schedule(name))

    def approvals(self, run_id: str) -> list[dict[str, Any]]:
        return self._call(self.aio.approvals(run_id))

    def approve(self, run_id: str, approval_id: str, **kw: Any) -> Run:
        return self._call(self.aio.approve(run_id, approval_id, **kw))

    def reject(self, run_id: str, approval_id: str, **kw: Any) -> Run:
        return self._call(self.aio.reject(run_id, approval_id, **kw))

    def revise(self, run_id: str, approval_id: str, **kw: Any) -> Run:
        return self._call(self.aio.revise(run_id, approval_id, **kw))
