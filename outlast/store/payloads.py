"""The payloads family keeps the values journal entries hold by reference.

Each value (``outlast._payloads``) is one row, with its bytes, or with the bytes in the object
store the store was given (``objects``). A value is stored before the entry that refers to it
is journaled; a run's values are read back in one round trip (in an object store, concurrently),
a column's value held by reference a slice at a time.

A value's bytes go to Postgres as they are (``Unsent``): psycopg's own dumper for ``bytes`` copies
them into a buffer first, which for a large value is one more copy of it in the worker's memory."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import psycopg
from psycopg.adapt import Dumper
from psycopg.pq import Format

from outlast._journal import Entry
from outlast._model import RunRecord
from outlast._payloads import INPUT, JSON, RESULT, column_ref, key_of, resolved, wanted, whole_value
from outlast.errors import PayloadChanged, ServiceUnavailable
from outlast.store.base import Family

SWEPT_WAIT = 0.2  # seconds between tries of a put that met a row being swept
SWEPT_TRIES = 50
SLICES = 16  # a value held by reference is read back in at most this many slices,
SLICE_MIN = 256 * 1024  # each of at least this many bytes
_NO_STORE = "run '{run_id}': its payloads are in an object store, and OUTLAST_PAYLOAD_STORE is not set here"


class Unsent:
    """A value's bytes, sent to Postgres as a ``bytea`` parameter with no copy made on the way."""

    __slots__ = ("data",)

    def __init__(self, data: bytes | bytearray) -> None:
        self.data = data


class _UnsentDumper(Dumper):
    format = Format.BINARY
    oid = psycopg.postgres.types["bytea"].oid

    def dump(self, obj: Unsent) -> bytes | bytearray:
        return obj.data


psycopg.adapters.register_dumper(Unsent, _UnsentDumper)


def _text(read: bytearray) -> str | bytes:
    """The bytes read as text (bytes that are not UTF-8 stay bytes: their SHA-256 refuses them)."""
    try:
        return read.decode()
    except UnicodeDecodeError:
        return bytes(read)


class Payloads(Family):
    """Store a run's values by SHA-256, read them back, count them, sweep the orphans."""

    async def put_payloads(
        self, run_id: str, values: Mapping[str, bytes | bytearray], media_type: str = JSON
    ) -> None:
        """Store each value (by SHA-256) of ``run_id``: its row, then its object (a row with no
        object is an orphan the sweeper deletes, never an object with no row)."""
        for sha, data in values.items():
            await self._put(run_id, sha, data, media_type)

    async def _put(self, run_id: str, sha: str, data: bytes | bytearray, media_type: str) -> None:
        body = None if self.objects is not None else Unsent(data)
        for _ in range(SWEPT_TRIES):
            rows = await self._rows(
                "payload_put", run_id=run_id, sha256=sha, size=len(data), media_type=media_type, body=body
            )
            if rows:
                break
            await asyncio.sleep(SWEPT_WAIT)  # swept as an orphan a moment ago: stored afresh once gone
        else:
            raise ServiceUnavailable(f"run '{run_id}': payload {sha} is being swept; try again")
        if rows[0]["external"]:
            if self.objects is None:
                raise ServiceUnavailable(_NO_STORE.format(run_id=run_id))
            await self.objects.put(key_of(run_id, sha), bytes(data))  # a bytearray copied for its client

    async def payloads(self, run_id: str, shas: list[str]) -> dict[str, bytes]:
        """The values of ``run_id`` by SHA-256 (a value the store does not have is absent)."""
        if not shas:
            return {}
        rows = await self._rows("payloads_get", run_id=run_id, shas=shas)
        out = {r["sha256"]: bytes(r["body"]) for r in rows if r["body"] is not None}
        elsewhere = [r["sha256"] for r in rows if r["body"] is None]
        if elsewhere:
            if self.objects is None:
                raise ServiceUnavailable(_NO_STORE.format(run_id=run_id))
            objects = self.objects
            got = await asyncio.gather(*(objects.get(key_of(run_id, s)) for s in elsewhere))
            out.update({s: g for s, g in zip(elsewhere, got, strict=True) if g is not None})
        return out

    async def resolve(self, run_id: str, entries: list[Entry]) -> list[Entry]:
        """``entries`` with the values they hold by reference read back (one round trip)."""
        shas = wanted(entries)
        return resolved(entries, await self.payloads(run_id, shas)) if shas else entries

    async def whole(self, run_id: str, value: Any, key: str) -> Any:
        """A column's value (a message's payload) whole: read back from the payload store if it
        holds a reference (one round trip), as it is otherwise (no round trip)."""
        ref = column_ref(value, key)
        if ref is None:
            return value
        return (await self.whole_and_text(run_id, ref, key))[0]

    async def whole_and_text(self, run_id: str, ref: dict[str, Any], key: str) -> tuple[Any, str | bytes]:
        """The value a column holds by ``ref``, whole, and the text (or bytes) it was read from:
        kept by a caller that journals the same value by reference (a message's take)."""
        sha = ref["sha256"]
        step = max(SLICE_MIN, -(-int(ref["size"]) // SLICES))
        read = bytearray()
        got: str | bytes | None = None
        while True:  # a slice at a time: the client's buffers hold a slice, never the whole value
            rows = await self._rows(
                "payload_slice", run_id=run_id, sha256=sha, start=len(read) + 1, length=step
            )
            if not rows:
                break
            if rows[0]["external"]:
                got = (await self.payloads(run_id, [sha])).get(sha)
                break
            piece = rows[0]["body"]
            del rows
            read += piece
            if len(piece) < step:
                got = _text(read)
                break
        del read  # the text alone is kept: the value's peak in memory is its text and the value
        value = whole_value(run_id, key, ref, got)
        assert got is not None  # whole_value refused it otherwise
        return value, got

    async def _read_back(self, run_id: str, rows: list[dict[str, Any]], field: str, key: str) -> None:
        """Each row's ``field`` (``rows``: dicts read, changed in place) whole where it holds a
        reference under ``key``, in one round trip; a payload missing or changed stays the reference."""
        held = [(r, ref) for r in rows if (ref := column_ref(r.get(field), key)) is not None]
        if not held:
            return
        got = await self.payloads(run_id, sorted({ref["sha256"] for _, ref in held}))
        for r, ref in held:
            with contextlib.suppress(PayloadChanged):
                r[field] = whole_value(run_id, key, ref, got.get(ref["sha256"]))

    async def whole_record(self, run: RunRecord) -> RunRecord:
        """``run`` with its input and result whole (read back only if held by reference)."""
        if column_ref(run.input, INPUT) is not None:
            run = replace(run, input=await self.whole(run.id, run.input, INPUT))
        if column_ref(run.result, RESULT) is not None:
            run = replace(run, result=await self.whole(run.id, run.result, RESULT))
        return run

    async def payload_bytes(self, run_id: str) -> int:
        """The bytes ``run_id`` holds in the payload store."""
        rows = await self._rows("payload_bytes", run_id=run_id)
        return int(rows[0]["bytes"])

    async def sweep_payloads(self, grace: float, limit: int = 500) -> int:
        """One pass of the payloads' sweep: rows past ``grace`` seconds that no journal entry of
        their run refers to, or whose run is gone, deleted with their objects. The number deleted."""
        await self._write("payloads_sweep", grace=grace, limit=limit)
        swept: list[dict[str, Any]] = await self._rows("payloads_swept", limit=limit)
        if not swept:
            return 0
        if self.objects is None:  # an object's row is dropped only by a sweeper that reaches it
            swept = [r for r in swept if not r["external"]]
        external = [key_of(r["run_id"], r["sha256"]) for r in swept if r["external"]]
        if external and self.objects is not None:
            await self.objects.delete(external)
        await self._write(
            "payloads_drop", run_ids=[r["run_id"] for r in swept], shas=[r["sha256"] for r in swept]
        )
        return len(swept)
