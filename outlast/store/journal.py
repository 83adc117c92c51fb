"""The journal family stores a run's hash-chained entries, and holds the one way to append to it."""

from __future__ import annotations

import asyncio
import operator
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from outlast._journal import Entry, Unread, body_bytes
from outlast._payloads import referenced
from outlast.store.payloads import Payloads
from outlast.store.records import OnWait

_KIND, _OP_ID, _BODY, _HASH = (operator.attrgetter(a) for a in ("kind", "op_id", "body", "hash"))


def entry_columns(held: Sequence[Entry], entry: Entry) -> dict[str, list[Any]]:
    """A fenced append's entries (``held``, then ``entry``) as the arrays its statement unnests:
    each read off by an ``attrgetter``, not a comprehension (a frame each, at every append)."""
    every = (*held, entry)
    return {
        "kinds": list(map(_KIND, every)),
        "op_ids": list(map(_OP_ID, every)),
        "bodies": list(map(_BODY, every)),
        "hashes": list(map(_HASH, every)),
    }


def _entry(r: dict[str, Any]) -> Entry:
    return Entry(r["seq"], r["kind"], r["op_id"], r["body"], r["hash"])


def _entry_params(e: Entry) -> dict[str, Any]:
    return {"seq": e.seq, "kind": e.kind, "op_id": e.op_id, "body": e.body, "hash": e.hash}


class Journal(Payloads):
    """``Journal`` reads a run's journal and appends one entry (``append``: the one way in). Read
    entries come with the values they hold by reference (``Payloads.resolve``)."""

    async def journal(self, run_id: str) -> list[Entry]:
        rows = await self._rows("journal", run_id=run_id)
        return await self.resolve(run_id, [_entry(r) for r in rows])

    async def journal_to_replay(self, run_id: str) -> list[Entry]:
        """The journal as a resume reads it: each capture's body left unread (``Unread``, a
        capture holding references too), the values other entries hold by reference read in one
        round trip."""
        rows = await self._rows("journal_to_replay", run_id=run_id)
        entries = [
            Entry(r["seq"], r["kind"], r["op_id"], r["body"], r["hash"])
            if r["body"] is not None and not (r["kind"] == "capture" and referenced(r["body"]))
            else Unread(r["seq"], r["kind"], r["op_id"], "", r["hash"])
            for r in rows
        ]
        return await self.resolve(run_id, entries)

    async def captures(self, run_id: str, upto: int) -> list[Entry]:
        """The run's capture entries up to ``upto``, in order."""
        rows = await self._rows("captures", run_id=run_id, upto=upto)
        return await self.resolve(run_id, [_entry(r) for r in rows])

    async def journal_times(self, run_id: str) -> dict[int, datetime]:
        return {r["seq"]: r["created_at"] for r in await self._rows("journal_times", run_id=run_id)}

    async def append(
        self, run_id: str, author: int | OnWait, entry: Entry, held: Sequence[Entry] = ()
    ) -> bool | None:
        """Append one journal entry: the one way into the journal, for the worker and for the
        producer side alike. ``author`` is the lease holder's fencing token, or ``OnWait`` for a
        person or code writing to a run no worker holds (a resolution: the run must wait for
        exactly that reason, its chain must not have moved, and it is queued again).
        ``held``: entries chained before ``entry`` (results the worker held), written with it by
        the same fenced statement, all or none (the lease holder only).
        None if refused, else whether a cancellation of the run has been requested."""
        if isinstance(author, OnWait):
            assert not held, "only the lease holder holds entries"
            rows = await self._write(
                "append_unowned",
                run_id=run_id,
                reason=author.reason,
                prev=author.prev,
                bytes=body_bytes([entry]),
                **_entry_params(entry),
            )
        else:
            rows = await self.submit_append(run_id, author, entry, held, body_bytes([*held, entry]))
        return appended(rows)

    def submit_append(
        self, run_id: str, token: int, entry: Entry, held: Sequence[Entry], size: int
    ) -> asyncio.Future[list[dict[str, Any]]]:
        """The lease holder's ``append``, queued now: its rows (``appended`` reads them; each
        says the run's ``journal_bytes`` after it and whether it is ``size_warned``) come in the
        future, and the write is made whether or not anyone still awaits it. ``size``: the
        entries' bodies in bytes (``body_bytes``), added to the run's count."""
        return self._submit(
            "append",
            run_id=run_id,
            token=token,
            seq=entry.seq,
            hash=entry.hash,
            bytes=size,
            **entry_columns(held, entry),
        )


def appended(rows: list[dict[str, Any]]) -> bool | None:
    """An append's rows: None if it was refused, else whether a cancellation was requested."""
    return bool(rows[0]["cancel_requested"]) if rows else None
