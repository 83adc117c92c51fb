"""The consumer group's side of the streams covers making the group, reading and reclaiming entries,
acknowledging them, keeping held ones from being reclaimed, forgetting consumers gone."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any

from redis.exceptions import ResponseError

from outlast.queue.connection import OUTAGE, Connection
from outlast.queue.entries import GROUP, LEVELS, Delivery, decode_entry, to_text

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


class ConsumerGroup(Connection):
    """``ConsumerGroup`` reads, reclaims and acknowledges run entries as one consumer of the group."""

    async def ensure_group(self, queue: str) -> None:
        """Create the consumer group of each level's stream from its start (an entry added before
        the first worker came is still delivered)."""
        for level in LEVELS:
            try:
                async with self._gate:
                    await self.redis.xgroup_create(self.stream(queue, level), GROUP, id="0", mkstream=True)
            except OUTAGE as exc:
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

    async def read_levels(
        self, queue: str, consumer: str, counts: dict[str, int]
    ) -> dict[str, list[Delivery]]:
        """New entries of several levels, up to ``counts[level]`` of each, none waited for: each
        level's ``read``, in the order given, pipelined into one round trip."""
        wanted = {level: n for level, n in counts.items() if n > 0}
        if len(wanted) <= 1:  # one read: no pipeline to build
            return {lv: await self.read(queue, consumer, n, None, priority=lv) for lv, n in wanted.items()}
        try:
            async with self._gate, self.redis.pipeline(transaction=False) as p:
                for level, n in wanted.items():
                    p.xreadgroup(GROUP, consumer, {self.stream(queue, level): ">"}, count=n)
                replies = await p.execute(raise_on_error=False)
        except OUTAGE as exc:
            raise self._unavailable(exc) from exc
        out: dict[str, list[Delivery]] = {}
        for (level, _), reply in zip(wanted.items(), replies, strict=True):
            if isinstance(reply, ResponseError):
                out[level] = await self._refused(queue, reply)
            elif isinstance(reply, Exception):
                raise reply
            else:
                out[level] = await self._delivered(queue, reply, {self.stream(queue, level): level})
        return out

    async def _read(
        self, queue: str, consumer: str, levels: dict[str, str], count: int, block_ms: int | None
    ) -> list[Delivery]:
        streams = {self.stream(queue, level): start for level, start in levels.items()}
        try:
            async with self._gate:
                reply = await self.redis.xreadgroup(
                    GROUP, consumer, streams, count=count, block=None if "0" in levels.values() else block_ms
                )
        except OUTAGE as exc:
            raise self._unavailable(exc) from exc
        except ResponseError as exc:
            return await self._refused(queue, exc)
        return await self._delivered(queue, reply, {self.stream(queue, level): level for level in levels})

    async def _refused(self, queue: str, exc: ResponseError) -> list[Delivery]:
        """A read refused: none delivered (a vanished group is made again; others raise)."""
        if "UNBLOCKED" in str(exc):  # the node became a replica (a failover): read again
            return []
        await self._vanished_group(queue, exc)
        return []

    async def _delivered(self, queue: str, reply: Any, level_of: dict[str, str]) -> list[Delivery]:
        """The entries of an XREADGROUP reply; those deleted while pending are acknowledged."""
        out: list[Delivery] = []
        for name, entries in reply or []:
            stream = to_text(name)
            deleted: list[bytes | str] = []
            for entry_id, fields in entries:
                if entry_id is None:
                    continue
                if fields:
                    out.append(decode_entry(queue, entry_id, fields, level_of[stream]))
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
        except OUTAGE as exc:
            raise self._unavailable(exc) from exc
        except ResponseError as exc:
            await self._vanished_group(queue, exc)
            return []
        self._cursors[stream] = to_text(reply[0])
        out: list[Delivery] = []
        deleted: list[bytes | str] = list(reply[2]) if len(reply) > 2 else []  # Redis >= 7
        for entry_id, fields in reply[1]:
            if entry_id is None:
                continue
            if fields:
                out.append(decode_entry(queue, entry_id, fields, priority))
            else:
                deleted.append(entry_id)
        await self._forget_deleted(stream, deleted)
        return out

    async def any_idle(self, queue: str, min_idle_ms: int) -> bool:
        """Whether an entry of any level has been pending for ``min_idle_ms`` or longer since it
        was delivered or touched (one round trip; an unknown answer is yes). None: none can be
        reclaimed sooner than the difference to the reclaim's idle time."""
        try:
            async with self._gate, self.redis.pipeline(transaction=False) as p:
                for level in LEVELS:
                    p.xpending_range(self.stream(queue, level), GROUP, "-", "+", 1, idle=min_idle_ms)
                replies = await p.execute(raise_on_error=False)
        except OUTAGE as exc:
            raise self._unavailable(exc) from exc
        return any(isinstance(r, Exception) or r for r in replies)

    async def _forget_deleted(self, stream: str, ids: list[bytes | str]) -> None:
        """Acknowledge pending ids whose entry is gone, so that they stop coming back."""
        if ids:
            with contextlib.suppress(ResponseError, *OUTAGE):  # they come back; tried again then
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
        except OUTAGE as exc:
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
            except OUTAGE as exc:
                raise self._unavailable(exc) from exc
            except ResponseError as exc:
                if "NOGROUP" in str(exc):
                    self._vanished = True

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
            except OUTAGE as exc:
                raise self._unavailable(exc) from exc
            gone += [to_text(n) for n in names or [] if to_text(n) not in gone]
        return gone
