"""This module publishes run ids and keeps the data-loss marker: a key set with every publication and looked
for every sweep. Gone (or a group found gone by a read), Redis lost its data: the caller
re-publishes what Postgres says is due.

Through Redis Sentinel, a failover loses no key but may lose the last entries: the replica had
the marker long before, not the entries added just before the old primary died. There, the
marker's script also compares the primary's replication id (``master_replid``, new on a
promoted replica) with the one recorded beside the marker: the first worker to see a new one
records it and answers "lost", the others find it recorded.
"""

from __future__ import annotations

from outlast.queue.connection import OUTAGE, Connection
from outlast.queue.entries import to_text

# KEYS[1] the marker, KEYS[2] the replication id of the primary that last answered. 1 when the
# marker was missing or the primary is another one (a failover) since the last look, else 0.
_PRIMARY = """
local fresh = redis.call('SET', KEYS[1], '1', 'NX')
local id = string.match(redis.call('INFO', 'replication'), 'master_replid:(%w+)')
if id == nil or redis.call('GET', KEYS[2]) == id then return fresh and 1 or 0 end
redis.call('SET', KEYS[2], id)
return 1
"""


class Publishing(Connection):
    """``Publishing`` adds run entries to a queue's streams, and notices when Redis lost them."""

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
        except OUTAGE as exc:
            raise self._unavailable(exc) from exc
        return to_text(entry)

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
        except OUTAGE as exc:
            raise self._unavailable(exc) from exc

    async def lost_data(self) -> list[str]:
        """The data-loss markers found gone since the last call (each once), by key; empty when
        nothing was lost. A marker is gone when its key is (then set again), and all are when a
        read found its stream or group gone; through Sentinel, also once after a failover (one
        script: ``_PRIMARY``). A fresh Redis answers its markers the first time too: the caller
        tells it from one that lost data by what Postgres recorded (``store.fleet.redis_used``), then
        re-publishes what Postgres says is due. One SET NX: cheap each second (on a cluster, one
        per queue this worker serves, pipelined: each node answers for its own)."""
        keys = [self.alive_key(q) for q in sorted(self._groups)] if self.cluster else [self.alive_key()]
        try:
            async with self._gate:
                if self.sentinel:
                    fresh = [bool(await self.redis.eval(_PRIMARY, 2, keys[0], f"{self.prefix}:primary"))]
                else:
                    async with self.redis.pipeline(transaction=False) as p:
                        for key in keys:
                            p.set(key, b"1", nx=True)
                        fresh = await p.execute() if keys else []
        except OUTAGE as exc:
            raise self._unavailable(exc) from exc
        gone = keys if self._vanished else [k for k, new in zip(keys, fresh, strict=True) if new]
        self._vanished = False
        return gone
