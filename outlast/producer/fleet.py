"""The client sees the fleet here: health, the workers' heartbeat records, each queue's figures
and its dead letters. Everything is read from Postgres, the one source of truth, except what only
Redis knows: a queue's stream figures and its dead letters. A dead letter is requeued through
Postgres first."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any, Literal

from outlast._fleet import way_out
from outlast._latency import BOUNDS, summary
from outlast._urls import redact
from outlast.errors import SchemaError, ServiceUnavailable
from outlast.producer.core import ClientCore
from outlast.queue import run_id_problem
from outlast.store import SCHEMA_VERSION

Outcome = Literal["requeued", "dropped", "kept"]


class Fleet(ClientCore):
    """``Fleet`` is the family of fleet reads and dead-letter handling (``outlast health``, ``workers``,
    ``queues``, ``fleet``, ``dead-letters``, and the dashboard's fleet page)."""

    async def health(self, worker: bool = False) -> tuple[list[str], list[str]]:
        """Check that Postgres answers, the schema is current, Redis answers and (``worker``) a
        live worker heartbeat exists. Returns what is fine and what is wrong (healthy: nothing
        wrong). Needs no ``open`` first: an unreachable server is a finding, not an error."""
        fine: list[str] = []
        wrong: list[str] = []
        schema_ok = postgres_ok = False
        try:
            await self.store.open(check=False)
            fine.append("postgres answers")
            postgres_ok = True
            await self.store.check_schema()
            fine.append(f"schema '{self.settings.schema}' at version {SCHEMA_VERSION}")
            schema_ok = True
            if not await self.store.fleet.writable():
                wrong.append(
                    f"Postgres at {redact(self.settings.database_url or '')} refuses writes (a standby "
                    "not promoted, or default_transaction_read_only on): point OUTLAST_DATABASE_URL at "
                    "the primary, or turn read-only off"
                )
            if slow := await self._slow_round_trip():
                wrong.append(slow)
        except (ServiceUnavailable, SchemaError) as exc:
            wrong.append(str(exc))
        try:
            if postgres_ok:  # otherwise the line above says it all
                fine.append(await self.store.check_listen())
        except ServiceUnavailable as exc:
            wrong.append(f"{exc} (LISTEN: waiting clients poll meanwhile)")
        try:
            await self.queue.ping()
            fine.append("redis answers")
            if full := await self.queue.refusing_writes():
                wrong.append(full)
        except ServiceUnavailable as exc:
            wrong.append(str(exc))
        if worker and schema_ok:
            live = [w for w in await self.store.fleet.workers() if w["live"]]
            if live:
                fine.append(f"{len(live)} live worker(s)")
            else:
                wrong.append(
                    "no live worker (no heartbeat within three lease TTLs); start one: outlast worker"
                )
        return fine, wrong

    async def _slow_round_trip(self) -> str | None:
        """What is wrong when a Postgres round trip from here (the fastest of three one-row reads)
        takes longer than ``Settings.slow_after``, or None."""
        took = []
        for _ in range(3):
            began = time.monotonic()
            await self.store.fleet.writable()
            took.append(time.monotonic() - began)
        ttl, over = self.settings.lease_ttl, self.settings.slow_after
        if min(took) <= over:
            return None
        return (
            f"Postgres at {redact(self.settings.database_url or '')} is slow: a round trip took "
            f"{min(took) * 1000:.0f} ms, over {over * 1000:.0f} ms (OUTLAST_SLOW_ROUND_TRIP, at most "
            f"a tenth of OUTLAST_LEASE_TTL {ttl:g}s); every commit waits on it, and a lease renewal "
            f"not answered within {ttl * 2 / 3:.3g}s fails: run the workers nearer to Postgres, or "
            "raise OUTLAST_LEASE_TTL (ten round trips at least) and OUTLAST_SLOW_ROUND_TRIP"
        )

    async def workers(self) -> list[dict[str, Any]]:
        """Every worker's heartbeat record, with ``live`` (a beat within three lease TTLs) and
        ``beat_age`` (seconds)."""
        await self.open()
        return await self.store.fleet.workers()

    async def queues(self, names: Sequence[str] = ()) -> list[dict[str, Any]]:
        """Each queue's figures: from Redis, its stream (length, pending, oldest pending age,
        dead letters); from Postgres, its unfinished runs by state. Without ``names``: every queue
        that has unfinished runs or a worker's heartbeat record, and the configured one."""
        await self.open()
        unfinished = await self.store.runs.unfinished_by_queue()
        if not names:
            served = {q for w in await self.store.fleet.workers() for q in w["queues"]}
            names = sorted({*unfinished, *served, self.settings.queue})
        out = []
        for name in names:
            figures = asdict(await self.queue.figures(name))
            out.append({**figures, "runs": unfinished.get(name, {})})
        return out

    async def parked(self) -> list[dict[str, Any]]:
        """The runs parked until a person acts (a bug, a program no worker serves, a replay that
        diverged, a pause), per workflow and reason: ``workflow``, ``reason``, ``runs`` (how
        many) and ``way_out`` (the command that takes them forward)."""
        await self.open()
        return [
            {"workflow": w, "reason": r, "runs": p["n"], "way_out": way_out(w, r)}
            for p in await self.store.runs.parked()
            for w, r in [(p["workflow"], p["reason"])]
        ]

    async def charts(self, seconds: float = 3600.0) -> dict[str, Any]:
        """The dashboard's charts, read from the rollup the workers' sweepers keep once a minute
        (never from the runs or the journal): over the last ``seconds``, the runs started,
        finished and failed per minute (``runs``) and each queue's depth and oldest entry's age
        at each minute (``queues``); and each tool's operations, p50 and p95 latency in seconds
        over the last hour and the last day (``latency``)."""
        await self.open()
        rows = await self.store.rollups.chart_rows(seconds)
        queues: dict[str, list[dict[str, Any]]] = {}
        for r in rows["queues"]:
            queues.setdefault(r["queue"], []).append(
                {"minute": r["minute"], "depth": r["depth"], "oldest_age": r["oldest_age"]}
            )
        size = len(BOUNDS) + 1
        counts: dict[str, tuple[list[int], list[int]]] = {}
        for r in rows["latency"]:
            hour, day = counts.setdefault(r["tool"], ([0] * size, [0] * size))
            if r["i"] <= size:
                hour[r["i"] - 1], day[r["i"] - 1] = int(r["recent"] or 0), int(r["whole"] or 0)
        return {
            "seconds": seconds,
            "runs": rows["runs"],
            "queues": queues,
            "latency": [
                {"tool": tool, "hour": summary(hour), "day": summary(day)}
                for tool, (hour, day) in sorted(counts.items())
            ],
        }

    async def dead_letters(
        self, queue: str, count: int = 100, entry_id: str | None = None
    ) -> list[dict[str, str]]:
        """The queue's dead letters, oldest first (or only the one ``entry_id``)."""
        return await self.queue.dead_letters(queue, count=count, entry_id=entry_id)

    async def drop_dead_letter(self, queue: str, entry_id: str) -> bool:
        """Delete one dead letter of ``queue``; False if there was none by that id."""
        return await self.queue.drop_dead_letter(queue, entry_id)

    async def requeue_dead_letter(self, queue: str, letter: dict[str, str]) -> tuple[Outcome, str]:
        """Requeue one dead letter of ``queue``, Postgres first: a run that is not final is
        stamped as published (with a 'requeued' event), then published on its own queue and the
        letter dropped; for a final run the letter is only dropped; a letter naming no run is
        kept. Returns the outcome and a line saying it."""
        await self.open()
        entry = letter["_id"]
        run_id = letter.get("run")
        problem = "entry is not UTF-8" if "_raw" in letter else run_id_problem(run_id)
        if problem is not None or run_id is None:
            return "kept", f"dead letter {entry}: {problem}: nothing to requeue (remove it: --drop {entry})"
        detail = {"dead_letter": entry, "queue": queue, "reason": letter.get("_reason")}
        where = await self.store.runs.requeue_dead_letter(run_id, detail)
        if where is None:
            run = await self.store.runs.get_run(run_id)
            if run is None:
                return "kept", (
                    f"dead letter {entry}: no run '{run_id}' in Postgres: nothing to requeue "
                    f"(remove it: --drop {entry})"
                )
            await self.queue.drop_dead_letter(queue, entry)
            return "dropped", f"dead letter {entry}: run '{run_id}' is {run.state}: dropped, nothing requeued"
        run_queue, state, priority = where
        await self.queue.publish(run_queue, run_id, priority=priority)
        await self.queue.drop_dead_letter(queue, entry)
        return "requeued", f"dead letter {entry}: run '{run_id}' ({state}) requeued on queue '{run_queue}'"
