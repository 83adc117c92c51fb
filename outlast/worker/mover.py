"""A worker takes parked runs forward onto the program it serves. A run parked at
``program_changed`` (no worker of its program lived) or ``workflow_error`` (its code raised: a bug)
of a workflow this worker serves, on another program, is resumed on this worker's program, as
``outlast resume --accept-program-change`` would: replay serves every journaled result and goes on
only where the new code asks the journal's crossings in order. A run whose replay diverges waits
again (``resume_impossible``, its first divergence shown) and is not moved again by a worker: an
operator's ``outlast resume --workflow W`` tries it once more."""

from __future__ import annotations

import time
from typing import Any

from outlast.queue import Queue
from outlast.store.leases import Leases
from outlast.store.sweeps import Sweeps

MOVE_EVERY = 30.0  # seconds between a worker's looks for parked runs to take forward


class Mover:
    """Resumes, on the programs a worker serves, the runs parked on other programs."""

    def __init__(self, sweeps: Sweeps, leases: Leases, queue: Queue, programs: dict[str, str]) -> None:
        self.sweeps, self.leases = sweeps, leases
        self.queue = queue
        self.programs = programs  # workflow -> the program this worker serves
        self._next = 0.0  # the first sweep looks at once: a worker started with a fix moves its runs

    async def step(self, log: Any) -> None:
        if not self.programs or time.monotonic() < self._next:
            return
        self._next = time.monotonic() + MOVE_EVERY
        for r in await self.sweeps.movable(self.programs):
            to = self.programs[r["workflow"]]
            detail = {"accept_program_change": True, "was": r["reason"], "by": "worker", "program": to}
            if await self.leases.requeue(r["id"], r["fencing_token"], True, detail):
                await self.queue.publish(r["queue"], r["id"], priority=r["priority"])
                log.info("run.moved", run_id=r["id"], was=r["reason"], program=r["program"], to=to)
