"""One stream per queue, read by one consumer group. An entry says only which run to take:
Postgres holds everything else, so a lost or repeated entry costs a claim, never a result.

Keys carry the queue in a hash tag (``outlast:{default}:runs``) so that one queue's keys live
in one Redis Cluster slot and queues spread over the cluster.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from outlast.errors import ServiceUnavailable
from outlast.store import redact

GROUP = "workers"


@dataclass(frozen=True)
class Delivery:
    """One stream entry handed to this consumer."""

    queue: str
    entry_id: str
    fields: dict[str, str]

    @property
    def run_id(self) -> str | None:
        run = self.fields.get("run")
        return run if run else None


class Queue:
    """Publishing, reading, reclaiming, acknowledging and dead-lettering run entries."""

    def __init__(self, url: str, prefix: str = "outlast", client: Any = None) -> None:
        self.url = url
        self.prefix = prefix
        self.redis: Any = client or aioredis.from_url(url, decode_responses=True)
        self._groups: set[str] = set()

    def stream(self, queue: str) -> str:
        return f"{self.prefix}:{{{queue}}}:runs"

    def dead_stream(self, queue: str) -> str:
        return f"{self.prefix}:{{{queue}}}:dead"

    def _unavailable(self, exc: Exception) -> ServiceUnavailable:
        return ServiceUnavailable(f"cannot reach Redis at {redact(self.url)}: {exc}")

    async def close(self) -> None:
        await self.redis.aclose()

    async def ping(self) -> None:
        try:
            await self.redis.ping()
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise self._unavailable(exc) from exc

    async def publish(self, queue: str, run_id: str) -> str:
        """Add the run's id to the queue's stream."""
        try:
            entry: str = await self.redis.xadd(self.stream(queue), {"run": run_id})
        except (RedisConnectionError, RedisTimeoutError, OSError) as exc:
            raise self._unavailable(exc) from exc
        return entry

    async def ensure_group(self, queue: str) -> None:
        """Create the consumer group from the stream's start (an entry added before the first
        worker came is still delivered)."""
        try:
            await self.redis.xgroup_create(self.stream(queue), GROUP, id="0", mkstream=True)
        except ResponseError as exc:
            if "BUSYGROUP" not in str(exc):
                raise
        self._groups.add(queue)

    async def read(
        self, queue: str, consumer: str, count: int, block_ms: int, own_pending: bool = False
    ) -> list[Delivery]:
        """New entries for this consumer, or (``own_pending``) those it was given and never
        acknowledged, as after a restart under the same name."""
        if count <= 0:
            return []
        try:
            reply = await self.redis.xreadgroup(
                GROUP,
                consumer,
                {self.stream(queue): "0" if own_pending else ">"},
                count=count,
                block=None if own_pending else block_ms,
            )
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            # The stream or group vanished (FLUSHALL, a restarted Redis): make it again; the
            # sweeper re-publishes what Postgres still says is due.
            await self.ensure_group(queue)
            return []
        out: list[Delivery] = []
        for _stream, entries in reply or []:
            for entry_id, fields in entries:
                if fields is not None:
                    out.append(Delivery(queue, entry_id, dict(fields)))
        return out

    async def reclaim(self, queue: str, consumer: str, min_idle_ms: int, count: int) -> list[Delivery]:
        """Take over entries another consumer left unacknowledged for longer than ``min_idle_ms``."""
        try:
            reply = await self.redis.xautoclaim(
                self.stream(queue), GROUP, consumer, min_idle_time=min_idle_ms, start_id="0-0", count=count
            )
        except ResponseError as exc:
            if "NOGROUP" not in str(exc):
                raise
            await self.ensure_group(queue)
            return []
        entries = reply[1]
        return [Delivery(queue, eid, dict(f)) for eid, f in entries if f is not None]

    async def ack(self, d: Delivery) -> None:
        """Acknowledge and delete the entry (one round trip); a vanished stream is fine."""
        with contextlib.suppress(ResponseError):
            async with self.redis.pipeline(transaction=False) as p:
                p.xack(self.stream(d.queue), GROUP, d.entry_id)
                p.xdel(self.stream(d.queue), d.entry_id)
                await p.execute()

    async def touch(self, held: list[Delivery], consumer: str) -> None:
        """Reset the idle time of entries still being served, so that nobody reclaims them."""
        by_queue: dict[str, list[str]] = {}
        for d in held:
            by_queue.setdefault(d.queue, []).append(d.entry_id)
        for queue, ids in by_queue.items():
            with contextlib.suppress(ResponseError):
                await self.redis.xclaim(self.stream(queue), GROUP, consumer, 0, ids, justid=True)

    async def dead_letter(self, d: Delivery, reason: str) -> None:
        """Move an entry that cannot be served to the dead-letter stream, with the reason."""
        async with self.redis.pipeline(transaction=False) as p:
            p.xadd(
                self.dead_stream(d.queue),
                {**d.fields, "_entry": d.entry_id, "_reason": reason},
                maxlen=10_000,
                approximate=True,
            )
            p.xack(self.stream(d.queue), GROUP, d.entry_id)
            p.xdel(self.stream(d.queue), d.entry_id)
            await p.execute()

    async def dead_letters(self, queue: str, count: int = 100) -> list[dict[str, str]]:
        entries = await self.redis.xrange(self.dead_stream(queue), count=count)
        return [dict(f) for _eid, f in entries]

    async def acquire_name(self, base: str, ttl: float) -> tuple[str, str]:
        """A stable consumer name ``base-N``: the lowest N no live worker holds. Stable names let
        a restarted worker re-read its own pending entries first."""
        token = uuid.uuid4().hex
        for n in range(10_000):
            name = f"{base}-{n}"
            if await self.redis.set(self._name_key(name), token, nx=True, px=int(ttl * 1000)):
                return name, token
        raise RedisError(f"no free consumer name for {base}")

    async def renew_name(self, name: str, token: str, ttl: float) -> None:
        await self.redis.set(self._name_key(name), token, xx=True, px=int(ttl * 1000))

    async def release_name(self, name: str, token: str) -> None:
        with contextlib.suppress(RedisError):
            if await self.redis.get(self._name_key(name)) == token:
                await self.redis.delete(self._name_key(name))

    def _name_key(self, name: str) -> str:
        return f"{self.prefix}:consumer:{name}"
