"""Administration covers the schema (migrate), pruning finished runs, schedules, and the figures a
live view polls."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta
from typing import Any

import structlog

from outlast._listing import COUNTED
from outlast._model import FINAL_STATES, RunRecord
from outlast._schedules import next_tick
from outlast.errors import InvalidInput, UnknownSchedule
from outlast.identity import Principal
from outlast.producer.admission import Admission
from outlast.producer.checks import show
from outlast.settings import MAX_AGE
from outlast.store import SCHEMA_VERSION, Pruned

log = structlog.get_logger("outlast.client")


class Administration(Admission):
    """``Administration`` is the family of an operator's upkeep (a schedule's trigger admits a run,
    hence ``Admission``)."""

    async def prune(
        self, finished_before: timedelta | float, *, state: str | None = None, dry_run: bool = False
    ) -> tuple[datetime, Pruned]:
        """Delete the runs finished longer ago than ``finished_before`` (seconds, or a timedelta)
        — only final runs, of ``state`` if given — with their journal, events, approvals,
        reservations and the budgets no kept run shares, 500 runs per transaction. A run that a
        kept run continues is kept. ``dry_run`` counts instead. Returns the cutoff (database
        clock) and the counts."""
        age = finished_before.total_seconds() if isinstance(finished_before, timedelta) else finished_before
        if isinstance(age, bool) or not isinstance(age, int | float) or not 0 < age <= MAX_AGE:
            raise InvalidInput(
                f"prune: the age must be a number of seconds in (0, {MAX_AGE:.0f}], got {show(age)}"
            )
        if state is not None and state not in {s.value for s in FINAL_STATES}:
            final = ", ".join(sorted(FINAL_STATES))
            raise InvalidInput(
                f"prune deletes only finished runs: the state must be one of {final}, got {show(state)}"
            )
        await self.open()
        before = await self.store.sweeps.cutoff(float(age))
        if dry_run:
            return before, await self.store.sweeps.prune_count(before, state)
        return before, await self.store.sweeps.prune(before, state)

    async def migrate(self, to: int = SCHEMA_VERSION) -> int:
        """Create or upgrade the schema (idempotent); returns the version now recorded."""
        if not self._opened:
            await self.store.open(check=False)
            self._opened = True
        return await self.store.migrate(to)

    async def schedules(self) -> list[dict[str, Any]]:
        """Every schedule the workers have declared, each with ``next_tick`` (None while paused)."""
        await self.open()
        rows = await self.store.schedules.schedules()
        for r in rows:
            after = max(r["last_tick"], r.pop("db_now"))
            r["next_tick"] = None if r["paused"] else next_tick(r["cron"], r["tz"], after)
        return rows

    async def pause_schedule(
        self, name: str, paused: bool = True, *, principal: Principal | None = None
    ) -> dict[str, Any]:
        """Pause a schedule (no tick is enqueued), or resume it (``paused=False``): it goes on
        from now, the ticks of its pause skipped. The ``principal`` who asked is logged (a
        schedule has no events of its own)."""
        await self.open()
        row = await self.store.schedules.pause_schedule(name, paused)
        if row is None:
            raise UnknownSchedule(name)
        who = principal.record() if principal else {}
        log.info("schedule.paused", schedule=name, paused=paused, **who)
        return row

    async def trigger_schedule(self, name: str, *, principal: Principal | None = None) -> RunRecord:
        """Enqueue a run of the schedule's workflow and input now, besides its ticks; the run's
        'triggered' event names the schedule and the ``principal`` who asked."""
        await self.open()
        rows = await self.store.schedules.schedules([name])
        if not rows:
            raise UnknownSchedule(name)
        r = rows[0]
        rid = f"{name}@trigger-{uuid.uuid4().hex[:12]}"
        run = await self._admit(self._prepare(r["workflow"], r["input"], run_id=rid, queue=r["queue"]))
        await self.store.runs.event(
            run.id, "triggered", {"schedule": name, **(principal.record() if principal else {})}
        )
        return run

    async def counts(self) -> dict[str, int]:
        """How many runs are in each state, counted up to COUNTED (10,000) each: a state with more
        reads COUNTED + 1. Bounded so that a look costs the same at a million runs as at ten."""
        await self.open()
        return await self.store.runs.count_by_state(COUNTED)

    async def change_mark(self) -> int:
        """A number that moves whenever anything happens to any run (for live views)."""
        await self.open()
        return await self.store.runs.change_mark()
