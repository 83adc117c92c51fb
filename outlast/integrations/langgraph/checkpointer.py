"""``OutlastCheckpointer`` keeps LangGraph's checkpoints in outlast's Postgres (a ``BaseCheckpointSaver``).

An existing LangGraph app uses it as it would any checkpointer::

    with OutlastCheckpointer("postgresql://...") as saver:
        graph = builder.compile(checkpointer=saver)
        graph.invoke(inputs, {"configurable": {"thread_id": "t1"}})

Its tables live in a schema of their own (``outlast_langgraph`` unless told), created on first use
(``_sql.SETUP``, idempotent, under an advisory lock): a checkpointer's writes are not a run's writes
(no lease, no fencing token), so nothing of outlast's store applies to them, and an app that only
checkpoints needs neither outlast's migrations nor its schema's version. Channel values are written
once per version (``put`` stores only the channels that changed) with the saver's ``serde``.

Each operation is written once, as a *plan*: a generator that yields the statements to run, in one
transaction, and is sent back each one's rows. The sync methods drive a plan on a
``ConnectionPool``, the async ones on an ``AsyncConnectionPool``; neither holds any other logic.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Generator, Iterator, Sequence
from types import TracebackType
from typing import Any, LiteralString, TypeVar, cast

from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.base import (
    WRITES_IDX_MAP,
    BaseCheckpointSaver,
    ChannelVersions,
    Checkpoint,
    CheckpointMetadata,
    CheckpointTuple,
    get_checkpoint_id,
    get_serializable_checkpoint_metadata,
)
from langgraph.checkpoint.serde.base import SerializerProtocol
from psycopg import sql
from psycopg.types.json import Jsonb
from psycopg_pool import AsyncConnectionPool, ConnectionPool

from outlast.integrations.langgraph import _sql

__all__ = ["OutlastCheckpointer"]

T = TypeVar("T")
Rows = list[tuple[Any, ...]]
Statement = tuple[sql.Composed, Any]
Plan = Generator[Statement, Rows, T]


def _config(thread_id: str, ns: str, checkpoint_id: str) -> RunnableConfig:
    return {"configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint_id}}


class OutlastCheckpointer(BaseCheckpointSaver[int]):
    """A LangGraph checkpointer that keeps threads, checkpoints and pending writes in Postgres, in
    the schema ``schema`` of the database at ``database_url`` (outlast's own database, or any)."""

    def __init__(
        self,
        database_url: str,
        *,
        schema: str = "outlast_langgraph",
        serde: SerializerProtocol | None = None,
        max_connections: int = 4,
    ) -> None:
        super().__init__(serde=serde)
        self.database_url = database_url
        self.schema = schema
        self.max_connections = max_connections
        self._ready = False  # the schema's tables exist (SETUP ran once in this process)
        self._pool: ConnectionPool | None = None
        self._apool: AsyncConnectionPool | None = None
        self._lock = threading.Lock()
        self._alock = asyncio.Lock()

    def _q(self, template: LiteralString) -> sql.Composed:
        return sql.SQL(template).format(s=sql.Identifier(self.schema))

    # -- the plans: each operation once ---------------------------------------------------------

    def _plan_get(self, config: RunnableConfig) -> Plan[CheckpointTuple | None]:
        conf = config["configurable"]
        where = ["c.thread_id = %s", "c.checkpoint_ns = %s"]
        params: list[Any] = [conf["thread_id"], conf.get("checkpoint_ns", "")]
        if (checkpoint_id := get_checkpoint_id(config)) is not None:
            where.append("c.checkpoint_id = %s")
            params.append(checkpoint_id)
        rows = yield self._select(where, params, limit=1)
        return self._tuple(rows[0]) if rows else None

    def _plan_list(
        self,
        config: RunnableConfig | None,
        filter: dict[str, Any] | None,
        before: RunnableConfig | None,
        limit: int | None,
    ) -> Plan[list[CheckpointTuple]]:
        where: list[LiteralString] = []
        params: list[Any] = []
        conf = config["configurable"] if config else {}
        if conf.get("thread_id") is not None:
            where.append("c.thread_id = %s")
            params.append(conf["thread_id"])
        if conf.get("checkpoint_ns") is not None:
            where.append("c.checkpoint_ns = %s")
            params.append(conf["checkpoint_ns"])
        if config and (checkpoint_id := get_checkpoint_id(config)) is not None:
            where.append("c.checkpoint_id = %s")
            params.append(checkpoint_id)
        if filter:
            where.append("c.metadata @> %s")
            params.append(Jsonb(filter))
        if before and (before_id := get_checkpoint_id(before)) is not None:
            where.append("c.checkpoint_id < %s")
            params.append(before_id)
        rows = yield self._select(where, params, limit=limit)
        return [self._tuple(row) for row in rows]

    def _plan_put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> Plan[RunnableConfig]:
        conf = config["configurable"]
        thread_id, ns = conf["thread_id"], conf.get("checkpoint_ns", "")
        values = checkpoint["channel_values"]
        for channel, version in new_versions.items():
            typed = self.serde.dumps_typed(values[channel]) if channel in values else ("empty", b"")
            yield self._q(_sql.PUT_BLOB), (thread_id, ns, channel, str(version), *typed)
        body = {k: v for k, v in checkpoint.items() if k != "channel_values"}
        versions = {channel: str(v) for channel, v in checkpoint["channel_versions"].items()}
        md = get_serializable_checkpoint_metadata(config, metadata)
        parent = get_checkpoint_id(config)
        yield (
            self._q(_sql.PUT_CHECKPOINT),
            (thread_id, ns, checkpoint["id"], parent, Jsonb(body), Jsonb(versions), Jsonb(md)),
        )
        return {
            "configurable": {"thread_id": thread_id, "checkpoint_ns": ns, "checkpoint_id": checkpoint["id"]}
        }

    def _plan_put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str
    ) -> Plan[None]:
        conf = config["configurable"]
        key = (conf["thread_id"], conf.get("checkpoint_ns", ""), conf["checkpoint_id"], task_id)
        for idx, (channel, value) in enumerate(writes):
            typed = self.serde.dumps_typed(value)
            yield (
                self._q(_sql.PUT_WRITE),
                (*key, WRITES_IDX_MAP.get(channel, idx), channel, *typed, task_path),
            )

    def _plan_delete(self, thread_ids: Sequence[str]) -> Plan[None]:
        for statement in _sql.DELETE_THREADS:
            yield self._q(statement), {"threads": list(thread_ids)}

    def _plan_delete_runs(self, run_ids: Sequence[str]) -> Plan[None]:
        threads = yield self._q(_sql.DELETE_RUNS), {"runs": list(run_ids)}
        yield from self._sweep([row[0] for row in threads])

    def _plan_copy(self, source: str, target: str) -> Plan[None]:
        for statement in _sql.COPY_THREAD:
            yield self._q(statement), {"source": source, "target": target}

    def _plan_prune(self, thread_ids: Sequence[str], strategy: str) -> Plan[None]:
        if strategy == "delete":
            yield from self._plan_delete(thread_ids)
        elif strategy == "keep_latest":
            yield self._q(_sql.KEEP_LATEST), {"threads": list(thread_ids)}
            yield from self._sweep(thread_ids)
        else:
            raise ValueError(f"unknown prune strategy {strategy!r}: 'keep_latest' or 'delete'")

    def _sweep(self, thread_ids: Sequence[str]) -> Plan[None]:
        for statement in _sql.SWEEP:
            yield self._q(statement), {"threads": list(thread_ids)}

    def _select(self, where: list[LiteralString], params: list[Any], limit: int | None) -> Statement:
        query = sql.SQL(_sql.SELECT).format(s=sql.Identifier(self.schema))
        if where:
            query += sql.SQL(" WHERE ") + sql.SQL(" AND ").join(sql.SQL(w) for w in where)
        query += sql.SQL(" ORDER BY c.checkpoint_id DESC")
        if limit is not None:
            query += sql.SQL(" LIMIT %s")
            params = [*params, limit]
        return query, params

    def _tuple(self, row: tuple[Any, ...]) -> CheckpointTuple:
        thread_id, ns, checkpoint_id, parent_id, body, metadata = row[:6]
        b_channels, b_types, b_blobs, w_tasks, w_channels, w_types, w_blobs = row[6:]
        values = {
            channel: self.serde.loads_typed((kind, blob))
            for channel, kind, blob in zip(b_channels or (), b_types or (), b_blobs or (), strict=True)
            if kind != "empty"
        }
        writes = [
            (task, channel, self.serde.loads_typed((kind, blob)))
            for task, channel, kind, blob in zip(
                w_tasks or (), w_channels or (), w_types or (), w_blobs or (), strict=True
            )
        ]
        return CheckpointTuple(
            config=_config(thread_id, ns, checkpoint_id),
            checkpoint=cast(Checkpoint, {**body, "channel_values": values}),
            metadata=metadata,
            parent_config=_config(thread_id, ns, parent_id) if parent_id else None,
            pending_writes=writes,
        )

    # -- the two drivers --------------------------------------------------------------------------

    def _run(self, plan: Plan[T]) -> T:
        """Run ``plan`` in one transaction on the sync pool."""
        with self._lock:
            if self._pool is None:
                self._pool = ConnectionPool(self.database_url, max_size=self.max_connections, open=False)
                self._pool.open()
        with self._pool.connection() as conn:
            if not self._ready:
                conn.execute(self._q(_sql.SETUP))
                self._ready = True
            try:
                statement = next(plan)
                while True:
                    cursor = conn.execute(*statement)
                    statement = plan.send(cursor.fetchall() if cursor.description else [])
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    async def _arun(self, plan: Plan[T]) -> T:
        """Run ``plan`` in one transaction on the async pool."""
        async with self._alock:
            if self._apool is None:
                pool = AsyncConnectionPool(self.database_url, max_size=self.max_connections, open=False)
                await pool.open()
                self._apool = pool
        async with self._apool.connection() as conn:
            if not self._ready:
                await conn.execute(self._q(_sql.SETUP))
                self._ready = True
            try:
                statement = next(plan)
                while True:
                    cursor = await conn.execute(*statement)
                    statement = plan.send(await cursor.fetchall() if cursor.description else [])
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]

    def close(self) -> None:
        """Close the sync pool (the async one is closed by ``aclose``)."""
        if self._pool is not None:
            self._pool.close()
            self._pool = None

    async def aclose(self) -> None:
        """Close both pools."""
        self.close()
        if self._apool is not None:
            await self._apool.close()
            self._apool = None

    def __enter__(self) -> OutlastCheckpointer:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    async def __aenter__(self) -> OutlastCheckpointer:
        return self

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    # -- BaseCheckpointSaver: sync ------------------------------------------------------------------

    def get_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return self._run(self._plan_get(config))

    def list(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> Iterator[CheckpointTuple]:
        yield from self._run(self._plan_list(config, filter, before, limit))

    def put(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return self._run(self._plan_put(config, checkpoint, metadata, new_versions))

    def put_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        self._run(self._plan_put_writes(config, writes, task_id, task_path))

    def delete_thread(self, thread_id: str) -> None:
        self._run(self._plan_delete([thread_id]))

    def delete_for_runs(self, run_ids: Sequence[str]) -> None:
        self._run(self._plan_delete_runs(run_ids))

    def copy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        self._run(self._plan_copy(source_thread_id, target_thread_id))

    def prune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        """Keep each namespace's newest checkpoint of each thread (``keep_latest``), or none
        (``delete``). Not aware of ``DeltaChannel``: a graph that uses one keeps its threads
        whole (its values are rebuilt from the checkpoints that ``keep_latest`` drops)."""
        self._run(self._plan_prune(thread_ids, strategy))

    # -- BaseCheckpointSaver: async -----------------------------------------------------------------

    async def aget_tuple(self, config: RunnableConfig) -> CheckpointTuple | None:
        return await self._arun(self._plan_get(config))

    async def alist(
        self,
        config: RunnableConfig | None,
        *,
        filter: dict[str, Any] | None = None,
        before: RunnableConfig | None = None,
        limit: int | None = None,
    ) -> AsyncIterator[CheckpointTuple]:
        for found in await self._arun(self._plan_list(config, filter, before, limit)):
            yield found

    async def aput(
        self,
        config: RunnableConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: ChannelVersions,
    ) -> RunnableConfig:
        return await self._arun(self._plan_put(config, checkpoint, metadata, new_versions))

    async def aput_writes(
        self, config: RunnableConfig, writes: Sequence[tuple[str, Any]], task_id: str, task_path: str = ""
    ) -> None:
        await self._arun(self._plan_put_writes(config, writes, task_id, task_path))

    async def adelete_thread(self, thread_id: str) -> None:
        await self._arun(self._plan_delete([thread_id]))

    async def adelete_for_runs(self, run_ids: Sequence[str]) -> None:
        await self._arun(self._plan_delete_runs(run_ids))

    async def acopy_thread(self, source_thread_id: str, target_thread_id: str) -> None:
        await self._arun(self._plan_copy(source_thread_id, target_thread_id))

    async def aprune(self, thread_ids: Sequence[str], *, strategy: str = "keep_latest") -> None:
        await self._arun(self._plan_prune(thread_ids, strategy))
