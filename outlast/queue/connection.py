"""This module connects the queue to Redis: one server or a Redis Cluster, from the URL; the names of its
keys; what counts as an outage (``ServiceUnavailable``, retried later)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import (
    ClusterDownError,
    ConnectionError as RedisConnectionError,
    OutOfMemoryError,
    ReadOnlyError,
    RedisClusterException,
    TimeoutError as RedisTimeoutError,
    TryAgainError,
)

from outlast._urls import redact
from outlast.errors import ServiceUnavailable
from outlast.queue.sentinel import is_sentinel_url, sentinel_client

# Errors that mean "Redis is not there (or not writable) right now": retry later. On a cluster,
# also a slot with no master for now (CLUSTERDOWN, TRYAGAIN while a slot moves, no node known);
# and a Redis full (``maxmemory`` with ``noeviction``), which refuses writes until it has room.
OUTAGE = (
    RedisConnectionError,
    RedisTimeoutError,
    ReadOnlyError,
    OutOfMemoryError,
    ClusterDownError,
    TryAgainError,
    RedisClusterException,
    OSError,
)

# URL schemes of a Redis Cluster, and the plain scheme the cluster client is given.
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}


def is_cluster_url(url: str) -> bool:
    """True for a ``redis+cluster://`` or ``rediss+cluster://`` URL."""
    return url.split("://", 1)[0] in CLUSTER_SCHEMES


class Connection:
    """The client, the key names and the outage wrapping every part of ``Queue`` shares.

    A ``client`` given must not decode responses (``decode_responses=False``): a decoding
    client fails a whole read on one entry that is not UTF-8."""

    def __init__(self, url: str, prefix: str = "outlast", client: Any = None, connections: int = 64) -> None:
        self.url = url
        self.prefix = prefix
        self.cluster = isinstance(client, RedisCluster) or (client is None and is_cluster_url(url))
        self.sentinel = client is None and is_sentinel_url(url)
        self._sentinels: Any = None  # the sentinels' own clients, closed with the queue
        # Past ``connections`` commands in flight, a command waits for one to end instead of
        # failing (redis-py's default pool raises at 100, which a worker with -c 128 reaches).
        # Standalone, a blocking pool does it; the cluster client's pools (one per node) and the
        # Sentinel client's raise instead of waiting, so a semaphore keeps them from filling up.
        self._gate: contextlib.AbstractAsyncContextManager[Any] = contextlib.nullcontext()
        if client is None and self.cluster:
            scheme, rest = url.split("://", 1)
            plain = f"{CLUSTER_SCHEMES[scheme]}://{rest}"
            client = RedisCluster.from_url(plain, max_connections=connections + 8)
        elif client is None and self.sentinel:
            client, self._sentinels = sentinel_client(url, max_connections=connections + 8)
        elif client is None:
            pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=connections, timeout=30)
            client = aioredis.Redis.from_pool(pool)  # the pool is closed with the client
        if self.cluster or self.sentinel:
            self._gate = asyncio.Semaphore(connections)
        self.redis: Any = client
        self._groups: set[str] = set()
        self._cursors: dict[str, str] = {}
        self._vanished = False  # NOGROUP seen since the last lost_data()

    def stream(self, queue: str, priority: str = "normal") -> str:
        """The stream of one priority level of the queue (all in the queue's cluster slot)."""
        base = f"{self.prefix}:{{{queue}}}:runs"
        return base if priority == "normal" else f"{base}:{priority}"

    def dead_stream(self, queue: str) -> str:
        return f"{self.prefix}:{{{queue}}}:dead"

    def alive_key(self, queue: str | None = None) -> str:
        """The data-loss marker: one for the whole Redis, or on a cluster one per queue (given),
        in the slot of the queue's stream (a slot's master can be lost alone)."""
        if self.cluster and queue is not None:
            return f"{self.prefix}:{{{queue}}}:alive"
        return f"{self.prefix}:alive"

    def _unavailable(self, exc: Exception) -> ServiceUnavailable:
        if isinstance(exc, OutOfMemoryError):
            return ServiceUnavailable(
                f"Redis at {redact(self.url)} is full and refuses writes ({exc}): raise its maxmemory "
                "or free memory (what Postgres recorded is published once it has room)"
            )
        return ServiceUnavailable(f"cannot reach Redis at {redact(self.url)}: {exc}")

    async def close(self) -> None:
        await self.redis.aclose()
        if self._sentinels is not None:
            await self._sentinels.aclose()

    async def ping(self) -> None:
        try:
            async with self._gate:
                await self.redis.ping()
        except OUTAGE as exc:
            raise self._unavailable(exc) from exc

    async def refusing_writes(self) -> str | None:
        """Why Redis refuses writes now, or None: full (``maxmemory`` reached with ``noeviction``;
        not asked of a cluster, whose nodes each have their own)."""
        if self.cluster:
            return None
        try:
            async with self._gate:
                memory = await self.redis.info("memory")
        except OUTAGE as exc:
            raise self._unavailable(exc) from exc
        limit, used = int(memory.get("maxmemory", 0)), int(memory.get("used_memory", 0))
        if limit and used >= limit and memory.get("maxmemory_policy") == "noeviction":
            return (
                f"Redis at {redact(self.url)} is full ({used} of maxmemory {limit} bytes, noeviction) "
                "and refuses writes: raise its maxmemory or free memory"
            )
        return None

    async def script(self, source: str, keys: list[str], *args: str) -> Any:
        """Run a Lua script of this package's own (``rate.py``) through the gate; an outage is
        ``ServiceUnavailable``."""
        try:
            async with self._gate:
                return await self.redis.eval(source, len(keys), *keys, *args)
        except OUTAGE as exc:
            raise self._unavailable(exc) from exc

    @staticmethod
    def consumer_name(base: str) -> str:
        """A consumer name of this process's own, ``base-pid-xxxx``. Nothing is held in Redis, so
        a flushed Redis cannot give one name to two workers. A restarted worker has a new name:
        what its predecessor left pending is reclaimed once idle; ``forget_consumers`` deletes
        the name once it is idle."""
        return f"{base}-{os.getpid()}-{secrets.token_hex(2)}"
