"""This module makes claims and hand-backs. An entry becomes a run this worker holds (one
conditional ``UPDATE`` that bumps the fencing token and sets the lease), is executed, and its entry
acknowledged only after. An entry that is not claimed is dead-lettered (no such run, another
queue's), handed back to the queue (a program or a workflow this worker does not serve, while a
live worker serves it; a workflow no live worker knows stays queued), refused (``program_changed``)
or simply acknowledged. A run an operator paused is parked, at its claim or at a crossing
(``pausing.py``). A run the worker stops serving (lease lost, or SIGTERM) is abandoned to its
new owner or released and published again."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable
from typing import Protocol

import structlog

from outlast import _failpoints as failpoints, _metrics as metrics
from outlast._model import RunRecord, RunState
from outlast.app import App
from outlast.errors import Fenced, ServiceUnavailable
from outlast.queue import Delivery, Queue, RateWindows
from outlast.settings import Settings
from outlast.store import Claimed, Store
from outlast.worker.control import Interrupted, RunControl
from outlast.worker.executor import Execution, Outcome
from outlast.worker.linger import Linger
from outlast.worker.live import LiveOutput
from outlast.worker.pausing import executed
from outlast.worker.scope import take
from outlast.worker.state import Active, WorkerState

log = structlog.get_logger("outlast.worker")


class Later(Protocol):
    """``Later`` is the shape of ``Worker.later``: publish a run's id after ``delay`` seconds."""

    def __call__(
        self, delay: float, queue: str, run_id: str, hops: int = 0, priority: str = "normal"
    ) -> None: ...


class Claims:
    """``Claims`` takes a delivered entry to a held run, and a held run back to the queue."""

    def __init__(
        self,
        *,
        state: WorkerState,
        settings: Settings,
        app: App,
        store: Store,
        queue: Queue,
        windows: RateWindows,
        ack: Callable[[Delivery], Awaitable[None]],
        later: Later,
        settled: Callable[[], bool],
        steady: Callable[[], float | None],
        live: LiveOutput | None = None,
        linger: Linger | None = None,
    ) -> None:
        self.state = state
        self.s = settings
        self.app = app
        self.store = store
        self.queue = queue
        self.windows = windows  # shared rate limits of tools (outlast.worker.flow)
        self.live = live  # where its runs' live chunks go
        self.linger = linger  # a receive with no message waits here a moment (worker/linger.py)
        self._ack = ack
        self._later = later
        self._settled = settled  # Heartbeat.settled: Postgres has answered for a whole lease
        self._steady = steady  # Heartbeat.steady: for how long it has

    async def serve(self, d: Delivery, reclaimed: bool) -> None:
        try:
            await self.serve_one(d, reclaimed)
        except ServiceUnavailable as exc:
            # Not acknowledged: the entry is reclaimed once idle, the lease expires by itself.
            log.warning("run.left_for_later", run_id=d.run_id, error=str(exc))
        except Exception:
            log.exception("run.serve_failed", run_id=d.run_id)

    async def serve_one(self, d: Delivery, reclaimed: bool = False) -> None:
        s = self.s
        run_id = d.run_id
        if d.problem is not None or run_id is None:
            await self.dead_letter(d, d.problem or f"unparseable entry {d.fields!r}: no run id")
            return
        if run_id in self.state.active:
            await self._ack(d)  # a duplicate of a run this worker is running
            return
        claimed, sent = await self._claim(d, run_id, reclaimed)
        if claimed is None:
            found = await self.store.runs.get_run(run_id)
            if found is None or not self._ours(found):
                await self._not_claimed(d, run_id, found, reclaimed)
                return
            # Our own claim, whose acknowledgement was lost and whose retry was then refused.
            # Its lease is not proven from here: the next heartbeat proves it before a dispatch.
            claimed = Claimed(found, await self.store.sweeps.db_now())
            sent = time.monotonic() - s.lease_ttl
        run, db_now, turn, paused = claimed
        if turn is not None:  # the next run of the tenant, in its turn (lost here: the sweeper's)
            self._later(0.0, turn[1], turn[0], priority=turn[2])
        control = RunControl(
            run_id=run.id,
            token=run.fencing_token,
            ttl=s.lease_ttl,
            sent_at=sent,
            cancel=run.cancel_requested,
            linger=self.linger,
        )
        taken = take(
            run=run,
            app=self.app,
            store=self.store,
            db_now=db_now,
            control=control,
            settings=s,
            windows=self.windows,
            live=self.live,
        )
        execution = Execution(run=run, app=self.app, store=self.store, taken=taken)
        claimed_at = time.monotonic()
        if run.attempts > s.max_attempts:
            reason = f"crashed its worker {run.attempts - 1} times"
            await execution.finish(RunState.FAILED, reason=reason)
            await self._ack(d)
            return
        active = Active(d, execution)
        self.state.active[run_id] = active
        try:
            active.task = asyncio.current_task()
            inner = asyncio.create_task(executed(self.store.pauses, execution, paused, db_now))
            try:
                outcome = await asyncio.shield(inner)
            except asyncio.CancelledError:
                outcome = None
            if outcome is None:
                await self._after_cancel(active, inner)
                return
        finally:
            self.state.active.pop(run_id, None)
        if outcome is Outcome.FINAL and self.live is not None:
            self.live.ended(run_id)  # its live readers told at once, if it streamed here
        failpoints.hit("before_ack")
        await self._ack(d)
        execution.log.debug("run.acknowledged", outcome=outcome.value)
        for queue, other in execution.hand_out():  # child runs started, a parent woken
            self._later(0.0, queue, other)
        if execution.wake_at is not None:
            # Wake a short timer from here, to the second; the sweeper covers a worker that dies.
            delay = (execution.wake_at - db_now).total_seconds() - (time.monotonic() - claimed_at)
            self._later(max(delay, 0.0), d.queue, run_id, priority=run.priority)

    async def _after_cancel(self, active: Active, inner: asyncio.Task[object]) -> None:
        """The serving task was cancelled: the lease was lost, or the worker is stopping."""
        ex = active.execution
        control = ex.control
        if not inner.done():
            control.stop.set()
            if control.lost.is_set() or control.dispatching == 0:
                inner.cancel()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.gather(inner, return_exceptions=True), self.s.grace)
            inner.cancel()
            await asyncio.gather(inner, return_exceptions=True)
        if control.lost.is_set():
            ex.log.warning("lease.lost")
            await self._ack(active.delivery)
            return
        if inner.done() and not inner.cancelled() and inner.exception() is None:
            await self._ack(active.delivery)  # it got to a final state or a wait after all
            return
        try:  # the run's held entries first: on failure no release, its lease runs out instead
            released = await ex.writes.fenced(
                "release", self.store.leases.release(ex.run.id, control.token, "worker shutting down")
            )
        except Fenced as exc:
            ex.log.warning("run.not_handed_over", error=str(exc))  # its lease runs out instead
            released = False
        except Interrupted as exc:
            raise ServiceUnavailable(str(exc)) from exc
        if released:
            await self.queue.publish(active.delivery.queue, ex.run.id, priority=ex.run.priority)
            ex.log.info("run.handed_over")
        await self._ack(active.delivery)

    async def _claim(self, d: Delivery, run_id: str, reclaimed: bool) -> tuple[Claimed | None, float]:
        """The run's lease taken, and when the claim was sent. A worker claims no reclaimed entry
        until Postgres has answered it for a whole lease (from its start, or after an outage
        every worker saw); nor, after an outage this worker saw, does the claim take an expired
        lease whose owner has not beaten since, until it has been silent for three of its TTLs
        (the claim says how long Postgres has answered this worker again): the owner's first
        renewal decides (an expired lease renews under its unchanged token), not a timer."""
        s = self.s
        while reclaimed and not self._settled() and not self.state.stopping.is_set():
            await asyncio.sleep(s.lease_ttl / 10)
        # An entry taken from a silent worker: its lease may outlive the entry's idle time by a
        # little; wait for it (up to one lease) rather than leaving the run for a later reclaim.
        give_up = time.monotonic() + (s.lease_ttl if reclaimed else 0.0)
        while True:
            sent = time.monotonic()
            claimed = await self.store.leases.claim(
                run_id, self.state.name, s.lease_ttl, self.state.programs, d.queue, self._steady()
            )
            if claimed is not None or time.monotonic() >= give_up or self.state.stopping.is_set():
                return claimed, sent
            await asyncio.sleep(s.lease_ttl / 5)

    def _ours(self, run: RunRecord) -> bool:
        return (
            run.owner == self.state.name
            and run.state in (RunState.RUNNING, RunState.CANCELLING)
            and run.id not in self.state.active
        )

    async def _not_claimed(
        self, d: Delivery, run_id: str, run: RunRecord | None, reclaimed: bool = False
    ) -> None:
        if run is None:
            await self.dead_letter(d, f"no run '{run_id}'")
            return
        if run.queue != d.queue:
            await self.dead_letter(d, f"run '{run_id}' belongs to queue '{run.queue}', not '{d.queue}'")
            return
        mine = self.state.programs.get(run.workflow)
        unserved = mine is None or (run.program is not None and mine != run.program)
        if unserved and await self._hand_back(d, run):
            return
        if mine is None and run.program is None and run.state is RunState.QUEUED:
            # A workflow this app does not know (another app's, on the same queue), never taken by
            # a worker that knows it: it stays queued, published again by the sweeper, until one does.
            log.warning("run.unknown_workflow", run_id=run_id, workflow=run.workflow, queue=run.queue)
            await self._ack(d)
            return
        if unserved and run.state in (RunState.QUEUED, RunState.RUNNING, RunState.WAITING):
            # Queued, its worker died (the lease expired), or its timer is due: a program this
            # worker does not serve, and no live worker does.
            msg = (
                f"run '{run_id}': the program changed since this run started (admitted with "
                f"{run.workflow} {run.program}, this worker serves {mine or 'no such workflow'}); "
                f"start a worker that serves it, or migrate: outlast resume {run_id} --accept-program-change"
            )
            if await self.store.leases.refuse_program(run_id, mine, msg, self.s.program_grace):
                log.warning("run.program_changed", run_id=run_id, message=msg)
                await self._ack(d)
                return
        if reclaimed and run.state in (RunState.RUNNING, RunState.CANCELLING):
            # Reclaimed while its owner's lease was not proven, and proven again since: never
            # dropped. Left pending and untouched, the owner's heartbeat takes it back; should
            # the owner die, it is reclaimed again once idle for a lease.
            return
        # Leased by a live worker (a duplicate: that worker holds an entry of its own, reclaimed
        # if it dies), final, or waiting (the sweeper wakes what is due): nothing to do here.
        await self._ack(d)

    async def _hand_back(self, d: Delivery, run: RunRecord) -> bool:
        """A rolling deploy: a run of a program this worker does not serve goes back to the queue
        for a worker that does, while a live worker serves it (or one did within
        ``program_grace`` seconds). Each hop waits twice as long (up to 2 s), so that an entry
        bounced between workers of the new program does not spin; a hop lost with this worker
        is re-published by the sweeper (Postgres says the run is due)."""
        if not await self.store.fleet.program_served(run.id, self.s.program_grace):
            return False
        hops = d.fields.get("hops", "0")
        hops_before = min(int(hops), 10) if hops.isdigit() else 0
        await self._ack(d)
        self._later(min(0.05 * 2**hops_before, 2.0), d.queue, run.id, hops_before + 1, run.priority)
        metrics.handed_back(d.queue)
        return True

    async def dead_letter(self, d: Delivery, reason: str) -> None:
        log.error("entry.dead_lettered", entry=d.entry_id, reason=reason)
        await self.queue.dead_letter(d, reason)
        metrics.dead_lettered(d.queue)
