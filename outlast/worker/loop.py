"""The worker: read run ids from the stream, claim each run's lease in Postgres, execute it,
and acknowledge the entry only once the run's state is committed. Heartbeats, reclaiming and
sweeping run beside it; SIGTERM hands runs over at once instead of waiting for the TTL."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import structlog
from redis.exceptions import RedisError

from outlast import failpoints, metrics
from outlast.app import App
from outlast.errors import ServiceUnavailable
from outlast.model import Run, RunState
from outlast.queue import Delivery, Queue, RateWindows
from outlast.queue.streams import LEVELS
from outlast.secrets import require_key
from outlast.settings import Settings
from outlast.store import Claimed, Store
from outlast.worker.control import RunControl
from outlast.worker.executor import Execution
from outlast.worker.priority import Weighted
from outlast.worker.sweeper import Sweeper

log = structlog.get_logger("outlast.worker")


@dataclass
class Active:
    """A run this worker holds: its delivery and what executes it (``execution.control`` is the
    hold itself: the token, the lease, and the stop, cancel and lost signals)."""

    delivery: Delivery
    execution: Execution
    task: asyncio.Task[None] | None = None


class Worker:
    """One asyncio loop serving up to ``concurrency`` runs from the given queues."""

    def __init__(self, app: App, store: Store, queue: Queue, settings: Settings, queues: list[str]) -> None:
        self.app = app
        self.store = store
        self.queue = queue
        self.s = settings
        self.queues = queues
        self.name = ""
        self.active: dict[str, Active] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        self._timers: set[asyncio.Task[None]] = set()
        self._stopping = asyncio.Event()
        self._done = asyncio.Event()
        self._room = asyncio.Event()
        self._levels: dict[str, Weighted] = {}  # per queue: whose turn it is among the levels
        self._early: list[Delivery] = []  # read past the room, started first when places free
        self._programs = app.programs()
        require_key(app, settings.secret_key)  # refused at start, not at the first secret call
        self.sweeper = Sweeper(store, queue, settings, queues, app.schedules, self._programs)
        self.windows = RateWindows(queue)  # shared rate limits of tools (outlast.worker.flow)
        self._ack_failing = False
        self._unacked: list[tuple[Delivery, asyncio.Future[None]]] = []
        self._acker: asyncio.Task[None] | None = None
        self._context = contextvars.copy_context()
        self.log = log

    # -- life ---------------------------------------------------------------------------

    async def run(self) -> None:
        """Serve until ``stop()`` (or SIGTERM/SIGINT when installed), then hand over."""
        for q in self.queues:
            await self.queue.ensure_group(q)
        if self.s.worker_name:
            self.name = self.s.worker_name
        else:
            # unique per process: a restarted worker's predecessor's entries are reclaimed
            self.name = self.queue.consumer_name(socket.gethostname())
        # Every line logged from here on (runs, operations, the sweeper) carries the worker id.
        structlog.contextvars.bind_contextvars(worker=self.name)
        self._context = contextvars.copy_context()  # the worker's own, without any run's
        self.log = log
        self.log.info(
            f"worker {self.name} serving queues {', '.join(self.queues)}",
            concurrency=self.s.concurrency,
            lease_ttl=self.s.lease_ttl,
        )
        work = [asyncio.create_task(c) for c in (self._read_loop(), self._sweep_loop())]
        if metrics.enabled():
            work.append(asyncio.create_task(self._every(metrics.REFRESH, self._gauges)))
        beat = asyncio.create_task(self._heartbeat_loop())  # goes on while runs are handed over
        await self._stopping.wait()
        for t in work:
            t.cancel()
        await asyncio.gather(*work, return_exceptions=True)
        await self._return_early()
        await self._hand_over()
        if self._acker is not None:
            await self._acker
        self._done.set()
        beat.cancel()
        await asyncio.gather(beat, return_exceptions=True)
        for t in self._timers:  # the sweeper wakes these runs instead
            t.cancel()
        with contextlib.suppress(Exception):  # a record left behind is shown as gone, then swept
            await self.store.forget_worker(self.name)
        self.log.info(f"worker {self.name} stopped")

    def stop(self) -> None:
        self._stopping.set()

    def install_signals(self) -> None:
        """SIGTERM/SIGINT: stop taking work and hand over; a second signal exits at once."""
        loop = asyncio.get_running_loop()

        def on_signal(sig: int) -> None:
            if self._stopping.is_set():
                os._exit(1)
            self.log.info(f"signal {signal.Signals(sig).name}: stopping, grace {self.s.grace}s")
            self.stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)

    async def _every(
        self, seconds: float, step: Callable[[], Awaitable[None]], until: asyncio.Event | None = None
    ) -> None:
        """Repeat a background step, through outages of Postgres or Redis, until the worker stops
        (checked too, not only cancelled: a Redis client can swallow a cancellation)."""
        while not (until or self._stopping).is_set():
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.log.warning(f"{step.__name__} failed, retrying: {exc}")
            await asyncio.sleep(seconds)

    # -- taking work --------------------------------------------------------------------

    def _room_left(self) -> int:
        return self.s.concurrency - len(self._tasks)

    async def _read_loop(self) -> None:
        reclaim_every = max(self.s.lease_ttl / 4, 0.25)  # a takeover within about TTL + 1 s
        block = max(50, int(min(1000, reclaim_every * 1000) / len(self.queues)))
        next_reclaim = 0.0
        while not self._stopping.is_set():  # as in _every: not only cancelled
            try:
                if time.monotonic() >= next_reclaim:
                    # Orphans first, even with no room: what a dead worker left goes ahead of the
                    # backlog, in a lane of their own.
                    next_reclaim = time.monotonic() + reclaim_every
                    await self._reclaim()
                while self._early and self._room_left() > 0:
                    self._start(self._early.pop(0))
                if self._room_left() <= 0:
                    self._room.clear()
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._room.wait(), max(next_reclaim - time.monotonic(), 0.01))
                    continue
                for q in self.queues:
                    for d in await self._read(q, block):
                        if self._room_left() > 0:
                            self._start(d)
                        else:
                            self._early.append(d)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.log.warning(f"reading the queue failed, retrying: {exc}")
                await asyncio.sleep(1)

    async def _read(self, queue: str, block: int) -> list[Delivery]:
        """Entries of the queue's priority levels for the room left: each level its weighted share
        (``priority.Weighted``), what a level leaves unused to the others, highest first; with
        nothing waiting, one read that waits for any level (up to one entry a level: those past
        the room wait in ``_early``, touched by the heartbeat, for the first places free)."""
        room = self._room_left()
        got: list[Delivery] = []
        drained: set[str] = set()  # levels that gave fewer than asked: read them no more this round
        for level, n in self._levels.setdefault(queue, Weighted()).share(room).items():
            read = await self.queue.read(queue, self.name, n, None, priority=level)
            got += read
            if len(read) < n:
                drained.add(level)
        for level in LEVELS:
            if level not in drained:
                got += await self.queue.read(queue, self.name, room - len(got), None, priority=level)
        return got or await self.queue.read_any(queue, self.name, block)

    def _start(self, d: Delivery, reclaimed: bool = False) -> None:
        held = self.active.get(d.run_id or "")
        if held is not None and held.delivery.entry_id == d.entry_id:
            return  # our own entry, still being served
        task = asyncio.create_task(self._serve(d, reclaimed))
        self._tasks.add(task)

        def done(t: asyncio.Task[None]) -> None:
            self._tasks.discard(t)
            self._room.set()

        task.add_done_callback(done)

    async def _serve(self, d: Delivery, reclaimed: bool) -> None:
        try:
            await self._serve_one(d, reclaimed)
        except ServiceUnavailable as exc:
            # Not acknowledged: the entry is reclaimed once idle, the lease expires by itself.
            self.log.warning(f"run {d.run_id}: left for later, {exc}")
        except Exception:
            self.log.exception(f"run {d.run_id}: unexpected error serving the entry")

    async def _serve_one(self, d: Delivery, reclaimed: bool = False) -> None:
        run_id = d.run_id
        if d.problem is not None or run_id is None:
            await self._dead_letter(d, d.problem or f"unparseable entry {d.fields!r}: no run id")
            return
        if run_id in self.active:
            await self._ack(d)  # a duplicate of a run this worker is running
            return
        # An entry taken from a silent worker: its lease may outlive the entry's idle time by a
        # little; wait for it (up to one lease) rather than leaving the run for a later reclaim.
        give_up = time.monotonic() + (self.s.lease_ttl if reclaimed else 0.0)
        while True:
            sent = time.monotonic()
            claimed = await self.store.claim(run_id, self.name, self.s.lease_ttl, self._programs, d.queue)
            if claimed is not None or time.monotonic() >= give_up or self._stopping.is_set():
                break
            await asyncio.sleep(self.s.lease_ttl / 5)
        if claimed is None:
            found = await self.store.get_run(run_id)
            if found is None or not self._ours(found):
                await self._not_claimed(d, run_id, found)
                return
            # Our own claim, whose acknowledgement was lost and whose retry was then refused.
            # Its lease is not proven from here: the next heartbeat proves it before a dispatch.
            claimed = Claimed(found, await self.store.db_now())
            sent = time.monotonic() - self.s.lease_ttl
        run, db_now, turn = claimed
        if turn is not None:  # the next run of the tenant, in its turn (lost here: the sweeper's)
            self._later(0.0, turn[1], turn[0], priority=turn[2])
        control = RunControl(run.id, run.fencing_token, self.s.lease_ttl, sent, run.cancel_requested)
        execution = Execution(
            run,
            self.app,
            self.store,
            db_now,
            control,
            self.s.max_payload,
            secret_key=self.s.secret_key,
            windows=self.windows,
        )
        claimed_at = time.monotonic()
        if run.attempts > self.s.max_attempts:
            reason = f"crashed its worker {run.attempts - 1} times"
            await execution.finish(RunState.FAILED, reason=reason)
            await self._ack(d)
            return
        active = Active(d, execution)
        self.active[run_id] = active
        try:
            active.task = asyncio.current_task()
            inner = asyncio.create_task(execution.execute())
            try:
                outcome = await asyncio.shield(inner)
            except asyncio.CancelledError:
                outcome = None
            if outcome is None:
                await self._after_cancel(active, inner)
                return
        finally:
            self.active.pop(run_id, None)
        failpoints.hit("before_ack")
        await self._ack(d)
        execution.log.debug("acknowledged", outcome=outcome.value)
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
            ex.log.warning(f"run {ex.run.id}: lease lost, abandoned to its new owner")
            await self._ack(active.delivery)
            return
        if inner.done() and not inner.cancelled() and inner.exception() is None:
            await self._ack(active.delivery)  # it got to a final state or a wait after all
            return
        if await self.store.release(ex.run.id, control.token, "worker shutting down"):
            await self.queue.publish(active.delivery.queue, ex.run.id, priority=ex.run.priority)
            ex.log.info(f"run {ex.run.id}: handed over")
        await self._ack(active.delivery)

    async def _ack(self, d: Delivery) -> None:
        """Acknowledge once the run's state is committed. Batched: entries acknowledged while a
        round trip is out go together in the next one; returns once ``d``'s round trip is done."""
        done = asyncio.get_running_loop().create_future()
        self._unacked.append((d, done))
        if self._acker is None:
            self._acker = asyncio.create_task(self._ack_batches(), context=self._context.copy())
        await asyncio.shield(done)

    async def _ack_batches(self) -> None:
        try:
            while self._unacked:
                batch, self._unacked = self._unacked, []
                try:
                    await self._ack_all([d for d, _ in batch])
                except Exception:  # never a stuck acknowledger: these are delivered again
                    self.log.exception(f"acknowledging {len(batch)} entries failed")
                finally:
                    for _, done in batch:  # done trying: an entry left is only delivered again
                        if not done.done():
                            done.set_result(None)
        finally:
            self._acker = None

    async def _ack_all(self, batch: list[Delivery]) -> None:
        """Through a Redis outage, retry (an entry left unacknowledged is only delivered again,
        and its claim then finds nothing to do)."""
        for attempt in range(20):
            try:
                await self.queue.ack_many(batch)
            except (ServiceUnavailable, RedisError, OSError) as exc:
                if not self._ack_failing:  # once per outage, not once per entry
                    self._ack_failing = True
                    self.log.warning(f"acknowledging entries failed, retrying: {exc}")
                await asyncio.sleep(min(0.1 * 2**attempt, 2.0))
                continue
            if self._ack_failing:
                self._ack_failing = False
                self.log.info("acknowledging entries works again")
            return
        ids = ", ".join(d.run_id or "?" for d in batch[:5]) + (", ..." if len(batch) > 5 else "")
        self.log.warning(f"runs {ids}: entries left unacknowledged; they will be delivered again")

    def _later(self, delay: float, queue: str, run_id: str, hops: int = 0, priority: str = "normal") -> None:
        async def publish() -> None:
            await asyncio.sleep(delay)
            with contextlib.suppress(Exception):  # the sweeper will do it otherwise
                await self.queue.publish(queue, run_id, hops=hops, priority=priority)

        task = asyncio.create_task(publish())
        self._timers.add(task)
        task.add_done_callback(self._timers.discard)

    def _ours(self, run: Run) -> bool:
        return (
            run.owner == self.name
            and run.state in (RunState.RUNNING, RunState.CANCELLING)
            and run.id not in self.active
        )

    async def _not_claimed(self, d: Delivery, run_id: str, run: Run | None) -> None:
        if run is None:
            await self._dead_letter(d, f"no run '{run_id}'")
            return
        if run.queue != d.queue:
            await self._dead_letter(d, f"run '{run_id}' belongs to queue '{run.queue}', not '{d.queue}'")
            return
        mine = self._programs.get(run.workflow)
        unserved = run.program is not None and mine != run.program
        if unserved and await self._hand_back(d, run):
            return
        if unserved and run.state in (RunState.QUEUED, RunState.RUNNING, RunState.WAITING):
            # Queued, its worker died (the lease expired), or its timer is due: a program this
            # worker does not serve, and no live worker does.
            msg = (
                f"run '{run_id}': the program changed since this run started (admitted with "
                f"{run.workflow} {run.program}, this worker serves {mine or 'no such workflow'}); "
                f"start a worker that serves it, or migrate: outlast resume {run_id} --accept-program-change"
            )
            if await self.store.refuse_program(run_id, mine, msg, self.s.program_grace):
                self.log.warning(msg)
                await self._ack(d)
                return
        # Leased by a live worker (a duplicate: that worker holds an entry of its own, reclaimed
        # if it dies), final, or waiting (the sweeper wakes what is due): nothing to do here.
        await self._ack(d)

    async def _hand_back(self, d: Delivery, run: Run) -> bool:
        """A rolling deploy: a run of a program this worker does not serve goes back to the queue
        for a worker that does, while a live worker serves it (or one did within
        ``program_grace`` seconds). Each hop waits twice as long (up to 2 s), so that an entry
        bounced between workers of the new program does not spin; a hop lost with this worker
        is re-published by the sweeper (Postgres says the run is due)."""
        if not await self.store.program_served(run.id, self.s.program_grace):
            return False
        hops = d.fields.get("hops", "0")
        hops_before = min(int(hops), 10) if hops.isdigit() else 0
        await self._ack(d)
        self._later(min(0.05 * 2**hops_before, 2.0), d.queue, run.id, hops_before + 1, run.priority)
        metrics.handed_back(d.queue)
        return True

    async def _dead_letter(self, d: Delivery, reason: str) -> None:
        self.log.error(f"dead-lettered stream entry {d.entry_id}: {reason}", entry=d.entry_id)
        await self.queue.dead_letter(d, reason)
        metrics.dead_lettered(d.queue)

    # -- beside the work ----------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        await self._every(self.s.lease_ttl / 3, self._heartbeat, until=self._done)

    async def _heartbeat(self) -> None:
        # The entries first: through a Postgres outage they must not look abandoned in Redis,
        # or another worker would take the runs over as soon as Postgres is back.
        with contextlib.suppress(ServiceUnavailable, RedisError, OSError):
            await self.queue.touch([a.delivery for a in self.active.values()] + self._early, self.name)
        controls = [a.execution.control for a in self.active.values()]
        held = {c.run_id: c.token for c in controls if not c.lost.is_set()}
        sent = time.monotonic()
        leases = await self.store.renew(held, self.s.lease_ttl)
        for rid, lease in leases.items():
            a = self.active.get(rid)
            if a is None:
                continue
            control = a.execution.control
            if lease.renewed:
                control.proven(sent)
            if lease.cancel_requested:
                control.cancel.set()
            # A newer token exists: another worker owns it (counted once: a fenced write may have).
            if lease.lost and a.task is not None and not control.lost.is_set():
                metrics.lease_lost()
                control.lost.set()
                a.task.cancel()
        await self.store.beat_worker(self._record())  # after the leases: they come first
        await self.store.beat_programs(self.queues, self._programs)  # kept after this worker stops

    def _record(self) -> dict[str, object]:
        """This worker's heartbeat record (``outlast workers``, ``outlast health --worker``)."""
        return {
            "name": self.name,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": self.queues,
            "programs": self._programs,
            "concurrency": self.s.concurrency,
            "lease_ttl": self.s.lease_ttl,
            "runs_held": len(self.active),
        }

    async def _reclaim(self) -> None:
        """Take over entries whose worker went silent. Orphans have a lane of their own: up to
        ``concurrency`` runs beyond the worker's own, so that a takeover never waits for the
        backlog (the runs a dead worker held are bounded by its own concurrency)."""
        for q in self.queues:
            room = self._room_left() + self.s.concurrency
            if room <= 0:
                return
            # Untouched for a whole lease: its worker's heartbeats (every third of a lease) have
            # stopped; a lease not yet expired is waited for at the claim. Every level, highest first.
            for level in LEVELS:
                idle = int(self.s.lease_ttl * 1000) + 250
                for d in await self.queue.reclaim(q, self.name, idle, room, priority=level):
                    metrics.reclaimed(q)
                    self._start(d, reclaimed=True)
                    room -= 1

    async def _sweep_loop(self) -> None:
        await self._every(self.s.sweep_interval, self._sweep)

    async def _sweep(self) -> None:
        await self.sweeper.sweep(self.log)

    async def _gauges(self) -> None:
        """Refresh the metrics read from Redis and Postgres (every few seconds, not per run)."""
        for q in self.queues:
            metrics.backlog(q, *await self.queue.backlog(q))
        metrics.run_gauges(*await self.store.run_gauges())
        metrics.writer_busy(self.store.writer.busy)

    async def _return_early(self) -> None:
        """Entries read past the room and never started go back to the queue at once (else they
        would wait to be reclaimed, once idle for a lease)."""
        early, self._early = self._early, []
        for d in early:
            if d.run_id is None:
                continue  # reclaimed and dead-lettered by another worker
            with contextlib.suppress(Exception):  # then reclaimed once idle
                await self.queue.publish(d.queue, d.run_id, priority=d.priority)
                await self._ack(d)

    async def _hand_over(self) -> None:
        """Let running runs finish within the grace period, then hand the rest over at once."""
        if not self._tasks:
            return
        self.log.info(f"waiting up to {self.s.grace}s for {len(self._tasks)} run(s)")
        _done, pending = await asyncio.wait(set(self._tasks), timeout=self.s.grace)
        for a in list(self.active.values()):
            if a.task is not None and a.task in pending:
                a.task.cancel()
        if pending:
            await asyncio.wait(pending, timeout=self.s.grace * 2 + 5)
