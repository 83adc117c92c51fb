"""The worker reads run ids from the stream, claims each run's lease in Postgres, executes it, and
acknowledges the entry only once the run's state is committed. Heartbeats, reclaiming and
sweeping run beside it; SIGTERM hands runs over at once instead of waiting for the TTL.

``Worker`` composes its parts, each given only what it uses (``WorkerState``: its name, the runs it
holds, its stop; and the callables it needs of the others): ``Intake`` (reading and reclaiming
entries), ``Claims`` (claiming, hand-backs, what a stop leaves), ``Acks`` (acknowledgements) and
``Heartbeat`` (leases, entries touched, the heartbeat record). None of them imports this module."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import os
import signal
import socket
from collections.abc import Awaitable, Callable

import structlog

from outlast import _metrics as metrics
from outlast._callbacks import require_setup
from outlast._secrets import require_key
from outlast.app import App
from outlast.errors import ServiceUnavailable
from outlast.queue import LiveChunks, Queue, RateWindows
from outlast.settings import Settings
from outlast.store import Store
from outlast.worker import eventloop
from outlast.worker.acks import Acks
from outlast.worker.claims import Claims
from outlast.worker.heartbeat import Heartbeat
from outlast.worker.intake import Intake
from outlast.worker.linger import Linger
from outlast.worker.live import LiveOutput
from outlast.worker.state import Active, WorkerState
from outlast.worker.sweeper import Sweeper
from outlast.worker.threads import TOOL_THREADS

log = structlog.get_logger("outlast.worker")

# Seconds past the grace period that a stopping worker gives its hand-over (the runs released, the
# entries acknowledged) before it exits anyway; its caller closes the store and queue after,
# within CLOSE_WITHIN seconds (what cannot close by then is left to the OS at exit).
STOP_SLACK = 3.0
CLOSE_WITHIN = 1.0

__all__ = ["Active", "Worker"]


class Worker:
    """A ``Worker`` is one asyncio loop serving up to ``concurrency`` runs from the given queues."""

    def __init__(self, app: App, store: Store, queue: Queue, settings: Settings, queues: list[str]) -> None:
        self.app = app
        self.store = store
        self.queue = queue
        self.s = settings
        queues = queues or app.queues(settings.queue)  # none named: the default and the routed ones
        self.queues = queues
        self.programs = app.programs()
        self.state = WorkerState(queues=queues, programs=self.programs)
        # The state's own objects (never replaced), under the names the worker has always had.
        self.active, self.tasks, self.stopping = self.state.active, self.state.tasks, self.state.stopping
        self._timers: set[asyncio.Task[None]] = set()
        self._done = asyncio.Event()
        require_key(app, settings.secret_key)  # refused at start, not at the first secret call
        app.check()  # a reconciler of no tool, refused at start
        workflows = {name: wf.fn for name, wf in app.workflows.items()}
        self._relative = require_setup(workflows, settings.secret_key, settings.callback_url)
        self.sweeper = Sweeper(store, queue, settings, queues, app.routed_schedules(), self.programs)
        self.windows = RateWindows(queue)  # shared rate limits of tools (outlast.worker.flow)
        self.live = LiveOutput(LiveChunks(queue))  # the chunks its runs stream (run.stream)
        self.linger = Linger(seconds=settings.receive_linger, connection=store)  # receives held a moment
        TOOL_THREADS.keep(settings.concurrency)  # sync tools' threads, kept once started
        # Built in the order they need one another: each is given the others' methods it uses.
        self.acks = Acks(queue=queue)
        self.heartbeat = Heartbeat(
            state=self.state,
            settings=settings,
            leases=store.leases,
            fleet=store.fleet,
            queue=queue,
            declared=app.declared_channels(),
        )
        self.claims = Claims(
            state=self.state,
            settings=settings,
            app=app,
            store=store,
            queue=queue,
            windows=self.windows,
            live=self.live,
            linger=self.linger,
            ack=self.acks.ack,
            later=self.later,
            settled=self.heartbeat.settled,
            steady=self.heartbeat.steady,
        )
        self.intake = Intake(
            state=self.state,
            settings=settings,
            queue=queue,
            serve=self.claims.serve,
            settled=self.heartbeat.settled,
            ack=self.acks.ack,
        )
        self.log = log

    @property
    def name(self) -> str:
        """The worker's consumer name: set when it starts (``run``)."""
        return self.state.name

    @name.setter
    def name(self, name: str) -> None:
        self.state.name = name

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
        self.live.attach(asyncio.get_running_loop())  # a sync tool's chunks are queued there
        self.acks.context = contextvars.copy_context()  # the worker's own, without any run's
        self.log.info(
            "worker.started",
            queues=list(self.queues),
            concurrency=self.s.concurrency,
            lease_ttl=self.s.lease_ttl,
            event_loop=eventloop.loop_name(),
        )
        if self._relative:
            self.log.warning("worker.callbacks_relative", workflows=self._relative)
        with contextlib.suppress(ServiceUnavailable):  # a warning only: not worth failing a start
            unknown = await self.store.fleet.unknown_workflows(self.queues, self.programs)
            if unknown:
                self.log.warning("worker.unknown_workflows", workflows=unknown, queues=list(self.queues))
        work = [asyncio.create_task(c) for c in (self.intake.read_loop(), self._sweep_loop())]
        if metrics.enabled():
            work.append(asyncio.create_task(self.every(metrics.REFRESH, self._gauges)))
        beat = asyncio.create_task(self._heartbeat_loop())  # goes on while runs are handed over
        await self.stopping.wait()
        self.linger.stop()  # a lingering receive commits its wait now: the run is let go at once
        try:
            # Whatever Postgres and Redis do (gone, paused, refusing), the hand-over ends within
            # the grace period and a bound: what it could not write is left to the leases, as
            # after a crash (the journal is the truth; the entries stay unacknowledged).
            async with asyncio.timeout(self.s.grace + STOP_SLACK):
                await self._stop(work)
        except TimeoutError:
            self.log.warning("worker.stop_forced", grace=self.s.grace, runs=len(self.tasks))
            for t in (*work, *self.tasks):
                t.cancel()
        self._done.set()
        with contextlib.suppress(Exception):  # its watchers' rows go with its connection
            await self.linger.close()
        beat.cancel()
        await asyncio.gather(beat, return_exceptions=True)
        for t in self._timers:  # the sweeper wakes these runs instead
            t.cancel()
        self.log.info("worker.stopped")

    async def _stop(self, work: list[asyncio.Task[None]]) -> None:
        """The hand-over: reading stops, the runs finish or are released, entries acknowledged."""
        for t in work:
            t.cancel()
        await asyncio.gather(*work, return_exceptions=True)
        await self.intake.return_early()
        await self._hand_over()
        if self.acks.task is not None:
            await self.acks.task
        with contextlib.suppress(Exception):  # a record left behind is shown as gone, then swept
            async with asyncio.timeout(1.0):
                await self.store.fleet.forget_worker(self.name)
        await self.live.close()  # the chunks still queued are sent

    def stop(self) -> None:
        self.stopping.set()

    def install_signals(self) -> None:
        """SIGTERM/SIGINT: stop taking work and hand over; a second signal exits at once."""
        loop = asyncio.get_running_loop()

        def on_signal(sig: int) -> None:
            if self.stopping.is_set():
                os._exit(1)
            self.log.info("worker.stopping", signal=signal.Signals(sig).name, grace=self.s.grace)
            self.stop()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal, sig)

    async def every(
        self, seconds: float, step: Callable[[], Awaitable[None]], until: asyncio.Event | None = None
    ) -> None:
        """Repeat a background step, through outages of Postgres or Redis, until the worker stops
        (checked too, not only cancelled: a Redis client can swallow a cancellation)."""
        while not (until or self.stopping).is_set():
            try:
                await step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                self.log.warning("worker.step_failing", step=step.__name__, error=str(exc))
            await asyncio.sleep(seconds)

    def later(self, delay: float, queue: str, run_id: str, hops: int = 0, priority: str = "normal") -> None:
        """Publish the run's id after ``delay`` seconds (a timer, a child, a hand-back): the
        sweeper publishes it should this worker stop first."""

        async def publish() -> None:
            await asyncio.sleep(delay)
            with contextlib.suppress(Exception):  # the sweeper will do it otherwise
                await self.queue.publish(queue, run_id, hops=hops, priority=priority)

        task = asyncio.create_task(publish())
        self._timers.add(task)
        task.add_done_callback(self._timers.discard)

    # -- beside the work ----------------------------------------------------------------

    async def _heartbeat_loop(self) -> None:
        await self.every(self.s.lease_ttl / 3, self.heartbeat.heartbeat, until=self._done)

    async def _sweep_loop(self) -> None:
        await self.every(self.s.sweep_interval, self._sweep)

    async def _sweep(self) -> None:
        await self.sweeper.sweep(self.log)

    async def _gauges(self) -> None:
        """Refresh the metrics read from Redis and Postgres (every few seconds, not per run)."""
        for q in self.queues:
            metrics.backlog(q, *await self.queue.backlog(q))
        metrics.run_gauges(*await self.store.runs.run_gauges())
        metrics.parked(await self.store.runs.parked())
        metrics.writer_busy(self.store.writer.busy)
        metrics.tool_threads(TOOL_THREADS.count, TOOL_THREADS.busy)

    async def _hand_over(self) -> None:
        """Let running runs finish within the grace period, then hand the rest over at once."""
        if not self.tasks:
            return
        self.log.info("worker.draining", grace=self.s.grace, runs=len(self.tasks))
        _done, pending = await asyncio.wait(set(self.tasks), timeout=self.s.grace)
        if not pending:
            return
        # Past the grace period a write that fails is not retried: the run is left to its lease.
        self.store.hurry()
        for a in list(self.active.values()):
            if a.task is not None and a.task in pending:
                a.task.cancel()
        await asyncio.wait(pending)  # bounded by the stop's own limit (STOP_SLACK)
