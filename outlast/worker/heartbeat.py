"""A heartbeat comes every third of a lease. It does this: every held lease renewed in one
statement, a run whose token moved on marked *lost* (its task cancelled), a cancellation asked for
and an operator's pause passed to its run; then the entries of the runs whose lease it proved
touched in Redis, the worker's heartbeat record and the programs it serves (and, at the first
beat, the channels its workflows declare and the limits of a send by SQL). It also says whether
Postgres has answered this worker steadily for a whole lease (``settled``): a worker that has not
(it just started, or lost Postgres) takes over no run until then. It times what it awaits of
Postgres anyway: a round trip over ``Settings.slow_after`` is logged once (``store.slow``), and its
end (``store.fast_again``)."""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import socket
import time
from typing import Any

import structlog
from redis.exceptions import RedisError

from outlast import _metrics as metrics
from outlast.errors import ServiceUnavailable
from outlast.queue import Queue
from outlast.settings import Settings
from outlast.store.fleet import Fleet
from outlast.store.leases import Leases
from outlast.store.records import Lease
from outlast.worker.state import WorkerState
from outlast.worker.threads import TOOL_THREADS

log = structlog.get_logger("outlast.worker")


class Heartbeat:
    """The ``Heartbeat`` is the worker's proof of life: its leases, its entries and its record."""

    def __init__(
        self,
        *,
        state: WorkerState,
        settings: Settings,
        leases: Leases,
        fleet: Fleet,
        queue: Queue,
        declared: list[dict[str, Any]],
    ) -> None:
        self.state = state
        self.declared: list[dict[str, Any]] | None = declared  # published at the first beat answered
        self.s = settings
        self.leases, self.fleet = leases, fleet
        self.queue = queue
        self.answered: float | None = None  # monotonic: when Postgres last answered a heartbeat
        # Since when Postgres has answered every beat, with no gap of a lease: from the first
        # answer on. Before it, this worker knows nothing of an outage the runs' owners had.
        self.since = math.inf
        self.outage = False  # a beat failed, or was answered a lease late, since this worker started
        self._renewal: asyncio.Task[dict[str, Lease]] | None = None
        self.slow = False  # the last beat's round trip was over Settings.slow_after

    async def heartbeat(self) -> None:
        state = self.state
        controls = [a.execution.control for a in state.active.values()]
        held = {c.run_id: c.token for c in controls if not c.lost.is_set()}
        sent = time.monotonic()
        try:
            leases = await self._renew(held)
        except ServiceUnavailable:
            self._lost()
            raise
        renewed = time.monotonic() - sent if held else math.inf
        for rid, lease in leases.items():
            a = state.active.get(rid)
            if a is None:
                continue
            control = a.execution.control
            if lease.renewed:
                control.proven(sent)
            if lease.cancel_requested:
                control.cancelled()
            if lease.paused:  # an operator's pause: the run stops at its next crossing
                control.pause.set()
            # A newer token exists: another worker owns it (counted once: a fenced write may have).
            if lease.lost and a.task is not None and not control.lost.is_set():
                metrics.lease_lost()
                control.lost.set()
                a.task.cancel()
        # Only the entries of runs whose lease this beat proved (or a claim since) are kept from
        # idling: a worker cut off from Postgres lets them go with their leases, and another
        # worker reclaims them once idle for a lease, as their leases expire.
        proven = [
            a.delivery for a in state.active.values() if a.execution.control.until >= sent + self.s.lease_ttl
        ]
        with contextlib.suppress(ServiceUnavailable, RedisError, OSError):
            await self.queue.touch(proven + state.read_ahead, state.name)
        try:
            beat = time.monotonic()
            await self.fleet.beat_worker(self.record())  # after the leases: they come first
        except ServiceUnavailable:
            self._lost()
            raise
        self._answered()
        # The faster of two one-statement round trips: a wait for a pooled connection or a row
        # lock inflates one of them, seldom both.
        self._judge(min(renewed, time.monotonic() - beat))
        await self.fleet.beat_programs(state.queues, state.programs)  # kept after this worker stops
        if self.declared is not None:  # its workflows' channels, for senders without the app (0028)
            s = self.s  # and its limits, for outlast_send (0029)
            limits = {
                "max_payload": s.max_payload,
                "max_inbox": s.max_inbox,
                "max_inbox_run": s.max_inbox_run,
            }
            await self.fleet.declare_channels(self.declared, limits)
            self.declared = None

    async def _renew(self, held: dict[str, int]) -> dict[str, Lease]:
        """The leases renewed, within two thirds of a lease (answered later, a renewal proves
        less than the third a dispatch needs). A partition fails nothing and hangs everything:
        a renewal not answered in time fails the beat (no entry is touched), and no other is
        sent while it hangs (it keeps the renewals' connection; its late answer is not used)."""
        if self._renewal is not None and not self._renewal.done():
            raise ServiceUnavailable("Postgres has not answered the last lease renewal yet")
        wait = self.s.lease_ttl * 2 / 3
        self._renewal = task = asyncio.create_task(self.leases.renew(held, self.s.lease_ttl))
        task.add_done_callback(lambda t: t.cancelled() or t.exception())  # a late failure: seen
        if not (await asyncio.wait({task}, timeout=wait))[0]:
            raise ServiceUnavailable(f"Postgres did not answer a lease renewal within {wait:g}s")
        return task.result()

    def _judge(self, round_trip: float) -> None:
        """Log the start of an episode of slow round trips, and its end, once each."""
        ttl, over = self.s.lease_ttl, self.s.slow_after
        if round_trip > over and not self.slow:
            log.warning(
                "store.slow",
                round_trip_ms=round(round_trip * 1000),
                threshold_ms=round(over * 1000),
                risks=(
                    f"every commit and dispatch waits on it; leases ({ttl:g}s) are renewed every "
                    f"{ttl / 3:.3g}s, a renewal not answered within {ttl * 2 / 3:.3g}s fails, and a "
                    "run whose lease is not proven waits before each dispatch, then is left"
                ),
            )
        elif round_trip <= over and self.slow:
            log.info("store.fast_again", round_trip_ms=round(round_trip * 1000))
        self.slow = round_trip > over

    def _lost(self) -> None:
        self.since = math.inf  # not settled until Postgres has answered again for a lease
        self.outage = True

    def _answered(self) -> None:
        now = time.monotonic()
        if self.answered is not None and now - self.answered > self.s.lease_ttl:
            self._lost()  # a silence of a lease: an outage, or this worker was paused
        if self.since == math.inf:
            self.since = now  # the first answer, or the first after an outage
        self.answered = now

    def settled(self) -> bool:
        """Postgres has answered this worker's heartbeats for a whole lease with no gap: the
        owners of runs it could take over have had a lease to renew. Not at first: a worker
        whose first answer comes just after an outage (a slow start on a loaded machine) would
        otherwise reclaim the entries of every run whose owner had not renewed yet."""
        return self._answered_for() >= self.s.lease_ttl

    def steady(self) -> float | None:
        """The seconds Postgres has answered this worker's heartbeats since the outage it saw
        (0 while a beat is overdue); None when it saw none (no beat failed nor came a lease
        late): there is nothing to allow for. A claim passes it: the owner of an expired lease
        that has not beaten since keeps its run for three of its TTLs (``claim`` in leases.sql)."""
        answered_for = self._answered_for()
        return answered_for if self.outage or answered_for == 0.0 else None

    def _answered_for(self) -> float:
        """The seconds Postgres has answered every beat, with no gap of a lease (0 while a beat
        is overdue, or before the first answer)."""
        now = time.monotonic()
        if self.answered is None or now - self.answered > self.s.lease_ttl * 2 / 3:  # a beat overdue
            return 0.0
        return max(now - self.since, 0.0)

    def record(self) -> dict[str, object]:
        """This worker's heartbeat record (``outlast workers``, ``outlast health --worker``)."""
        state = self.state
        return {
            "name": state.name,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": state.queues,
            "programs": state.programs,
            "concurrency": self.s.concurrency,
            "lease_ttl": self.s.lease_ttl,
            "runs_held": len(state.active),
            "tool_threads": TOOL_THREADS.count,  # the process's, hung ones included
            "tool_threads_busy": TOOL_THREADS.busy,
        }
