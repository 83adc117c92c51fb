"""The fleet family stores workers' heartbeat records and the programs they serve."""

from __future__ import annotations

from typing import Any

from psycopg.types.json import Jsonb

from outlast.store.base import Family
from outlast.store.steps import SCHEMA_VERSION


class Fleet(Family):
    """Workers' heartbeat records, the programs each serves, and watchers gone."""

    async def beat_worker(self, record: dict[str, Any]) -> None:
        """Upsert a worker's heartbeat record (name, host, pid, queues, programs, concurrency,
        lease_ttl, runs_held), and the schema version this code knows (a contract migration waits
        for older workers to go: ``Migrations._refuse_older_workers``); the database clock stamps
        the beat. On the renewals' connection, as ``beat_programs``: after an outage the pool
        reconnects with a backoff of seconds, and a beat queued behind it would hold up the next
        renewals (the owner would leave its runs, its record would say nothing of its life)."""
        params = {**record, "programs": Jsonb(record["programs"]), "code_version": SCHEMA_VERSION}
        params["worker"] = params.pop("name")
        await self._beat_rows("beat_worker", **params)

    async def writable(self) -> bool:
        """Whether Postgres takes writes here: not a standby, not read-only by default."""
        return bool((await self._rows("writable"))[0]["writable"])

    async def forget_worker(self, name: str) -> None:
        await self._rows("forget_worker", worker=name)

    async def forget_gone_workers(self, after: float) -> list[str]:
        """Delete the records of workers silent for ``after`` seconds (at least ten TTLs)."""
        return [r["name"] for r in await self._rows("forget_gone_workers", after=after)]

    async def workers(self) -> list[dict[str, Any]]:
        """Every heartbeat record, with ``live`` (a beat within three TTLs) and ``beat_age``."""
        return await self._rows("workers")

    async def beat_programs(self, queues: list[str], programs: dict[str, str]) -> None:
        """Record that this worker serves ``programs`` (workflow -> program) on ``queues`` now."""
        await self._beat_rows("beat_programs", queues=queues, programs=Jsonb(programs))

    async def declare_channels(self, declared: list[dict[str, Any]], limits: dict[str, int]) -> None:
        """Publish the channels each workflow declares, per program (``workflow``, ``program``,
        ``channels``: {channel: JSON schema}, or None for none declared), and the ``limits`` of a
        send by SQL (``max_payload``, ``max_inbox``, ``max_inbox_run``)."""
        await self._rows("declare_channels", declared=Jsonb(declared), **limits)

    async def program_served(self, run_id: str, within: float) -> bool:
        """Whether the run is ready for a worker of its program, and a live worker serves that
        program on the run's queue (or one did in the last ``within`` seconds)."""
        rows = await self._rows("program_served", id=run_id, within=within)
        return bool(rows and rows[0]["served"])

    async def unknown_workflows(self, queues: list[str], programs: dict[str, str]) -> list[str]:
        """The workflows of unfinished runs on ``queues`` that are not in ``programs`` (another
        app's, sharing a queue), at most ten."""
        rows = await self._rows("unknown_workflows", queues=queues, programs=Jsonb(programs))
        return [r["workflow"] for r in rows]

    async def forget_served_programs(self, after: float) -> None:
        await self._rows("forget_served_programs", after=after)

    async def forget_watchers(self) -> int:
        """Remove the watchers whose listening connection is gone; how many."""
        return len(await self._rows("forget_watchers"))

    async def redis_used(self, markers: list[str]) -> bool:
        """Record that this schema's queue used Redis under these data-loss markers (keys from
        ``Queue.lost_data``); whether it had used it before, so that a marker found gone means
        Redis lost its data, not that it is fresh."""
        rows = await self._rows("redis_used", markers=markers)
        return bool(rows[0]["used"])
