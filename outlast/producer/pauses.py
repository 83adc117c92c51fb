"""This family holds the pauses of runs, and lets them go on: one run, every run of a workflow, or
every run of a queue. A paused run stops at its next crossing (a call in flight finishes and is
journaled first) or, not yet started, at its claim, and waits, reason ``paused``, holding no worker;
a new run of a paused workflow is admitted and waits likewise. ``unpause`` queues again the runs no
other pause holds."""

from __future__ import annotations

from typing import Any

from outlast.errors import InvalidInput, RunFinished
from outlast.identity import Principal, cli_principal
from outlast.producer.checks import check_text
from outlast.producer.core import ClientCore

WHY_CHARS = 500  # of a pause's reason, as stored


def _scope(run_id: str | None, workflow: str | None, queue: str | None, what: str) -> tuple[str, str]:
    """The one scope given: ('run', id), ('workflow', name) or ('queue', name)."""
    given = [(s, t) for s, t in (("run", run_id), ("workflow", workflow), ("queue", queue)) if t is not None]
    if len(given) != 1:
        raise InvalidInput(f"{what}: give one of a run id, workflow= or queue=, not {len(given)}")
    scope, target = given[0]
    check_text(target, f"the {scope}", what)
    return scope, target


class Pauses(ClientCore):
    """``Pauses`` stops runs at their next crossing and lets them go on, on an operator's word."""

    async def pause(
        self,
        run_id: str | None = None,
        *,
        workflow: str | None = None,
        queue: str | None = None,
        why: str = "",
        principal: Principal | None = None,
    ) -> dict[str, Any]:
        """Pause one run, every run of ``workflow``, or every run of ``queue`` (runs admitted later
        included), recording who (``principal``; the program's user if not given) and ``why``.
        Returns the pause as recorded: scope, target, by, why, at."""
        scope, target = _scope(run_id, workflow, queue, "pause")
        if not isinstance(why, str) or len(why) > WHY_CHARS:
            raise InvalidInput(f"pause of {scope} '{target}': why must be text of at most {WHY_CHARS} chars")
        await self.open()
        if run_id is not None:
            run = await self.status(run_id)
            if run.final:
                raise RunFinished(f"run '{run_id}' is {run.state}: a finished run is not paused")
        who = (principal or cli_principal("client")).record()
        pause = await self.store.pauses.pause(scope, target, who, why)
        if run_id is not None:  # the run's own history says it was asked (it stops at a crossing)
            await self.store.runs.event(run_id, "pause_requested", {"by": who, "why": why})
        return pause

    async def unpause(
        self,
        run_id: str | None = None,
        *,
        workflow: str | None = None,
        queue: str | None = None,
        principal: Principal | None = None,
    ) -> list[str]:
        """Lift the pause of a run, a workflow or a queue: the runs it parked that no other pause
        holds are queued again and go on from where they stopped. Returns their ids. Lifting a
        pause that is not there is refused."""
        scope, target = _scope(run_id, workflow, queue, "unpause")
        await self.open()
        who = (principal or cli_principal("client")).record()
        lifted, let_go = await self.store.pauses.unpause(
            scope, target, {"by": who, "scope": scope, "target": target}
        )
        if let_go:
            await self.queue.publish_many([(q, rid, priority) for rid, q, priority in let_go])
        if lifted is None and not let_go:
            raise InvalidInput(f"no pause of {scope} '{target}' to lift (outlast pauses lists them)")
        return [run for run, _, _ in let_go]

    async def pauses(self) -> list[dict[str, Any]]:
        """Every pause in force, oldest first: scope, target, by, why, at."""
        await self.open()
        return await self.store.pauses.pauses()

    async def pause_of(self, run_id: str) -> list[dict[str, Any]]:
        """The pauses that hold a run (its own, its workflow's, its queue's); empty if none."""
        await self.open()
        return await self.store.pauses.pause_of(run_id)
