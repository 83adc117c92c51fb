"""Postgres access: the only place that speaks SQL. Driver errors are wrapped here."""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Sequence
from dataclasses import astuple, dataclass
from datetime import datetime, timedelta
from importlib import resources
from typing import Any, NamedTuple, cast
from urllib.parse import urlsplit, urlunsplit

import psycopg
import psycopg_pool
from psycopg import sql
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from outlast.errors import SchemaError, ServiceUnavailable
from outlast.journal import Entry
from outlast.model import Run
from outlast.schedules import Schedule
from outlast.store.notify import MAX_LISTENERS, RunWatch, channel
from outlast.store.queries import Q
from outlast.store.writer import Writer

Conn = psycopg.AsyncConnection[dict[str, Any]]


def redact(url: str) -> str:
    """The URL without its password (after the user, or a ``password=`` parameter), for messages;
    never raises, even on a malformed URL."""
    import re

    url = re.sub(r"(?i)\bpassword=[^&\s]*", "password=***", url)
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # e.g. an unclosed IPv6 bracket: hide whatever sits between user and host
        return re.sub(r"(//[^/@:]*:)[^/]*@", r"\1***@", url)
    if password is None:
        return url
    netloc = parts.netloc.replace(f":{password}@", ":***@")
    return urlunsplit(parts._replace(netloc=netloc))


def _entry_params(e: Entry) -> dict[str, Any]:
    return {"seq": e.seq, "kind": e.kind, "op_id": e.op_id, "body": e.body, "hash": e.hash}


@dataclass(frozen=True)
class Migration:
    """One step of the schema: ``migrations/NNNN_name.sql``, applied once, in order."""

    version: int
    name: str
    sql: str


def _migrations() -> tuple[Migration, ...]:
    found = []
    for f in resources.files("outlast.store").joinpath("migrations").iterdir():
        if not f.name.endswith(".sql"):
            continue
        m = re.fullmatch(r"(\d{4})_[a-z0-9_]+\.sql", f.name)
        if not m:
            raise SchemaError(f"migration file {f.name} is not named NNNN_name.sql")
        found.append(Migration(int(m[1]), f.name, f.read_text()))
    found.sort(key=lambda m: m.version)
    if [m.version for m in found] != list(range(1, len(found) + 1)):
        raise SchemaError(
            f"migrations must be numbered 0001, 0002, ... without gaps: {[m.name for m in found]}"
        )
    return tuple(found)


MIGRATIONS = _migrations()
SCHEMA_VERSION = MIGRATIONS[-1].version  # the newest migration's number
TENANT_WINDOW = 32  # OUTLAST_TENANT_WINDOW's default


def schema_sql() -> str:
    """The whole schema as one script, every migration in order: for reading; ``migrate``
    applies them one at a time."""
    return "\n".join(f"-- {m.name}\n{m.sql}" for m in MIGRATIONS)


@dataclass(frozen=True)
class OnWait:
    """Who appends to a run no worker holds: it waits for ``reason`` and its chain's head is
    ``prev`` (what the writer read)."""

    reason: str
    prev: str


@dataclass(frozen=True)
class ChildStart:
    """What starting a child run found: the parent's lease ``held`` (else fenced), its
    ``cancel_requested``, whether the child was ``created`` (else it exists already, or was
    refused), and whether it was ``held_back`` for its tenant's turn (not to be published now)."""

    held: bool
    cancel_requested: bool
    created: bool
    held_back: bool = False


class Claimed(NamedTuple):
    """A claim: the run under its new token, the database clock then, and the run (id, queue,
    priority) whose turn it made, published by the claim: its stream entry is the claimer's to add."""

    run: Run
    db_now: datetime
    turn: tuple[str, str, str] | None = None


@dataclass(frozen=True)
class Lease:
    """What a heartbeat learnt of one lease."""

    renewed: bool
    lost: bool  # another worker holds a newer fencing token
    cancel_requested: bool


@dataclass(frozen=True)
class Pruned:
    """What a prune deleted (or, counted, would delete): runs and the rows that were theirs;
    budgets are counted by id."""

    runs: int = 0
    journal: int = 0
    events: int = 0
    approvals: int = 0
    reservations: int = 0
    budgets: int = 0

    def __add__(self, other: Pruned) -> Pruned:
        return Pruned(*(a + b for a, b in zip(astuple(self), astuple(other), strict=True)))


class Store:
    """One process's access to Postgres: a small pool for reads and one shared-commit writer."""

    def __init__(
        self,
        url: str,
        schema: str = "outlast",
        max_size: int = 8,
        retry_for: float = 60.0,
        tenant_window: int = TENANT_WINDOW,
    ) -> None:
        self.url = url
        self.schema = schema
        # A tenant's runs published and not started, per queue; its others are held (0014_fair).
        self.tenant_window = tenant_window
        # Each waiting reader listens on a connection of its own, up to MAX_LISTENERS; more poll.
        self._listen_slots = asyncio.Semaphore(MAX_LISTENERS)
        self._pool = psycopg_pool.AsyncConnectionPool(
            url,
            min_size=1,
            max_size=max_size,
            open=False,
            check=psycopg_pool.AsyncConnectionPool.check_connection,  # none stale after a restart
            kwargs={
                "autocommit": True,
                "row_factory": dict_row,
                "options": f"-c search_path={schema}",
            },
        )
        self.writer = Writer(self._connect, self._unavailable, retry_for)
        self._beat: Conn | None = None  # lease renewals: never queued behind reads or writes
        self.reads = 0  # read round trips, for the cost model's measurements

    async def _connect(self) -> Conn:
        """The writer's and the renewals' connection. Their statements are prepared (psycopg, after
        five uses) and keyed by run: a generic plan serves every run. Postgres would otherwise plan
        each statement that reads the partitioned journal or events afresh (a custom plan, pruned to
        one partition, looks cheaper than the generic plan over all of them), at three times the
        cost of the write itself (bench: the fenced-append limit, 3,100 -> 9,100 writes/s)."""
        try:
            return await psycopg.AsyncConnection.connect(
                self.url,
                connect_timeout=5,
                autocommit=True,
                row_factory=dict_row,
                options=f"-c search_path={self.schema} -c plan_cache_mode=force_generic_plan",
            )
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc) from exc

    async def _listener(self) -> Conn:
        """A connection of its own for LISTEN; TCP keepalives notice a silent network loss."""
        try:
            return await psycopg.AsyncConnection.connect(
                self.url,
                connect_timeout=5,
                autocommit=True,
                row_factory=dict_row,
                application_name="outlast-listen",
                options=f"-c search_path={self.schema}",
                keepalives=1,
                keepalives_idle=10,
                keepalives_interval=5,
                keepalives_count=3,
            )
        except psycopg.OperationalError as exc:
            raise self._unavailable(exc) from exc

    @contextlib.asynccontextmanager
    async def watch(self, run_id: str, poll: float) -> AsyncIterator[RunWatch]:
        """Listen for the run's changes for as long as the block lasts (see ``RunWatch``)."""
        w = RunWatch(self._listener, run_id, channel(self.schema, run_id), poll, self._listen_slots)
        try:
            await w.start()
            yield w
        finally:
            await w.close()

    def _unavailable(self, exc: BaseException) -> ServiceUnavailable:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        return ServiceUnavailable(f"cannot reach Postgres at {redact(self.url)}: {first}")

    async def open(self, check: bool = True) -> None:
        """Connect; with ``check``, refuse a schema that is missing or newer than this code."""
        probe = await self._connect()  # fails fast, with the driver's reason, if unreachable
        await probe.close()
        try:
            await self._pool.open(wait=True, timeout=10)
        except psycopg_pool.PoolTimeout as exc:
            raise self._unavailable(exc) from exc
        if check:
            await self.check_schema()

    async def close(self) -> None:
        if self._beat is not None:
            await self._beat.close()
        await self.writer.close()
        await self._pool.close()

    @contextlib.asynccontextmanager
    async def _conn(self) -> AsyncIterator[Conn]:
        try:
            async with self._pool.connection() as conn:
                yield cast(Conn, conn)
        except (psycopg.OperationalError, psycopg_pool.PoolTimeout, OSError) as exc:
            raise self._unavailable(exc) from exc

    async def _rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """A read (or a write that never waits for a lock) on a pooled connection; retried a few
        times through a dropped connection, then ServiceUnavailable."""
        for attempt in range(3):
            self.reads += 1
            try:
                async with self._conn() as conn:
                    cur = await conn.execute(Q[name], params)
                    return await cur.fetchall() if cur.description else []
            except ServiceUnavailable:
                if attempt == 2:
                    raise
            except psycopg.Error as exc:
                raise self._unavailable(exc) from exc
            await asyncio.sleep(0.1 * 2**attempt)
        raise AssertionError("unreachable")  # pragma: no cover

    async def _write(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """A write through the shared-commit writer, ordered by the run it locks."""
        key = str(params.get("run_id") or params.get("id") or "")
        return await self.writer.write(Q[name], params, key=key)

    # -- schema -------------------------------------------------------------------------

    async def migrate(self, to: int = SCHEMA_VERSION) -> int:
        """Bring the schema up to version ``to`` (tests stop short of the newest): each missing
        migration is applied in a transaction of its own, which also records its number.
        Returns the version now recorded. Re-running changes nothing; two at once are safe
        (each step holds the advisory lock and re-reads the version under it)."""
        if not 0 <= to <= SCHEMA_VERSION:
            raise ValueError(f"no schema version {to}: this outlast knows 0 to {SCHEMA_VERSION}")
        schema = sql.Identifier(self.schema)
        async with self._conn() as conn:
            while True:
                async with conn.transaction():
                    await conn.execute("SELECT pg_advisory_xact_lock(hashtext('outlast-migrate'))")
                    await conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(schema))
                    await conn.execute(sql.SQL("SET LOCAL search_path TO {}").format(schema))
                    # A database made by the old schema.sql recorded its version the same way.
                    found = await self._refuse_newer(conn) or 0
                    if found >= to:
                        return found
                    step = MIGRATIONS[found]
                    await conn.execute(step.sql.encode())
                    await conn.execute(
                        "INSERT INTO outlast_meta (key, value) VALUES ('schema_version', %s)"
                        " ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
                        (str(step.version),),
                    )

    async def _refuse_newer(self, conn: Conn) -> int | None:
        exists = await (await conn.execute("SELECT to_regclass('outlast_meta') IS NOT NULL AS ok")).fetchone()
        if not exists or not exists["ok"]:
            return None
        row = await (await conn.execute(Q["schema_version"])).fetchone()
        found = int(row["value"]) if row else None
        if found is not None and found > SCHEMA_VERSION:
            raise SchemaError(
                f"the database schema '{self.schema}' is version {found}, newer than this "
                f"outlast knows ({SCHEMA_VERSION}); upgrade outlast on this machine"
            )
        return found

    async def check_schema(self) -> None:
        async with self._conn() as conn:
            found = await self._refuse_newer(conn)
        if found is None:
            raise SchemaError(
                f"no outlast schema '{self.schema}' in {redact(self.url)}; run: outlast migrate"
            )
        if found < SCHEMA_VERSION:
            raise SchemaError(
                f"the database schema '{self.schema}' is version {found}, older than this outlast "
                f"needs ({SCHEMA_VERSION}); run: outlast migrate"
            )

    # -- runs -----------------------------------------------------------------------------

    async def insert_run(
        self,
        *,
        id: str,
        workflow: str,
        queue: str,
        input: dict[str, Any],
        input_hash: str,
        program: str | None,
        deadline_in: float | None,
        deadline_at: datetime | None = None,
        parent_id: str | None = None,
        budget: dict[str, float] | None = None,
        budget_id: str | None = None,
        trace_context: dict[str, str] | None = None,
        start_at: datetime | None = None,
        start_in: float | None = None,
        priority: str = "normal",
        tenant: str | None = None,
    ) -> tuple[Run, bool]:
        """Insert a queued run (with its budget, if given); if the id exists, return the existing
        one and False. A continued run passes the budget_id it shares instead of a budget.
        ``trace_context`` is the producer's trace, continued by every attempt of the run; a run
        with ``start_at`` (or ``start_in`` seconds from now, by the database clock) is not
        delivered before then: the sweeper publishes it; ``tenant`` is whose run it is."""
        limits = budget or {}
        rows = await self._write(
            "insert_run",
            id=id,
            workflow=workflow,
            queue=queue,
            input=Jsonb(input),
            input_hash=input_hash,
            program=program,
            deadline_in=deadline_in,
            deadline_at=deadline_at,
            parent_id=parent_id,
            budget_id=budget_id or (id if limits else None),
            budget_names=list(limits),
            budget_limits=[float(v) for v in limits.values()],  # one type: psycopg refuses int+float
            trace_context=None if trace_context is None else Jsonb(trace_context),
            start_at=start_at,
            start_in=start_in,
            priority=priority,
            tenant=tenant,
            window=self.tenant_window,
        )
        if rows:
            return Run.from_row(rows[0]), True
        existing = await self.get_run(id)
        assert existing is not None
        return existing, False

    async def get_run(self, run_id: str) -> Run | None:
        rows = await self._rows("get_run", id=run_id)
        return Run.from_row(rows[0]) if rows else None

    async def list_runs(
        self,
        state: str | None,
        limit: int,
        *,
        workflow: str | None = None,
        queue: str | None = None,
        since: datetime | timedelta | None = None,
        tenant: str | None = None,
    ) -> list[Run]:
        """The latest runs, newest first; each filter given narrows them (an age ``since`` by the
        database clock)."""
        age = since.total_seconds() if isinstance(since, timedelta) else None
        at = since if isinstance(since, datetime) else None
        rows = await self._rows(
            "list_runs",
            state=state,
            limit=limit,
            workflow=workflow,
            queue=queue,
            since=at,
            age=age,
            tenant=tenant,
        )
        return [Run.from_row(r) for r in rows]

    async def event(self, run_id: str, kind: str, detail: dict[str, Any]) -> None:
        await self._write("add_event", run_id=run_id, kind=kind, detail=Jsonb(detail))

    async def events(self, run_id: str, after: int = 0) -> list[dict[str, Any]]:
        return await self._rows("events", run_id=run_id, after=after)

    # -- leases ---------------------------------------------------------------------------

    async def claim(
        self, run_id: str, worker: str, ttl: float, programs: dict[str, str], queue: str | None = None
    ) -> Claimed | None:
        """Take the run's lease (a new fencing token), or None if it is not to be taken (nor
        is a run of another queue than ``queue``, when given). Returns the run, the database
        clock at the claim, and the run of the same tenant it made the turn of, if any."""
        rows = await self._write(
            "claim",
            id=run_id,
            worker=worker,
            ttl=ttl,
            programs=json.dumps(programs),
            queue=queue,
            window=self.tenant_window,
        )
        if not rows:
            return None
        r = rows[0]
        turn = (r["turn_id"], r["queue"], r["turn_priority"]) if r["turn_id"] else None
        return Claimed(Run.from_row(r), r["db_now"], turn)

    async def renew(self, held: dict[str, int], ttl: float) -> dict[str, Lease]:
        """Renew every lease in ``held`` (run id -> token) at once, on a connection of its own
        (never queued behind writes being retried), locking the runs in id order as every write
        does. Says, for each run, whether it was renewed, whether it
        was lost (a newer token exists) and whether a cancellation was requested; a run neither
        renewed nor lost has ended (final or waiting) under this worker's own token."""
        if not held:
            return {}
        ids = sorted(held)
        params = {"ids": ids, "tokens": [held[i] for i in ids], "ttl": ttl}
        for attempt in range(2):  # once more on a fresh connection, after a restart
            try:
                if self._beat is None or self._beat.closed:
                    self._beat = await self._connect()
                rows = await (await self._beat.execute(Q["renew"], params)).fetchall()
                break
            except psycopg.Error as exc:
                beat, self._beat = self._beat, None
                if beat is not None:
                    await beat.close()
                if attempt:
                    raise self._unavailable(exc) from exc
        return {r["id"]: Lease(r["renewed"], r["lost"], r["cancel_requested"]) for r in rows}

    async def finish(
        self,
        run_id: str,
        token: int,
        state: str,
        *,
        result: Any = None,
        error: dict[str, Any] | None = None,
        reason: str | None = None,
    ) -> bool:
        """Commit a final state (fenced). False if the token is stale."""
        rows = await self._write(
            "finish",
            id=run_id,
            token=token,
            state=state,
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
        rows = await self._write("release", id=run_id, token=token, detail=Jsonb({"why": why}))
        return bool(rows)

    async def requeue(self, run_id: str, accept_program: bool, detail: dict[str, Any]) -> bool:
        rows = await self._write("requeue", id=run_id, accept_program=accept_program, detail=Jsonb(detail))
        return bool(rows)

    async def due(
        self, after: float, limit: int = 200, cutoff: datetime | None = None
    ) -> list[tuple[str, str, str]]:
        """Runs to re-publish (stamped as published now), each (id, queue, priority); with
        ``cutoff``, only runs last published before it, so that successive pages of one pass never
        repeat a run."""
        rows = await self._rows("due", after=after, limit=limit, cutoff=cutoff)
        return [(r["id"], r["queue"], r["priority"]) for r in rows]

    async def turns(self, limit: int = 500) -> list[tuple[str, str, str]]:
        """Held runs whose tenant's window has room, stamped as published now: each (id, queue,
        priority), to publish. With a window of 0, every held run."""
        rows = await self._rows("turns", window=self.tenant_window, limit=limit)
        return [(r["id"], r["queue"], r["priority"]) for r in rows]

    async def expire_deadlines(self, limit: int = 200) -> list[str]:
        return [r["run_id"] for r in await self._rows("expire_deadlines", limit=limit)]

    async def run_gauges(self) -> tuple[int, float]:
        """For the metrics gauges: how many runs wait on an unresolved in-doubt operation, and the
        longest time in seconds a running run has gone without progress (0 when none runs)."""
        row = (await self._rows("run_gauges"))[0]
        return int(row["in_doubt"]), float(row["stalled"])

    async def db_now(self) -> datetime:
        now: datetime = (await self._rows("db_now"))[0]["now"]
        return now

    async def cancel(self, run_id: str, detail: dict[str, Any]) -> tuple[str, str] | None:
        """Record a cancellation request; returns (state, queue) or None if already final."""
        rows = await self._write("cancel", id=run_id, detail=Jsonb(detail))
        return (rows[0]["state"], rows[0]["queue"]) if rows else None

    # -- approvals ------------------------------------------------------------------------

    async def await_approval(
        self,
        run_id: str,
        token: int,
        op_id: str,
        *,
        action: str,
        args: dict[str, Any],
        args_hash: str,
        policy_version: str,
        approvers: list[str],
        expires_in: float | None,
        authenticated: bool = False,
    ) -> bool:
        """Record the request (once) and give up the lease to wait for a decision (fenced);
        ``authenticated``: only a principal the dashboard or the API authenticated may decide it."""
        rows = await self._write(
            "await_approval",
            id=f"{run_id}:{op_id}",
            run_id=run_id,
            token=token,
            op_id=op_id,
            action=action,
            args=Jsonb(args),
            args_hash=args_hash,
            policy_version=policy_version,
            approvers=approvers,
            expires_in=expires_in,
            authenticated=authenticated,
            detail=Jsonb({"approval": op_id, "action": action, "args_hash": args_hash}),
        )
        return bool(rows)

    async def approval(self, run_id: str, op_id: str) -> dict[str, Any] | None:
        rows = await self._rows("get_approval", run_id=run_id, op_id=op_id)
        return rows[0] if rows else None

    async def approvals(self, run_id: str) -> list[dict[str, Any]]:
        return await self._rows("approvals", run_id=run_id)

    async def decide(
        self,
        run_id: str,
        op_id: str,
        status: str,
        by: str,
        comment: str,
        new_args: dict[str, Any] | None,
        who: dict[str, Any],
    ) -> tuple[bool, str | None]:
        """Commit a decision on a pending, unexpired request and wake the run, in one statement;
        ``who`` is the decider's record (``Principal.record``). Returns (decided, queue to
        publish the run on, if it was woken)."""
        rows = await self._write(
            "decide",
            run_id=run_id,
            op_id=op_id,
            status=status,
            by=by,
            comment=comment,
            new_args=None if new_args is None else Jsonb(new_args),
            who=Jsonb(who),
            detail=Jsonb({"approval": op_id, "status": status, "by": by, "who": who, "comment": comment}),
        )
        return (True, rows[0]["queue"]) if rows else (False, None)

    # -- budgets --------------------------------------------------------------------------

    async def reserve(
        self, budget_id: str, run_id: str, op_id: str, amounts: dict[str, float]
    ) -> list[dict[str, Any]]:
        """Reserve all the operation's estimates or none (a name it already holds is kept);
        returns the limits that would be exceeded."""
        return await self._write(
            "reserve",
            budget_id=budget_id,
            run_id=run_id,
            op_id=op_id,
            names=list(amounts),
            amounts=[float(v) for v in amounts.values()],  # one type: psycopg refuses int+float lists
        )

    async def settle(
        self, budget_id: str, run_id: str, op_id: str, actual: dict[str, float], expected: bool
    ) -> None:
        """Replace the operation's reservation by its actual use. ``expected``: the operation
        reserved, so nothing is spent unless its reservation is still there to settle."""
        await self._write(
            "settle",
            budget_id=budget_id,
            run_id=run_id,
            op_id=op_id,
            names=list(actual),
            actual=[float(v) for v in actual.values()],
            expected=expected,
        )

    async def reservations(self, run_id: str, op_id: str) -> dict[str, float]:
        rows = await self._rows("reservations", run_id=run_id, op_id=op_id)
        return {r["name"]: float(r["amount"]) for r in rows}

    async def budget(self, budget_id: str) -> list[dict[str, Any]]:
        return await self._rows("budget", budget_id=budget_id)

    # -- journal --------------------------------------------------------------------------

    async def journal(self, run_id: str) -> list[Entry]:
        rows = await self._rows("journal", run_id=run_id)
        return [Entry(r["seq"], r["kind"], r["op_id"], r["body"], r["hash"]) for r in rows]

    async def journal_times(self, run_id: str) -> dict[int, datetime]:
        return {r["seq"]: r["created_at"] for r in await self._rows("journal_times", run_id=run_id)}

    async def append(self, run_id: str, author: int | OnWait, entry: Entry) -> bool | None:
        """Append one journal entry: the one way into the journal, for the worker and for the
        producer side alike. ``author`` is the lease holder's fencing token, or ``OnWait`` for a
        person or code writing to a run no worker holds (a resolution: the run must wait for
        exactly that reason, its chain must not have moved, and it is queued again).
        None if refused, else whether a cancellation of the run has been requested."""
        if isinstance(author, OnWait):
            rows = await self._write(
                "append_unowned",
                run_id=run_id,
                reason=author.reason,
                prev=author.prev,
                **_entry_params(entry),
            )
        else:
            rows = await self._write("append", run_id=run_id, token=author, **_entry_params(entry))
        return bool(rows[0]["cancel_requested"]) if rows else None

    # -- child runs -----------------------------------------------------------------------

    async def insert_child(self, parent: str, token: int, row: dict[str, Any]) -> ChildStart:
        """Insert a child run of ``parent`` (fenced by the parent's ``token``; refused once the
        parent's cancellation was requested), idempotent on its id. ``row``: id, workflow, queue,
        input, input_hash, program, trace_context."""
        trace = row["trace_context"]
        params = {**row, "input": Jsonb(row["input"])}
        params["trace_context"] = None if trace is None else Jsonb(trace)
        params["window"] = self.tenant_window
        rows = await self._write("insert_child", run_id=parent, token=token, **params)
        r = rows[0]
        return ChildStart(r["held"], r["cancel_requested"], r["created"], r["held_back"])

    async def wait_child(self, run_id: str, token: int, child: str, message: str) -> bool:
        """Give up the lease and wait durably for the run ``child`` (fenced)."""
        detail = Jsonb({"reason": "child", "child": child, "message": message})
        rows = await self._write("wait_child", run_id=run_id, token=token, child=child, detail=detail)
        return bool(rows)

    async def wake_child_waiters(self, limit: int = 500) -> list[str]:
        """Make due the runs waiting for a child that is final; their ids."""
        return [r["id"] for r in await self._rows("wake_child_waiters", limit=limit)]

    async def wake_parent(self, parent: str, child: str) -> str | None:
        """Make ``parent`` due now if it waits for ``child``; its queue, or None."""
        rows = await self._write("wake_parent", id=parent, child=child)
        return rows[0]["queue"] if rows else None

    async def children(self, ids: list[str]) -> list[str]:
        """The unfinished runs started by any of ``ids``."""
        return [r["id"] for r in await self._rows("children", ids=ids)]

    async def children_of(self, run_id: str) -> list[dict[str, Any]]:
        """Every run ``run_id`` started: id, workflow, state, reason."""
        return await self._rows("children_of", run_id=run_id)

    # -- fleet ----------------------------------------------------------------------------

    async def beat_worker(self, record: dict[str, Any]) -> None:
        """Upsert a worker's heartbeat record (name, host, pid, queues, programs, concurrency,
        lease_ttl, runs_held); the database clock stamps the beat."""
        params = {**record, "programs": Jsonb(record["programs"])}
        params["worker"] = params.pop("name")
        await self._rows("beat_worker", **params)

    async def forget_worker(self, name: str) -> None:
        await self._rows("forget_worker", worker=name)

    async def forget_gone_workers(self, after: float) -> list[str]:
        """Delete the records of workers silent for ``after`` seconds (at least ten TTLs)."""
        return [r["name"] for r in await self._rows("forget_gone_workers", after=after)]

    # -- schedules ----------------------------------------------------------------------

    async def declare_schedule(self, sched: Schedule, queue: str) -> None:
        """Record a schedule as declared in code (its pause and last tick stay as they are)."""
        await self._rows(
            "declare_schedule",
            schedule=sched.name,
            workflow=sched.workflow,
            queue=queue,
            cron=sched.cron,
            tz=sched.tz,
            input=Jsonb(sched.input),
            catch_up=sched.catch_up,
        )

    async def schedules(self, names: list[str] | None = None) -> list[dict[str, Any]]:
        """Every schedule (or those named), each with ``db_now``, the database clock."""
        return await self._rows("schedules", names=names)

    async def advance_schedule(self, name: str, was: datetime, tick: datetime) -> bool:
        """Move the schedule's last tick from ``was`` to ``tick``; False if another worker did,
        or it was paused meanwhile."""
        return bool(await self._rows("advance_schedule", schedule=name, was=was, tick=tick))

    async def pause_schedule(self, name: str, paused: bool) -> dict[str, Any] | None:
        """Pause or resume a schedule (resumed, it goes on from now); None if there is none."""
        rows = await self._rows("pause_schedule", schedule=name, paused=paused)
        return rows[0] if rows else None

    async def workers(self) -> list[dict[str, Any]]:
        """Every heartbeat record, with ``live`` (a beat within three TTLs) and ``beat_age``."""
        return await self._rows("workers")

    async def beat_programs(self, queues: list[str], programs: dict[str, str]) -> None:
        """Record that this worker serves ``programs`` (workflow -> program) on ``queues`` now."""
        await self._rows("beat_programs", queues=queues, programs=Jsonb(programs))

    async def program_served(self, run_id: str, within: float) -> bool:
        """Whether the run is ready for a worker of its program, and a live worker serves that
        program on the run's queue (or one did in the last ``within`` seconds)."""
        rows = await self._rows("program_served", id=run_id, within=within)
        return bool(rows and rows[0]["served"])

    async def forget_served_programs(self, after: float) -> None:
        await self._rows("forget_served_programs", after=after)

    async def unfinished_by_queue(self) -> dict[str, dict[str, int]]:
        """Unfinished runs: queue -> state -> count."""
        out: dict[str, dict[str, int]] = {}
        for r in await self._rows("unfinished_by_queue"):
            out.setdefault(r["queue"], {})[r["state"]] = r["n"]
        return out

    async def requeue_dead_letter(self, run_id: str, detail: dict[str, Any]) -> tuple[str, str, str] | None:
        """Stamp an unfinished run as published now, with a 'requeued' event; its (queue,
        state, priority), or None when the run is final (or missing)."""
        rows = await self._write("requeue_dead_letter", id=run_id, detail=Jsonb(detail))
        return (rows[0]["queue"], rows[0]["state"], rows[0]["priority"]) if rows else None

    # -- concurrency slots (0011_flow) ----------------------------------------------------

    async def acquire_slot(
        self, key: str, cap: int, run_id: str, token: int, ttl: float, holder: str = ""
    ) -> int | None:
        """Take one of the ``cap`` slots of ``key`` for the run under its current ``token``, held
        ``ttl`` seconds (renewed with its lease): the slot number, or None when all are taken (or
        the token is stale). On a pooled connection of its own, never the writer's batch: it may
        wait for a rival's insert of the same slot."""
        rows = await self._rows(
            "acquire_slot", key=key, cap=cap, run_id=run_id, token=token, ttl=ttl, holder=holder
        )
        return int(rows[0]["slot"]) if rows else None

    async def release_slots(self, run_id: str, token: int, holder: str | None = None) -> int:
        """Free the slots the run holds under ``token`` (only ``holder``'s, when given); the run
        parked for each key freed that was due first is due at once."""
        return len(await self._rows("release_slots", run_id=run_id, token=token, holder=holder))

    async def park(
        self, run_id: str, token: int, reason: str, message: str, wake_at: datetime, slot_key: str | None
    ) -> bool:
        """Wait (fenced) for a slot of ``slot_key`` — woken at once when one is released — or,
        without a key, for room in a rate window; tried again at ``wake_at`` in any case."""
        rows = await self._write(
            "park",
            id=run_id,
            token=token,
            reason=reason,
            slot_key=slot_key,
            wake_at=wake_at,
            detail=Jsonb({"reason": reason, "message": message}),
        )
        return bool(rows)

    # -- the dashboard ----------------------------------------------------------------------

    async def count_by_state(self) -> dict[str, int]:
        """Every run counted by its state."""
        return {r["state"]: r["n"] for r in await self._rows("count_by_state")}

    async def pending_approvals(self, limit: int) -> list[dict[str, Any]]:
        """The requests still waiting for a decision, oldest first, with their run's workflow
        and queue and ``seconds_left`` (None without an expiry)."""
        return await self._rows("pending_approvals", limit=limit)

    async def change_mark(self) -> int:
        """A number that moves whenever an event is written for any run."""
        row = (await self._rows("change_mark"))[0]
        return int(row["last_value"]) if row["is_called"] else 0

    async def forget_watchers(self) -> int:
        """Remove the watchers whose listening connection is gone; how many."""
        return len(await self._rows("forget_watchers"))

    async def redis_used(self, markers: list[str]) -> bool:
        """Record that this schema's queue used Redis under these data-loss markers (keys from
        ``Queue.lost_data``); whether it had used it before, so that a marker found gone means
        Redis lost its data, not that it is fresh."""
        rows = await self._rows("redis_used", markers=markers)
        return bool(rows[0]["used"])

    # -- retention ------------------------------------------------------------------------

    async def cutoff(self, age: float) -> datetime:
        """The database clock ``age`` seconds ago: runs finished before it are old enough."""
        return await self.db_now() - timedelta(seconds=age)

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

    async def execute(self, statement: str, params: Sequence[Any] = ()) -> list[dict[str, Any]]:
        """Run a statement of a caller's own (tests and examples only)."""
        async with self._conn() as conn:
            cur = await conn.execute(statement.encode(), params)
            return await cur.fetchall() if cur.description else []
