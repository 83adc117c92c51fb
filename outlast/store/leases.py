"""The leases family makes claims, renewals and every fenced change of a run's state."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from outlast._model import RunRecord
from outlast.store.base import Family
from outlast.store.records import Claimed, Lease


class Leases(Family):
    """``Leases`` takes, renews and gives up a run's lease, and makes its state changes, each fenced
    by its token."""

    async def claim(
        self,
        run_id: str,
        worker: str,
        ttl: float,
        programs: dict[str, str],
        queue: str | None = None,
        steady: float | None = None,
    ) -> Claimed | None:
        """Take the run's lease (a new fencing token), or None if it is not to be taken (nor
        is a run of another queue than ``queue``, when given). Returns the run, the database
        clock at the claim, and the run of the same tenant it made the turn of, if any.
        ``steady``: the seconds Postgres has answered the claimer since an outage it saw
        (``Heartbeat.steady``); an expired lease whose owner has not beaten since is not taken
        until that owner has been silent for three of its TTLs since. None: no outage seen."""
        rows = await self._write(
            "claim",
            id=run_id,
            worker=worker,
            ttl=ttl,
            programs=json.dumps(programs),
            queue=queue,
            window=self.tenant_window,
            steady=steady,
        )
        if not rows:
            return None
        r = rows[0]
        turn = (r["turn_id"], r["queue"], r["turn_priority"]) if r["turn_id"] else None
        return Claimed(RunRecord.from_row(r), r["db_now"], turn, r["paused"])

    async def renew(self, held: dict[str, int], ttl: float) -> dict[str, Lease]:
        """Renew every lease in ``held`` (run id -> token) at once, on a connection of its own
        (never queued behind writes being retried), locking the runs in id order as every write
        does. Says, for each run, whether it was renewed, whether it
        was lost (a newer token exists), whether a cancellation was requested and whether a pause
        holds it (``pauses.py``); a run neither
        renewed nor lost has ended (final or waiting) under this worker's own token."""
        if not held:
            return {}
        ids = sorted(held)
        rows = await self._beat_rows("renew", ids=ids, tokens=[held[i] for i in ids], ttl=ttl)
        return {r["id"]: Lease(r["renewed"], r["lost"], r["cancel_requested"], r["paused"]) for r in rows}

    async def finish(
        self,
        run_id: str,
        token: int,
        state: str,
        journal_len: int,
        *,
        result: Any = None,
        error: dict[str, Any] | None = None,
        reason: str | None = None,
    ) -> bool:
        """Commit a final state (fenced) on a journal of ``journal_len`` entries (written with it:
        see ``JournalWrites.fenced``). False if the token is stale or the journal not that long."""
        rows = await self._write(
            "finish",
            id=run_id,
            token=token,
            state=state,
            journal_len=journal_len,
            reason=reason,
            result=None if result is None else Jsonb(result),
            error=None if error is None else Jsonb(error),
            detail=Jsonb({"reason": reason} if reason else {}),
        )
        return bool(rows)

    async def wait(
        self, run_id: str, token: int, reason: str, message: str, wake_at: datetime | None = None
    ) -> bool:
        """Give up the lease and wait durably with a reason (fenced)."""
        rows = await self._write(
            "wait",
            id=run_id,
            token=token,
            reason=reason,
            wake_at=wake_at,
            detail=Jsonb({"reason": reason, "message": message}),
        )
        return bool(rows)

    async def refuse_program(
        self, run_id: str, program: str | None, message: str, within: float = 0.0
    ) -> bool:
        """Park a run due for a worker that serves ``program``, not its own, while no live worker
        serves its program (nor did one in the last ``within`` seconds)."""
        rows = await self._write(
            "refuse_unclaimed",
            id=run_id,
            program=program,
            detail=Jsonb({"reason": "program_changed", "message": message}),
            within=within,
        )
        return bool(rows)

    async def release(self, run_id: str, token: int, why: str) -> bool:
        """Hand the run over (fenced): the lease ends now, and the claim is not counted as a crash."""
        rows = await self._write("release", id=run_id, token=token, detail=Jsonb({"why": why}))
        return bool(rows)

    async def requeue(self, run_id: str, token: int, accept_program: bool, detail: dict[str, Any]) -> bool:
        """Queue a waiting run again: the wait under ``token`` (the run's token when it was read),
        no other. False if the run changed since."""
        rows = await self._write(
            "requeue", id=run_id, token=token, accept_program=accept_program, detail=Jsonb(detail)
        )
        return bool(rows)
