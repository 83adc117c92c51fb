"""One stream per queue, read by one consumer group. An entry says only which run to take:
Postgres holds everything else, so a lost or repeated entry costs a claim, never a result.

Keys carry the queue in a hash tag (``outlast:{default}:runs``) so that one queue's keys live
in one Redis Cluster slot and queues spread over the cluster. A ``redis+cluster://host:port``
URL (``rediss+cluster://`` with TLS; any one node: the client finds the rest) speaks to a Redis
Cluster. No command there spans two queues' slots: a pipeline may, and the cluster client splits it
per node; the data-loss marker is then one per queue (``outlast:{default}:alive``), in the slot of
the stream it vouches for.

The client speaks bytes (``decode_responses=False``) and fields are decoded here, one entry at
a time: an entry nobody can serve (not UTF-8, no run id, a run id no producer makes) comes back
as a ``Delivery`` that names its ``problem``, instead of failing the whole batch it came in.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import unicodedata
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import (
    ClusterDownError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from outlast.errors import ServiceUnavailable
from outlast.store import redact

GROUP = "workers"
MAX_RUN_ID = 200

# A queue's priority levels, highest first: one stream each (``normal`` is the queue's stream of
# old, ``outlast:{default}:runs``; the others ``outlast:{default}:runs:high``, ``...:low``).
LEVELS = ("high", "normal", "low")

# Errors that mean "Redis is not there (or not writable) right now": retry later. On a cluster,
# also a slot with no master for now (CLUSTERDOWN, TRYAGAIN while a slot moves, no node known).
_OUTAGE = (
    RedisConnectionError,
    RedisTimeoutError,
    ReadOnlyError,
    ClusterDownError,
    TryAgainError,
    RedisClusterException,
    OSError,
)

# URL schemes of a Redis Cluster, and the plain scheme the cluster client is given.
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

# Delete the group's consumers that hold no pending entry and were idle longer than ARGV[2] ms.
# One script, so that no entry can be delivered to a consumer between the look and the delete
# (XGROUP DELCONSUMER drops its pending entries, which nobody would reclaim then).
_FORGET = """
local consumers = redis.pcall('XINFO', 'CONSUMERS', KEYS[1], ARGV[1])
if consumers['err'] then return {} end
local gone = {}
for _, c in ipairs(consumers) do
  local info = {}
  for i = 1, #c, 2 do info[c[i]] = c[i + 1] end
  if info['pending'] == 0 and info['idle'] > tonumber(ARGV[2]) then
    redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], info['name'])
    table.insert(gone, info['name'])
  end
end
return gone
"""


@dataclass(frozen=True)
class Delivery:
    """One stream entry handed to this consumer. ``problem`` says why it cannot be served (then
    ``run_id`` is None and the entry belongs in the dead-letter stream)."""

    queue: str
    entry_id: str
    fields: dict[str, str]
    problem: str | None = None
    # The entry as stored, kept only when it is not UTF-8 (``fields`` then holds escapes).
    raw: tuple[tuple[bytes, bytes], ...] = field(default=(), repr=False, compare=False)
    priority: str = "normal"  # the level whose stream it came from

    @property
    def run_id(self) -> str | None:
        if self.problem is not None:
            return None
        return self.fields.get("run") or None


@dataclass(frozen=True)
class QueueFigures:
    """What ``Queue.figures`` found for one queue."""

    queue: str
    length: int  # entries in the stream: waiting to be read, or pending
    pending: int  # delivered to a worker, not yet acknowledged
    oldest_pending_age: float | None  # seconds since the oldest pending entry was added
    dead_letters: int


def run_id_problem(run_id: str | None) -> str | None:
    """Why a stream entry's run id cannot name a run, or None when it can."""
    if run_id is None:
        return "no 'run' field"
    if not run_id:
        return "empty run id"
    if len(run_id) > MAX_RUN_ID:
        return f"run id {run_id[:40]!r}... is longer than {MAX_RUN_ID} characters"
    if any(unicodedata.category(c) == "Cc" for c in run_id):
        return f"run id {run_id[:60]!r} has NUL or control characters"
    return None


def _bytes(value: bytes | str | int | float) -> bytes:
    if isinstance(value, bytes):
        return value
    return str(value).encode()


def _text(value: bytes | str) -> str:
    return value.decode(errors="backslashreplace") if isinstance(value, bytes) else value


def _delivery(
    queue: str, entry_id: bytes | str, fields: dict[Any, Any], priority: str = "normal"
) -> Delivery:
    raw = tuple((_bytes(k), _bytes(v)) for k, v in fields.items())
    try:
        decoded = {k.decode(): v.decode() for k, v in raw}
    except UnicodeDecodeError:
        loose = {_text(k): _text(v) for k, v in raw}
        return Delivery(queue, _text(entry_id), loose, "entry is not UTF-8", raw, priority)
    return Delivery(queue, _text(entry_id), decoded, run_id_problem(decoded.get("run")), priority=priority)


def is_cluster_url(url: str) -> bool:
    """True for a ``redis+cluster://`` or ``rediss+cluster://`` URL."""
    return url.split("://", 1)[0] in CLUSTER_SCHEMES


class Queue:
    """Publishing, reading, reclaiming, acknowledging and dead-lettering run entries.

    A ``client`` given must not decode responses (``decode_responses=False``): a decoding
    client fails a whole read on one entry that is not UTF-8."""

    def __init__(self, url: str, prefix: str = "outlast", client: Any = None, connections: int = 64) -> None:
        self.url = url
        self.prefix = prefix
        self.cluster = isinstance(client, RedisCluster) or (client is None and is_cluster_url(url))
        # Past ``connections`` commands in flight, a command waits for one to end instead of
        # failing (redis-py's default pool raises at 100, which a worker with -c 128 reaches).
        # Standalone, a blocking pool does it; the cluster client's pools (one per node) raise
        # instead of waiting, so a semaphore keeps them from ever filling up.
        self._gate: contextlib.AbstractAsyncContextManager[Any] = contextlib.nullcontext()
        if client is None and self.cluster:
            scheme, rest = url.split("://", 1)
            plain = f"{CLUSTER_SCHEMES[scheme]}://{rest}"
            client = RedisCluster.from_url(plain, max_connections=connections + 8)
        elif client is None:
            pool = aioredis.BlockingConnectionPool.from_url(url, max_connections=connections, timeout=30)
            client = aioredis.Redis.from_pool(pool)  # the pool is closed with the client
        if self.cluster:
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
        return ServiceUnavailable(f"cannot reach Redis at {redact(self.url)}: {exc}")

    async def close(self) -> None:
        await self.redis.aclose()

    async def ping(self) -> None:
        try:
            async with self._gate:
                await self.redis.ping()
        except _OUTAGE as exc:
            raise self._unavailable(exc) from exc

    async def publish(self, queue: str, run_id: str, hops: int = 0, priority: str = "normal") -> str:
        """Add the run's id to the queue's stream (and the marker ``lost_data`` looks for, in the
        same round trip: a Redis that has entries is not mistaken for one that lost them).
        ``hops``: how many workers handed the run back already (a rolling deploy)."""
        fields = {"run": run_id, "hops": str(hops)} if hops else {"run": run_id}
        try:
            async with self._gate, self.redis.pipeline(transaction=False) as p:
                p.set(self.alive_key(queue), b"1", nx=True)
                p.xadd(self.stream(queue, priority), fields)
                _marked, entry = await p.execute()
        except _OUTAGE as exc:
            raise self._unavailable(exc) from exc
        return _text(entry)

    async def publish_many(self, entries: list[tuple[str, str, str]]) -> None:
        """Add many run ids, each ``(queue, run id, priority)``, in one pipelined round trip."""
        if len(entries) <= 1:
            for queue, run_id, priority in entries:
                await self.publish(queue, run_id, priority=priority)
            return
        try:
            async with self._gate, self.redis.pipeline(transaction=False) as p:
                for key in dict.fromkeys(self.alive_key(q) for q, _, _ in entries):
                    p.set(key, b"1", nx=True)
                for queue, run_id, priority in entries:
                    p.xadd(self.stream(queue, priority), {"run": run_id})
                await p.execute()
        except _OUTAGE as exc:
            raise self._unavailable(exc) from exc

    async def ensure_group(self, queue: str) -> None:
        """Create the consumer group of each level's stream from its start (an entry added before
        the first worker came is still delivered)."""
        for level in LEVELS:
            try:
                async with self._gate:
                    await self.redis.xgroup_create(self.stream(queue, level), GROUP, id="0", mkstream=True)
            except _OUTAGE as exc:
                raise self._unavailable(exc) from exc
            except ResponseError as exc:
                if "BUSYGROUP" not in str(exc):
                    raise
        self._groups.add(queue)

    async def _vanished_group(self, queue: str, exc: ResponseError) -> None:
        """The stream or group vanished (FLUSHALL, a restarted Redis): note it for
        ``lost_data`` and make the group again."""
        if "NOGROUP" not in str(exc):
            raise exc
        self._vanished = True
        for level in LEVELS:
            self._cursors.pop(self.stream(queue, level), None)
        await self.ensure_group(queue)

    async def read(
        self,
        queue: str,
        consumer: str,
        count: int,
        block_ms: int | None,
        own_pending: bool = False,
        priority: str = "normal",
    ) -> list[Delivery]:
        """New entries of one level for this consumer (waiting up to ``block_ms`` for one; None:
        not at all), or (``own_pending``) those it was given and never acknowledged. Malformed
        entries come back with a ``problem``; entries deleted while pending are acknowledged and
        left out."""
        if count <= 0:
            return []
        return await self._read(queue, consumer, {priority: "0" if own_pending else ">"}, count, block_ms)

    async def read_any(self, queue: str, consumer: str, block_ms: int) -> list[Delivery]:
        """Wait up to ``block_ms`` for a new entry of any level: one read, up to one entry a level."""
        return await self._read(queue, consumer, dict.fromkeys(LEVELS, ">"), 1, block_ms)

    async def _read(
        self, queue: str, consumer: str, levels: dict[str, str], count: int, block_ms: int | None
    ) -> list[Delivery]:
        streams = {self.stream(queue, level): start for level, start in levels.items()}
        level_of = {self.stream(queue, level): level for level in levels}
        try:
            async with self._gate:
                reply = await self.redis.xreadgroup(
                    GROUP, consumer, streams, count=count, block=None if "0" in levels.values() else block_ms
                )
        except _OUTAGE as exc:
            raise self._unavailable(exc) from exc
        except ResponseError as exc:
            if "UNBLOCKED" in str(exc):  # the node became a replica (a failover): read again
                return []
            await self._vanished_group(queue, exc)
            return []
        out: list[Delivery] = []
        for name, entries in reply or []:
            stream = _text(name)
            deleted: list[bytes | str] = []
            for entry_id, fields in entries:
                if entry_id is None:
                    continue
                if fields:
                    out.append(_delivery(queue, entry_id, fields, level_of[stream]))
                else:  # no entry has no field: it was deleted while pending
                    deleted.append(entry_id)
            await self._forget_deleted(stream, deleted)
        return out

    async def reclaim(
        self, queue: str, consumer: str, min_idle_ms: int, count: int, priority: str = "normal"
    ) -> list[Delivery]:
        """Take over entries of one level another consumer left unacknowledged for longer than
        ``min_idle_ms``. Successive calls walk the whole pending list (XAUTOCLAIM's cursor), not
        only its head."""
        if count <= 0:
            return []
        stream = self.stream(queue, priority)
        try:
            async with self._gate:
                reply = await self.redis.xautoclaim(
                    stream,
                    GROUP,
                    consumer,
                    min_idle_time=min_idle_ms,
                    start_id=self._cursors.get(stream, "0-0"),
                    count=count,
                )
        except _OUTAGE as exc:
            raise self._unavailable(exc) from exc
        except ResponseError as exc:
            await self._vanished_group(queue, exc)
            return []
        self._cursors[stream] = _text(reply[0])
        out: list[Delivery] = []
        deleted: list[bytes | str] = list(reply[2]) if len(reply) > 2 else []  # Redis >= 7
        for entry_id, fields in reply[1]:
            if entry_id is None:
                continue
            if fields:
                out.append(_delivery(queue, entry_id, fields, priority))
            else:
                deleted.append(entry_id)
        await self._forget_deleted(stream, deleted)
        return out

    async def _forget_deleted(self, stream: str, ids: list[bytes | str]) -> None:
        """Acknowledge pending ids whose entry is gone, so that they stop coming back."""
        if ids:
            with contextlib.suppress(ResponseError, *_OUTAGE):  # they come back; tried again then
                async with self._gate:
                    await self.redis.xack(stream, GROUP, *ids)

    async def ack(self, d: Delivery) -> None:
        """Acknowledge and delete the entry (one round trip); a vanished stream is fine.
        Raises ``ServiceUnavailable`` when Redis cannot be reached: retry it."""
        await self.ack_many([d])

    async def ack_many(self, deliveries: Iterable[Delivery]) -> None:
        """Acknowledge and delete many entries in one round trip (XACK + XDEL per stream).
        Raises ``ServiceUnavailable`` when Redis cannot be reached: retry it."""
        by_stream: dict[str, list[str]] = {}
        for d in deliveries:
            by_stream.setdefault(self.stream(d.queue, d.priority), []).append(d.entry_id)
        if not by_stream:
            return
        try:
            async with self._gate, self.redis.pipeline(transaction=False) as p:
                for stream, ids in by_stream.items():
                    p.xack(stream, GROUP, *ids)
                    p.xdel(stream, *ids)
                await p.execute()
        except _OUTAGE as exc:
            raise self._unavailable(exc) from exc
        except ResponseError:
            pass  # a vanished stream or group: nothing is left to acknowledge

    async def touch(self, held: list[Delivery], consumer: str) -> None:
        """Reset the idle time of entries still being served, so that nobody reclaims them.
        Raises ``ServiceUnavailable`` when Redis cannot be reached."""
        by_stream: dict[str, list[str]] = {}
        for d in held:
            by_stream.setdefault(self.stream(d.queue, d.priority), []).append(d.entry_id)
        for stream, ids in by_stream.items():
            try:
                async with self._gate:
                    await self.redis.xclaim(stream, GROUP, consumer, 0, ids, justid=True)
            except _OUTAGE as exc:
                raise self._unavailable(exc) from exc
            except ResponseError as exc:
                if "NOGROUP" in str(exc):
                    self._vanished = True

    async def dead_letter(self, d: Delivery, reason: str) -> None:
        """Move an entry that cannot be served to the dead-letter stream, with the reason (and,
        for an entry that is not UTF-8, its raw fields written out as Python bytes literals)."""
        body: dict[str, str] = {**d.fields, "_entry": d.entry_id, "_reason": reason}
        if d.raw:
            body["_raw"] = repr(dict(d.raw))
        try:
            async with self._gate, self.redis.pipeline(transaction=False) as p:
                p.xadd(self.dead_stream(d.queue), body, maxlen=10_000, approximate=True)
                p.xack(self.stream(d.queue, d.priority), GROUP, d.entry_id)
                p.xdel(self.stream(d.queue, d.priority), d.entry_id)
                await p.execute()
        except _OUTAGE as exc:
            raise self._unavailable(exc) from exc

    async def dead_letters(
        self, queue: str, count: int = 100, entry_id: str | None = None
    ) -> list[dict[str, str]]:
        """The queue's dead letters, oldest first (or only the one ``entry_id``): each entry's
        fields and its own id (``_id``)."""
        first, last = (entry_id, entry_id) if entry_id else ("-", "+")
        try:
            async with self._gate:
                entries = await self.redis.xrange(self.dead_stream(queue), first, last, count=count)
        except _OUTAGE as exc:
            raise self._unavailable(exc) from exc
        return [{**{_text(k): _text(v) for k, v in f.items()}, "_id": _text(eid)} for eid, f in entries]

    async def drop_dead_letter(self, queue: str, entry_id: str) -> bool:
        """Delete one dead letter; False if there was none by that id."""
        try:
            async with self._gate:
                return bool(await self.redis.xdel(self.dead_stream(queue), entry_id))
        except _OUTAGE as exc:
            raise self._unavailable(exc) from exc

    async def figures(self, queue: str) -> QueueFigures:
        """The queue's streams (every level) as Redis sees them: their length, the entries
        delivered and not acknowledged, the age of the oldest of those (from its id, by the Redis
        clock: TIME, which a cluster pipeline refuses, is asked apart) and the dead letters."""
        age = None
        try:
            async with self._gate:
                async with self.redis.pipeline(transaction=False) as p:
                    for level in LEVELS:
                        p.xlen(self.stream(queue, level))
                        p.xpending(self.stream(queue, level), GROUP)
                    p.xlen(self.dead_stream(queue))
                    *per_level, dead = await p.execute(raise_on_error=False)
                lengths, pendings = per_level[0::2], per_level[1::2]
                # no group yet: nothing was ever read
                found = [q for q in pendings if not isinstance(q, ResponseError) and q["pending"]]
                oldest = min(
                    (int(_text(q["min"]).split("-")[0]) for q in found if q["min"] is not None), default=None
                )
                if oldest is not None:
                    secs, micros = await self.redis.time()
                    age = max(secs + micros / 1e6 - oldest / 1000, 0.0)
        except _OUTAGE as exc:
            raise self._unavailable(exc) from exc
        pending = sum(int(q["pending"]) for q in found)
        return QueueFigures(queue, sum(int(n) for n in lengths), pending, age, int(dead))

    async def backlog(self, queue: str) -> tuple[int, float]:
        """The queue's streams' length (every level), and the age in seconds (by Redis's clock)
        of the oldest entry not yet delivered to any worker (0 when every entry was delivered).
        For the metrics gauges, every few seconds: up to three round trips a level, each on one key."""
        length, age = 0, 0.0
        for level in LEVELS:
            n, a = await self._backlog(self.stream(queue, level))
            length, age = length + n, max(age, a)
        return length, age

    async def _backlog(self, stream: str) -> tuple[int, float]:
        try:
            async with self._gate:
                length = await self.redis.xlen(stream)
                groups = await self.redis.xinfo_groups(stream) if length else []
                last = next((g["last-delivered-id"] for g in groups if _text(g["name"]) == GROUP), b"0-0")
                first = await self.redis.xrange(stream, min=b"(" + _bytes(last), count=1) if length else []
                seconds, micros = await self.redis.time() if first else (0, 0)
        except _OUTAGE as exc:
            raise self._unavailable(exc) from exc
        if not first:
            return int(length), 0.0
        added_ms = int(_text(first[0][0]).split("-")[0])
        return int(length), max(0.0, seconds + micros / 1e6 - added_ms / 1000)

    async def lost_data(self) -> list[str]:
        """The data-loss markers found gone since the last call (each once), by key; empty when
        nothing was lost. A marker is gone when its key is (then set again), and all are when a
        read found its stream or group gone. A fresh Redis answers its markers the first time too:
        the caller tells it from one that lost data by what Postgres recorded
        (``Store.redis_used``), then re-publishes what Postgres says is due. One SET NX: cheap each
        second (on a cluster, one per queue this worker serves, pipelined: each node answers for
        its own)."""
        keys = [self.alive_key(q) for q in sorted(self._groups)] if self.cluster else [self.alive_key()]
        try:
            async with self._gate:
                async with self.redis.pipeline(transaction=False) as p:
                    for key in keys:
                        p.set(key, b"1", nx=True)
                    fresh = await p.execute() if keys else []
        except _OUTAGE as exc:
            raise self._unavailable(exc) from exc
        gone = keys if self._vanished else [k for k, new in zip(keys, fresh, strict=True) if new]
        self._vanished = False
        return gone

    async def forget_consumers(self, queue: str, idle_ms: int) -> list[str]:
        """Delete the queue's consumers that hold no pending entry and were idle longer than
        ``idle_ms``, so that per-process names of workers gone for good do not pile up. Returns
        the names deleted. Harmless to a live worker: it holds nothing, and its next read makes
        its consumer again. Needs Lua (EVAL)."""
        gone: list[str] = []
        for level in LEVELS:
            try:
                async with self._gate:
                    names = await self.redis.eval(_FORGET, 1, self.stream(queue, level), GROUP, int(idle_ms))
            except _OUTAGE as exc:
                raise self._unavailable(exc) from exc
            gone += [_text(n) for n in names or [] if _text(n) not in gone]
        return gone

    async def script(self, source: str, keys: list[str], *args: str) -> Any:
        """Run a Lua script of this package's own (``rate.py``) through the gate; an outage is
        ``ServiceUnavailable``."""
        try:
            async with self._gate:
                return await self.redis.eval(source, len(keys), *keys, *args)
        except _OUTAGE as exc:
            raise self._unavailable(exc) from exc

    @staticmethod
    def consumer_name(base: str) -> str:
        """A consumer name of this process's own, ``base-pid-xxxx``. Nothing is held in Redis, so
        a flushed Redis cannot give one name to two workers. A restarted worker has a new name:
        what its predecessor left pending is reclaimed once idle; ``forget_consumers`` deletes
        the name once it is idle."""
        return f"{base}-{os.getpid()}-{secrets.token_hex(2)}"
