"""Heartbeats (every third of a lease): the held entries touched in Redis, every held lease
renewed in one statement, a run whose token moved on marked *lost* (its task cancelled), a
cancellation asked for passed to its run; then the worker's heartbeat record and the programs it
serves."""

from __future__ import annotations

import contextlib
import os
import socket
import time
from typing import TYPE_CHECKING

from redis.exceptions import RedisError

from outlast import metrics
from outlast.errors import ServiceUnavailable
from outlast.worker.threads import TOOL_THREADS

if TYPE_CHECKING:
    from outlast.worker.loop import Worker


class Heartbeat:
    """The worker's proof of life: its leases, its entries and its record."""

    def __init__(self, worker: Worker) -> None:
        self.w = worker

    async def heartbeat(self) -> None:
        w = self.w
        # The entries first: through a Postgres outage they must not look abandoned in Redis,
        # or another worker would take the runs over as soon as Postgres is back.
        with contextlib.suppress(ServiceUnavailable, RedisError, OSError):
            await w.queue.touch([a.delivery for a in w.active.values()] + w.intake.early, w.name)
        controls = [a.execution.control for a in w.active.values()]
        held = {c.run_id: c.token for c in controls if not c.lost.is_set()}
        sent = time.monotonic()
        leases = await w.store.renew(held, w.s.lease_ttl)
        for rid, lease in leases.items():
            a = w.active.get(rid)
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
        await w.store.beat_worker(self.record())  # after the leases: they come first
        await w.store.beat_programs(w.queues, w.programs)  # kept after this worker stops

    def record(self) -> dict[str, object]:
        """This worker's heartbeat record (``outlast workers``, ``outlast health --worker``)."""
        w = self.w
        return {
            "name": w.name,
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "queues": w.queues,
            "programs": w.programs,
            "concurrency": w.s.concurrency,
            "lease_ttl": w.s.lease_ttl,
            "runs_held": len(w.active),
            "tool_threads": TOOL_THREADS.count,  # the process's, hung ones included
            "tool_threads_busy": TOOL_THREADS.busy,
        }
