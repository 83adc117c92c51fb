"""Every worker's sweep enqueues the schedules' ticks. Each schedule this worker's app declares is
recorded at its first sweep, then its due ticks are enqueued as runs whose ids are derived from
the schedule and the tick (so however many workers tick at once, and however often one restarts,
a tick is one run: ``NAME@tick``, ``schedules.run_id``), and the schedule's last tick is moved past
them (the ``schedules`` table)."""

from __future__ import annotations

import asyncio
from typing import Any

from cronsim import CronSimError

from outlast._journal import canonical, digest
from outlast._schedules import Schedule, due_ticks, run_id
from outlast.queue import Queue
from outlast.store.runs import Runs
from outlast.store.schedules import Schedules


class Scheduler:
    """Enqueues the due ticks of the schedules an app declares."""

    def __init__(
        self,
        table: Schedules,
        runs: Runs,
        queue: Queue,
        schedules: dict[str, Schedule],
        default_queue: str,
        programs: dict[str, str] | None = None,
    ) -> None:
        self.table, self.runs = table, runs  # the schedules' rows, and the runs their ticks insert
        self.queue = queue
        self.schedules = schedules
        self.default_queue = default_queue
        self.programs = programs or {}  # the program identity of each workflow this app serves
        self._declared = False

    async def tick(self, log: Any) -> None:
        if not self.schedules:
            return
        if not self._declared:
            for sched in self.schedules.values():
                await self.table.declare_schedule(sched, sched.queue or self.default_queue)
            self._declared = True
        for row in await self.table.schedules(list(self.schedules)):
            if row["paused"]:
                continue
            try:
                ticks, last = due_ticks(
                    row["cron"], row["tz"], row["catch_up"], row["last_tick"], row["db_now"]
                )
            except (CronSimError, ValueError, KeyError) as exc:  # e.g. a zone this host lacks
                log.warning("schedule.broken", schedule=row["name"], error=str(exc))
                continue
            if last == row["last_tick"]:
                continue
            ids = [run_id(row["name"], tick) for tick in ticks]
            created = await asyncio.gather(*(self._enqueue(row, rid) for rid in ids))
            fresh = [rid for rid, new in zip(ids, created, strict=True) if new]
            # Published once recorded; an entry lost here is published by a sweeper later.
            await self.queue.publish_many([(row["queue"], rid, "normal") for rid in fresh])
            await self.table.advance_schedule(row["name"], row["last_tick"], last)
            if fresh or not ticks:
                skipped = None if ticks else f"{last:%Y-%m-%d %H:%M:%S %Z}"  # ticks up to it missed
                log.info(
                    "schedule.enqueued",
                    schedule=row["name"],
                    count=len(fresh),
                    runs=fresh[:20],
                    skipped_to=skipped,
                )

    async def _enqueue(self, row: dict[str, Any], rid: str) -> bool:
        """Record a tick's run (once: its id is the tick's); True if this call made it."""
        _, created = await self.runs.insert_run(
            id=rid,
            workflow=row["workflow"],
            queue=row["queue"],
            input=row["input"],
            input_hash=digest(canonical(row["input"])),
            # Admitted with this app's program: only a worker that serves it claims the tick.
            program=self.programs.get(row["workflow"]),
            deadline_in=None,
        )
        return created
