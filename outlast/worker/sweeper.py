"""Every worker has a sweeper, run every ``sweep_interval``: Postgres says which runs need a worker
and no stream entry will deliver; the sweeper re-publishes them. Redis loses nothing Postgres
knows: when Redis lost its data (flushed, or restarted without persistence), everything due is
re-published at once, not after ``republish_after``. Retention's pruning runs in one worker per
schema at a time (an advisory lock taken by the ``prune`` statement)."""

from __future__ import annotations

import time
from dataclasses import asdict
from typing import Any

from outlast import _metrics as metrics
from outlast._schedules import Schedule
from outlast.queue import Queue
from outlast.queue.undelivered import Waiting
from outlast.settings import Settings, duration
from outlast.store import Store
from outlast.worker.mover import Mover
from outlast.worker.rollup import Rollup
from outlast.worker.scheduler import Scheduler

GONE_FOR = 3600.0  # seconds a silent worker's heartbeat record is kept, shown as gone
PRUNE_EVERY = 60.0  # seconds between a worker's retention passes
PRUNE_BATCHES = 20  # of 500 runs: at most 10,000 runs a pass, the rest at the next


class Sweeper:
    """The ``Sweeper`` handles deadlines that passed while nothing ran, the schedules' due ticks,
    parked runs of other programs (``mover.py``), re-publication, names and heartbeat records of
    workers gone, watchers gone, retention (``OUTLAST_RETENTION``), and the dashboard charts'
    rollup (``rollup.py``)."""

    def __init__(
        self,
        store: Store,
        queue: Queue,
        settings: Settings,
        queues: list[str],
        schedules: dict[str, Schedule] | None = None,
        programs: dict[str, str] | None = None,
    ) -> None:
        self.store = store
        self.queue = queue
        self.s = settings
        self.queues = queues
        self._next_forget = 0.0
        self._next_prune = 0.0
        self._next_payloads = 0.0
        # Redis said once that it lost its data (or a failover): kept until the re-publication
        # went through, since lost_data() will not say it again.
        self._lost = False
        self._seen: set[str] = set()  # queues other workers serve (``streams``)
        self._orphans: set[str] = set()  # runs of silent workers said to wait for their leases
        self._next_look = 0.0
        self.scheduler = Scheduler(
            store.schedules, store.runs, queue, schedules or {}, settings.queue, programs
        )
        self.rollup = Rollup(store.rollups, queue, settings.rollup_every)
        moving = (programs or {}) if settings.move_parked == "on" else {}  # off: only by hand
        self.mover = Mover(store.sweeps, store.leases, queue, moving)

    async def sweep(self, log: Any) -> None:
        gone = await self.queue.lost_data()
        if gone:
            self._lost = True  # first: should Postgres fail now, the next sweep still re-publishes
            if await self.store.fleet.redis_used(gone):  # a marker gone on a fresh Redis: never used
                log.warning("redis.data_lost")
        if self._lost:
            await self.republish(log, after=0.0)
            self._lost = False
        # A deadline passed while nothing ran: the run is published, and the worker that claims it
        # ends it as it ends a running one (its partial handler runs). Ended here, timed_out, only
        # when no worker did within republish_after (none serves its workflow, its entry lost).
        for run_id, q, priority in await self.store.sweeps.expire_deadlines(self.s.republish_after):
            if q is None:
                log.info("run.timed_out", run_id=run_id)
            else:
                await self.queue.publish(q, run_id, priority=priority)
        await self.store.children.wake_child_waiters()  # parents whose child ended: due now, published below
        await self.store.firsts.wake_first_waiters()  # the same, for a run.first with a child among its waits
        await self.republish(log, self.s.republish_after)
        await self.orphans(log)
        await self.turns(log)
        await self.scheduler.tick(log)  # after: a failing schedule never holds up re-publication
        await self.mover.step(log)  # parked runs of other programs, taken forward where replay agrees
        if self.s.retention and time.monotonic() >= self._next_prune:
            self._next_prune = time.monotonic() + PRUNE_EVERY
            await self.prune(log)
        if time.monotonic() >= self._next_payloads:  # orphans, and the payloads of runs pruned
            self._next_payloads = time.monotonic() + PRUNE_EVERY
            swept = await self.store.payloads.sweep_payloads(self.s.payload_grace)
            if swept:
                log.info("sweeper.payloads_swept", count=swept)
        if time.monotonic() >= self._next_forget:  # names of workers gone for good
            self._next_forget = time.monotonic() + 60
            for q in self.queues:
                await self.queue.forget_consumers(q, int(max(self.s.lease_ttl * 10, 600) * 1000))
            await self.store.fleet.forget_gone_workers(GONE_FOR)
            await self.store.fleet.forget_served_programs(max(GONE_FOR, self.s.program_grace))
            await self.store.fleet.forget_watchers()  # of clients' listening connections gone
        if self.rollup.due():  # the charts, once a minute; last, as it holds up nothing
            await self.rollup.step(log)

    async def orphans(self, log: Any) -> None:
        """Say, once per run, that a run of a worker gone silent waits for its lease, how long."""
        found = await self.store.sweeps.orphans()
        for run_id, owner, seconds in found:
            if run_id not in self._orphans:
                log.info("run.waiting_for_lease", run_id=run_id, owner=owner, seconds=round(seconds, 1))
        self._orphans = {run_id for run_id, _, _ in found}

    async def prune(self, log: Any) -> None:
        """Retention: delete what finished longer than ``retention`` ago, a bounded amount per
        pass, one worker of the schema at a time (the others skip their pass)."""
        before = await self.store.sweeps.cutoff(duration(self.s.retention))
        pruned = await self.store.sweeps.prune(before, max_batches=PRUNE_BATCHES, exclusive=True)
        if pruned.runs:
            log.info(
                "sweeper.pruned",
                before=f"{before:%Y-%m-%d %H:%M:%S}",
                **asdict(pruned),
            )

    async def turns(self, log: Any, limit: int = 500) -> None:
        """Publish, page by page, the held runs whose tenant's window has room."""
        while True:
            turns = await self.store.sweeps.turns(limit)
            for run_id, q, priority in turns:
                await self.queue.publish(q, run_id, priority=priority)
            if turns:
                log.debug("sweeper.turns_published", count=len(turns))
            if len(turns) < limit:
                return

    async def republish(self, log: Any, after: float, limit: int = 500) -> None:
        """Re-publish, page by page, every run due and unseen for ``after`` seconds, but a queued
        run whose entry still waits in its stream (a long backlog drains slowly): asked of Redis
        before the statements that compare its clock with Postgres's (``Queue.waiting``), and only
        when a queued run went unseen that long (none: no queued run is due by age in this pass).
        Not when Redis lost its data (``after`` 0): what it says then is not to be trusted."""
        cutoff, queued = await self.store.sweeps.unseen(
            after
        )  # a run this pass stamps is not due again in it
        waiting = await self.queue.waiting(await self.streams()) if after and queued else Waiting()
        queued = queued or not after
        while True:
            due = await self.store.sweeps.due(after, limit, cutoff, waiting.spans, waiting.runs, queued)
            for run_id, q, priority in due:
                await self.queue.publish(q, run_id, priority=priority)
                metrics.republished(q)
            for q in {q for _, q, _ in due}:
                # A queue no worker serves has no group, and without one Redis cannot say what
                # its stream still holds: made here (from the stream's start, as a worker makes
                # it), the queue's streams are read from the next pass and the run is not
                # re-published again while its entry waits.
                await self.queue.ensure_group(q)
                self._seen.add(q)
            if due:
                log.info("sweeper.republished", count=len(due), runs=[r for r, _, _ in due[:20]])
            if len(due) < limit:
                return

    async def streams(self) -> list[str]:
        """The queues whose streams ``republish`` reads: this worker's, every other worker's (from
        their heartbeat records, looked at once a minute) and any whose run it re-published (with
        its group made, should no worker serve it)."""
        if time.monotonic() >= self._next_look:
            self._next_look = time.monotonic() + 60
            self._seen.update(q for w in await self.store.fleet.workers() for q in w["queues"] or ())
        return sorted({*self.queues, *self._seen})
