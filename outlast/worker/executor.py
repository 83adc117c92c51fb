"""The executor carries out one claimed run: verify the journal, replay, go on live, commit how it ended."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from datetime import datetime
from enum import Enum
from typing import Any

import structlog

from outlast import _failpoints as failpoints, _metrics as metrics, _tracing as tracing
from outlast._journal import Unstorable, first_bad_crossing, jsonable, storable
from outlast._model import Partial, RunRecord, RunState
from outlast._payloads import INPUT, column_ref, result_held, result_of, too_large, wanted
from outlast._secrets import Secrets
from outlast.app import App, Workflow
from outlast.errors import (
    BudgetExhausted,
    Cancelled,
    DeadlineExceeded,
    Fenced,
    InDoubt,
    JournalAltered,
    OutlastError,
    PartialRefused,
    PayloadChanged,
    ResumeRefused,
    ServiceUnavailable,
    TimedOut,
)
from outlast.store import Store
from outlast.worker.bugs import REASON as PARKED, error_of, is_bug, parked
from outlast.worker.carry import carried
from outlast.worker.control import CarriedForward, HandOver, Interrupted, Paused, Suspended
from outlast.worker.flow import workflow_key
from outlast.worker.replayer import Journaled
from outlast.worker.run import Run, RunEngine
from outlast.worker.scope import RunTaken, take

log = structlog.get_logger("outlast.worker")
REASON_CHARS = 500  # of a run's reason, as stored


class Outcome(Enum):
    FINAL = "final"  # a final state is committed
    WAITING = "waiting"  # a durable wait is committed; no worker is held
    FENCED = "fenced"  # another worker owns the run now


class Execution:
    """One claimed run on one worker, under the ``control`` the worker holds it by."""

    def __init__(self, *, run: RunRecord, app: App, store: Store, taken: RunTaken | None = None) -> None:
        """``taken``: what the worker took the run with (``scope.take``); else the run's own, with no
        settings (a test's)."""
        self.run, self.app, self.store = run, app, store
        taken = self.taken = taken or take(run=run, app=app, store=store)
        self.control, self.writes, self.gate = taken.control, taken.writes, taken.gate
        self.journal: Journaled | None = None  # loaded once the workflow is to run
        self.wake_at: datetime | None = None  # set when the run waits for a timer
        self.final_state: RunState | None = None  # set once a final state is committed
        self._started: list[list[tuple[str, str]]] = []  # (queue, id): children created, by generation
        self._woken: list[tuple[str, str]] = []  # (queue, id): the parent this run's end woke
        self.secrets: Secrets | None = None  # the run's, once its workflow runs: what it knows to scrub
        self.log = log.bind(run_id=run.id, fencing_token=run.fencing_token, workflow=run.workflow)

    async def finish(self, state: RunState, **kw: Any) -> Outcome:
        """Commit a final state with the fencing condition (Fenced if superseded); its result,
        error and reason with the secret values the run knows scrubbed out."""
        if self.secrets is not None:
            kw = self.secrets.scrub(kw)
        if kw.get("reason"):  # cut once scrubbed: a secret cut in two would be masked by neither half
            kw["reason"] = storable(kw["reason"])[:REASON_CHARS]
        if kw.get("result") is not None and self.writes.inline_max is not None:
            kw["result"] = await self._held(kw["result"], self.writes.inline_max)
        length = self.run.journal_len if self.journal is None else self.journal.length  # as chained here
        written = self.store.leases.finish(self.run.id, self.control.token, state, length, **kw)
        if not await self.writes.fenced("finish", written, chained=True):
            raise Fenced(self.run.id, self.control.token)
        failpoints.hit("after_final")
        self.final_state = state
        if self.run.started_by is not None:
            with contextlib.suppress(ServiceUnavailable):  # the sweeper wakes it otherwise
                queue = await self.store.children.wake_parent(self.run.started_by, self.run.id)
                if queue is not None:
                    self._woken.append((queue, self.run.started_by))
        metrics.run_finished(self.run.workflow, state, self.run.tenant)
        self.log.info("run.finished", state=str(state), reason=kw.get("reason"))
        return Outcome.FINAL

    async def _held(self, result: Any, inline_max: int) -> Any:
        """A result past ``OUTLAST_MAX_PAYLOAD`` stored in the payload store (waiting out an
        outage, as a journal entry's values do): what the run's row holds instead."""
        found = result_held(result, inline_max)
        if found is None:
            return result
        held, sha, body = found
        await self.writes.store_payloads({sha: body})
        return held

    async def _wait(self, reason: str, message: str) -> Outcome:
        message = self.secrets.scrub(message) if self.secrets is not None else message
        waiting = self.store.leases.wait(self.run.id, self.control.token, reason, message)
        if not await self.writes.fenced("wait", waiting):
            raise Fenced(self.run.id, self.control.token)
        self.log.warning("run.waiting", reason=reason, message=message)
        return Outcome.WAITING

    def hand_out(self) -> list[tuple[str, str]]:
        """(queue, run id) to publish once the entry is acked: children started, the parent woken."""
        return [child for started in self._started for child in started] + self._woken

    async def execute(self) -> Outcome:
        """Run the workflow to a final state or a durable wait. Raises ServiceUnavailable (the
        run keeps its lease until it expires), HandOver and Paused; returns FENCED if superseded."""
        metrics.run_started(self.run.workflow, self.run.tenant)
        with tracing.run_attempt(self.run, self.control.token) as span:
            try:
                outcome = await self._execute()
            except Fenced as exc:
                self.log.warning("run.fenced", error=str(exc))
                if not self.control.lost.is_set():  # counted once per run, here or at a heartbeat
                    metrics.lease_lost()
                    self.control.lost.set()
                outcome = Outcome.FENCED
            except Interrupted as exc:
                raise ServiceUnavailable(str(exc)) from exc
            finally:
                await self.gate.release()
            span.set(outcome=outcome.value, state=self.final_state)
            return outcome

    async def _execute(self) -> Outcome:
        run = self.run
        wf = self.app.workflows.get(run.workflow)
        if wf is None:
            return await self.finish(RunState.FAILED, reason=f"unknown workflow '{run.workflow}'")
        if column_ref(run.input, INPUT) is not None:  # an input held by reference, read back
            try:
                self.run = run = await self.control.db(self.store.payloads.whole_record(run))
            except PayloadChanged as exc:
                return await self.finish(RunState.FAILED, reason=str(exc))
        if not isinstance(run.input, dict):
            return await self.finish(RunState.FAILED, reason="input is not a JSON object")
        if (held_back := await self._held_back(wf)) is not None:
            return held_back
        while isinstance(outcome := await self._generation(wf), CarriedForward):  # the next, on this lease
            self.run = await carried(
                self.store.generations, self.writes, self.control, self.run, self.journal, outcome
            )
        return outcome

    async def _generation(self, wf: Workflow) -> Outcome | CarriedForward:
        """Run the current generation of the run's journal: to an outcome, or to its carry."""
        run = self.run
        entries = await self.store.journal.journal_to_replay(run.id) if run.journal_len else []
        bad = first_bad_crossing(entries, run.journal_head)
        if bad is not None:
            exc = JournalAltered(run.id, bad)
            return await self._wait(exc.reason, str(exc))
        self.writes.stored.update(wanted(entries))  # values journaled by reference: not stored again
        self.journal = journal = Journaled(entries)  # indexed once: logged here, served by the replayer
        journal.log_resumed(self.log)
        self.secrets = Secrets(self.app, self.taken.callbacks[0])
        scope = self.taken.scope(run, journal, self.secrets)
        ctx = Run(scope, self.store)
        end = RunEngine(ctx)  # the engine's side of it
        self._started += [end.children_started]
        try:
            value = await self._workflow(wf.fn, ctx, end)
            end.check_consumed()
            if isinstance(value, CarriedForward):
                return value
            state, result = self._outcome(wf, value)
            del value  # a large result is held as its text alone from here
        except (Fenced, ServiceUnavailable, HandOver, Paused):  # Paused: claims.py parks the run
            raise
        except Suspended as exc:
            self.wake_at = exc.wake_at
            return Outcome.WAITING
        except Cancelled:
            undone = await end.compensate() if "cancel" in wf.compensate_on else None
            return await self.finish(RunState.CANCELLED, result=undone, reason="cancelled on request")
        except ResumeRefused as exc:
            return await self._wait(exc.reason, str(exc))
        except InDoubt as exc:
            return await self._wait("in_doubt", str(exc))
        except TimedOut as exc:
            return await self._stopped(wf, RunState.TIMED_OUT, exc)
        except BudgetExhausted as exc:
            return await self._stopped(wf, RunState.EXHAUSTED, exc)
        except Exception as exc:
            return await self._raised(wf, end, exc, journal.length)
        return await self.finish(state, result=result)

    async def _raised(self, wf: Workflow, end: RunEngine, exc: Exception, crossings: int) -> Outcome:
        """The workflow raised: a bug parks the run (not while it is cancelled), a failure it
        means ends it ``failed``, compensated if it asked."""
        if is_bug(wf, exc) and not self.control.cancel.is_set():
            self.log.error("run.bug_parked", error=error_of(exc))
            return await self._wait(PARKED, parked(self.run.id, exc, crossings))
        reason = str(exc) if isinstance(exc, OutlastError) else f"{type(exc).__name__}: {exc}"
        undone = await end.compensate() if "failure" in wf.compensate_on else None
        return await self.finish(RunState.FAILED, result=undone, error=error_of(exc), reason=reason)

    async def _held_back(self, wf: Workflow) -> Outcome | None:
        """Before the workflow runs: a deadline already passed ends the run; a capped workflow
        takes its slot, or the run is parked until one may be free."""
        run = self.run
        if run.deadline is not None and self.taken.db_now is not None and run.deadline <= self.taken.db_now:
            late = DeadlineExceeded(f"run '{run.id}': its deadline passed before it was resumed")
            return await self._stopped(wf, RunState.TIMED_OUT, late, reason="deadline passed")
        if self.control.cancel.is_set() or wf.max_concurrent is None:  # cancelled: compensates only
            return None
        try:
            key = workflow_key(wf, run.input, run.tenant)
        except Exception as exc:
            why = f"the concurrency_key of workflow '{wf.name}' raised {type(exc).__name__}: {exc}"
            return await self.finish(RunState.FAILED, error=error_of(exc), reason=why)
        if await self.gate.workflow_slot(key, wf.max_concurrent):
            return None
        # every slot taken: wait with no worker held, woken when one is freed (timer, sweeper)
        what = f"a slot of {key} (max_concurrent={wf.max_concurrent})"
        self.wake_at = await self.gate.park("concurrency_slot", what, 0.0, key)
        return Outcome.WAITING

    def _outcome(self, wf: Workflow, value: Any) -> tuple[RunState, Any]:
        """The final state and stored result of what the workflow returned (``Partial``: partial)."""
        state = RunState.SUCCEEDED
        if isinstance(value, Partial):
            if not wf.accepts_partial:
                raise PartialRefused(
                    f"run '{self.run.id}': workflow '{wf.name}' returned a Partial but does not accept "
                    "partial results; declare it with @app.workflow(..., partial=True)"
                )
            state, value = RunState.PARTIAL, value.result()
        limit = self.writes.referenced or self.taken.max_payload
        try:
            if type(value) is dict and self.writes.inline_max is not None and limit is not None:
                scrub = self.secrets.scrub if self.secrets is not None else None
                return state, result_of(value, limit, self.writes.inline_max, scrub)
            return state, jsonable(value, limit)
        except Unstorable as exc:
            raise too_large(self.run.id, f"the result of workflow '{wf.name}'", exc) from None

    async def _stopped(
        self, wf: Workflow, state: RunState, exc: OutlastError, reason: str | None = None
    ) -> Outcome:
        """Ended by its deadline or budget: ``state``, or ``partial`` with what its partial handler
        says it produced (not for an expired approval). ``reason``: found passed before it went on."""
        handler = wf.partial
        error = None if reason else error_of(exc)
        reason = reason or str(exc)
        if callable(handler) and isinstance(exc, DeadlineExceeded | BudgetExhausted):
            result = None
            try:
                got = handler(self.run.input, exc)
                if isinstance(got, Partial):
                    result = jsonable(got.result(), self.writes.referenced or self.taken.max_payload)
            except Exception as failed:  # the run still ends as its stop says, with nothing partial
                said = f"{type(failed).__name__}: {failed}"
                self.log.warning(
                    "run.partial_handler_failed",
                    error=self.secrets.scrub(said) if self.secrets else said,
                    state=str(state),
                )
            if result is not None:
                return await self.finish(RunState.PARTIAL, result=result, error=error_of(exc), reason=reason)
        return await self.finish(state, error=error, reason=reason)

    async def _workflow(self, fn: Callable[..., Awaitable[Any]], ctx: Run, end: RunEngine) -> Any:
        """Run the workflow function; however it ends, the calls and child waits it left under
        way (the siblings of a ``gather`` that raised) settle, their results journaled, before the
        run ends (``RunEngine.ended``: or waits, if one of them committed a wait)."""
        try:
            value = await fn(ctx, **self.run.input)
        except CarriedForward as carry:
            value = carry  # settled below like a return, then carried (``carry.py``)
        except (Fenced, ServiceUnavailable, HandOver, Interrupted):
            self.control.dispatch_stopped = True
            raise
        except (Exception, Cancelled, Paused):  # the calls under way settle, journaled, first
            await end.ended()
            self._left_if_abandoned()
            raise
        await end.ended()
        self._left_if_abandoned()
        return value

    def _left_if_abandoned(self) -> None:
        """A crossing was interrupted (and the workflow may have swallowed it): whatever the
        workflow did next, the run is left for later, never ended on this worker."""
        if self.control.dispatch_stopped:
            raise Interrupted(f"run '{self.run.id}': a crossing was interrupted; left for later")
