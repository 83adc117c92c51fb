"""The sweeper's family covers what is due again, tenants' turns, deadlines, and pruning."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from outlast.store.base import Family
from outlast.store.records import Pruned


class Sweeps(Family):
    """``Sweeps`` holds the sweeper's reads and writes: due runs, turns, deadlines; retention's prune."""

    async def due(
        self,
        after: float,
        limit: int = 200,
        cutoff: datetime | None = None,
        spans: Sequence[tuple[str, str, float, float]] = (),
        waiting: Sequence[str] = (),
        queued: bool = True,
    ) -> list[tuple[str, str, str]]:
        """Runs to re-publish (stamped as published now), each (id, queue, priority); with
        ``cutoff``, only runs last published before it, so that successive pages of one pass never
        repeat a run. Not a queued run whose entry still waits in its stream, as Redis said just
        before (``Queue.waiting``): one of ``waiting``, or one stamped within its stream's span,
        each (queue, priority, since, last). Not ``queued``: no queued run is due by age
        (``unseen`` said there was none, and Redis was not asked)."""
        rows = await self._rows(
            "due",
            after=after,
            limit=limit,
            cutoff=cutoff,
            queues=[u[0] for u in spans],
            priorities=[u[1] for u in spans],
            since=[u[2] for u in spans],
            last=[u[3] for u in spans],
            waiting=list(waiting),
            queued=queued,
        )
        return [(r["id"], r["queue"], r["priority"]) for r in rows]

    async def turns(self, limit: int = 500) -> list[tuple[str, str, str]]:
        """Held runs whose tenant's window has room, stamped as published now: each (id, queue,
        priority), to publish. With a window of 0, every held run."""
        rows = await self._rows("turns", window=self.tenant_window, limit=limit)
        return [(r["id"], r["queue"], r["priority"]) for r in rows]

    async def expire_deadlines(self, grace: float, limit: int = 200) -> list[tuple[str, str | None, str]]:
        """Runs whose deadline passed while nothing ran, each (id, queue, priority): to publish at
        once (stamped as published now), for a worker to end through its executor; or, with queue
        None, ended here ``timed_out`` (not ended ``grace`` seconds past the deadline)."""
        rows = await self._rows("expire_deadlines", grace=grace, limit=limit)
        return [(r["run_id"], r["queue"], r["priority"]) for r in rows]

    async def unseen(self, after: float) -> tuple[datetime, bool]:
        """The clock a sweep stamps by (``db_now``), and whether a queued run went unseen for
        ``after`` seconds by it: only then may ``due`` need to know which entries still wait."""
        row = (await self._rows("unseen", after=after))[0]
        return row["now"], row["queued"]

    async def orphans(self, limit: int = 100) -> list[tuple[str, str, float]]:
        """Runs leased to a worker that went silent, each (id, owner, seconds its lease has left)."""
        rows = await self._rows("orphans", limit=limit)
        return [(r["id"], r["owner"], r["seconds"]) for r in rows]

    async def movable(self, programs: dict[str, str], limit: int = 100) -> list[dict[str, Any]]:
        """Runs parked by a program change or a bug, of a workflow in ``programs`` (workflow ->
        the program served), on another program: id, fencing_token, workflow, program, reason,
        queue, priority."""
        names = list(programs)
        return await self._rows(
            "movable", workflows=names, programs=[programs[n] for n in names], limit=limit
        )

    async def parked_of(self, workflow: str, limit: int = 1000) -> list[dict[str, Any]]:
        """The runs of ``workflow`` parked by a program change, a bug or a diverging replay: id,
        fencing_token, reason, queue, priority."""
        return await self._rows("parked_of", workflow=workflow, limit=limit)

    async def db_now(self) -> datetime:
        """The clock of claims, leases and due times: ``outlast_now()`` (0018_clock)."""
        now: datetime = (await self._rows("db_now"))[0]["now"]
        return now

    async def cutoff(self, age: float) -> datetime:
        """The database's own clock ``age`` seconds ago: runs finished before it are old enough
        (``finished_at`` is an audit stamp, on that clock, not on the tests' movable one)."""
        wall: datetime = (await self._rows("db_now"))[0]["wall"]
        return wall - timedelta(seconds=age)

    async def prune(
        self,
        before: datetime,
        state: str | None = None,
        *,
        batch: int = 500,
        max_batches: int | None = None,
        exclusive: bool = False,
    ) -> Pruned:
        """Delete the runs finished before ``before`` (of ``state``, if given) with their journal,
        events, approvals, reservations and the budgets no other run shares, ``batch`` runs per
        transaction (on a pooled connection, never the writer's), until none is left or after
        ``max_batches``. ``exclusive``: skip if another exclusive pruner of the schema is at it."""
        total, batches = Pruned(), 0
        while True:
            rows = await self._rows("prune", before=before, state=state, limit=batch, exclusive=exclusive)
            total += Pruned(**rows[0])
            batches += 1
            if not rows[0]["runs"] or batches == max_batches:
                return total

    async def prune_count(self, before: datetime, state: str | None = None) -> Pruned:
        """What ``prune`` would delete, counted in one read."""
        return Pruned(**(await self._rows("prune_count", before=before, state=state))[0])
