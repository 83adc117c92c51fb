"""How the writer's batch reaches Postgres: one transaction, sent in one go on libpq's pipeline.

The batch goes out as prepared statements (extended protocol, parameters binary where psycopg
dumps them so) followed by one Sync. In a pipeline without BEGIN, Postgres runs everything up to
the Sync as one implicit transaction and commits it at the Sync; an error anywhere rolls all of
it back and skips the rest. There is no cursor, no pipeline object and no BEGIN or COMMIT
statement per batch: a statement costs its dumped parameters, one libpq call, and a row maker
built once per prepared statement (rows are returned as dicts, as the pooled reads are).

A ``Wire`` belongs to one connection: its prepared statements live in that server process.
Parameters are dumped with the connection's adaptation context, so its client encoding holds.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg import generators, pq
from psycopg.abc import Buffer, PQGen
from psycopg.adapt import PyFormat, Transformer
from psycopg.pq.abc import PGconn, PGresult

Row = dict[str, Any]
_PLACEHOLDER = re.compile(r"%\((\w+)\)s|%%")
_COMMAND_OK = pq.ExecStatus.COMMAND_OK
_TUPLES_OK = pq.ExecStatus.TUPLES_OK
_FATAL_ERROR = pq.ExecStatus.FATAL_ERROR
_PIPELINE_SYNC = pq.ExecStatus.PIPELINE_SYNC
_TEXT = pq.Format.TEXT
_converted: dict[str, tuple[str, tuple[str, ...]]] = {}


def _convert(sql: str) -> tuple[str, tuple[str, ...]]:
    """``%(name)s`` placeholders as ``$n`` (a name used twice is one parameter); cached."""
    if (found := _converted.get(sql)) is not None:
        return found
    names: list[str] = []

    def number(m: re.Match[str]) -> str:
        if m[1] is None:
            return "%"
        if m[1] not in names:
            names.append(m[1])
        return f"${names.index(m[1]) + 1}"

    found = _converted[sql] = (_PLACEHOLDER.sub(number, sql), tuple(names))
    return found


@dataclass(slots=True)
class Dumped:
    """One statement's parameters, adapted once (a retry sends the same bytes)."""

    sql: str
    values: Sequence[Buffer | None]
    types: tuple[int, ...]
    formats: Sequence[pq.Format]
    size: int  # bytes of parameters, for the writer's cap on a batch


@dataclass(slots=True)
class _Statement:
    name: bytes
    make_row: Callable[[Sequence[Any]], Row] | None = None  # built from the first result's columns


class Wire:
    """One connection's prepared statements, and the transaction that sends a batch on it."""

    def __init__(self, conn: psycopg.AsyncConnection[Any]) -> None:
        self.conn = conn
        self._tx = Transformer(conn)
        self._encoding = conn.info.encoding
        self._prepared: dict[tuple[str, tuple[int, ...]], _Statement] = {}
        self._names = itertools.count()

    def dump(self, sql: str, params: dict[str, Any]) -> Dumped:
        _, names = _convert(sql)
        values = self._tx.dump_sequence([params[n] for n in names], [PyFormat.AUTO] * len(names))
        size = sum(len(v) for v in values if v is not None)
        return Dumped(sql, values, self._tx.types or (), self._tx.formats or [], size)

    async def transaction(self, batch: Sequence[Dumped]) -> list[list[Row]]:
        """Commit the statements together; each one's rows, or the first error raised."""
        pgconn = self.conn.pgconn
        fresh: dict[tuple[str, tuple[int, ...]], _Statement] = {}  # prepared by this batch
        sent: list[tuple[_Statement, tuple[str, tuple[int, ...]] | None]] = []
        pgconn.enter_pipeline_mode()
        for d in batch:
            key = (d.sql, d.types)
            st = self._prepared.get(key) or fresh.get(key)
            if st is None:
                st = fresh[key] = _Statement(b"_outlast_w%d" % next(self._names))
                pgconn.send_prepare(st.name, _convert(d.sql)[0].encode(self._encoding), d.types)
                sent.append((st, key))
            pgconn.send_query_prepared(st.name, d.values, d.formats, _TEXT)
            sent.append((st, None))
        pgconn.pipeline_sync()
        groups = await self.conn.wait(_exchange(pgconn))
        pgconn.exit_pipeline_mode()
        if len(groups) < len(sent):
            raise psycopg.OperationalError("the pipeline returned fewer results than it was sent")
        out: list[list[Row]] = []
        error: PGresult | None = None
        for (st, prepared), results in zip(sent, groups, strict=False):
            res = results[0]
            if res.status == _FATAL_ERROR:
                error = error or res
            elif prepared is not None:
                if res.status == _COMMAND_OK:  # else skipped, after another's error
                    self._prepared[prepared] = st
            elif res.status == _TUPLES_OK:
                out.append(self._rows(st, res) if res.ntuples else [])
            elif res.status == _COMMAND_OK:
                out.append([])
        for results in groups[len(sent) :]:  # a failed commit's error comes after the last statement
            error = error or next((r for r in results if r.status == _FATAL_ERROR), None)
        if error is not None:
            raise psycopg.errors.error_from_result(error, encoding=self._encoding)
        if len(out) < len(batch):
            raise psycopg.OperationalError("the pipeline was aborted without an error")
        return out

    def _rows(self, st: _Statement, res: PGresult) -> list[Row]:
        if st.make_row is None:
            names = tuple((res.fname(i) or b"").decode(self._encoding) for i in range(res.nfields))
            st.make_row = lambda values: dict(zip(names, values, strict=True))
        self._tx.set_pgresult(res)
        return self._tx.load_rows(0, res.ntuples, st.make_row)


def _exchange(pgconn: PGconn) -> PQGen[list[list[PGresult]]]:
    """Send what is buffered, then read every statement's results up to the Sync's."""
    yield from generators.send(pgconn)
    groups: list[list[PGresult]] = []
    while True:
        results = yield from generators.fetch_many(pgconn)
        if not results:
            raise psycopg.OperationalError("the connection returned no result before the Sync")
        if results[-1].status == _PIPELINE_SYNC:
            if len(results) > 1:
                groups.append(results[:-1])
            return groups
        groups.append(results)
