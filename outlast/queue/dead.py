"""The dead-letter stream of a queue keeps the entries nobody can serve, with the reason."""

from __future__ import annotations

from outlast.queue.connection import OUTAGE, Connection
from outlast.queue.entries import GROUP, Delivery, to_text


class DeadLetters(Connection):
    """``DeadLetters`` moves an entry to the dead letters, lists them and drops one."""

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
        except OUTAGE as exc:
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
        except OUTAGE as exc:
            raise self._unavailable(exc) from exc
        return [{**{to_text(k): to_text(v) for k, v in f.items()}, "_id": to_text(eid)} for eid, f in entries]

    async def drop_dead_letter(self, queue: str, entry_id: str) -> bool:
        """Delete one dead letter; False if there was none by that id."""
        try:
            async with self._gate:
                return bool(await self.redis.xdel(self.dead_stream(queue), entry_id))
        except OUTAGE as exc:
            raise self._unavailable(exc) from exc
