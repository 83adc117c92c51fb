"""The writer's batch reaches Postgres as one transaction, sent in one go on libpq's pipeline.

The batch goes out as prepared statements (extended protocol, parameters binary where psycopg
dumps them so) followed by one Sync. In a pipeline without BEGIN, Postgres runs everything up to
the Sync as one implicit transaction and commits it at the Sync; an error anywhere rolls all of
it back and skips the rest. There is no cursor, no pipeline object and no BEGIN or COMMIT
statement per batch: a statement costs its dumped parameters, one libpq call, and a row maker
built once per prepared statement (rows are returned as dicts, as the pooled reads are).

A ``Wire`` belongs to one connection: its prepared statements live in that server process.
Parameters are dumped with the connection's adaptation context, so its client encoding holds.

Through a pooler (``docs/pgbouncer.md``) a wire can go without prepared statements (each statement
then goes as an unnamed one: parsed and planned at each use, as PgBouncer's transaction pooling
before 1.21 requires) and can open each transaction with a *prelude*: a statement of its own,
first in the same Sync, that sets what a startup option would have set for the session, local to
the transaction (``set_config(..., true)``), and may name the server process running it and the
transaction's start (columns ``pid`` and ``began``): behind a pooler, only the server knows them.
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


def _array_literal(items: list[Any]) -> Any:
    """A list of texts or of whole numbers as Postgres's array literal, a text of unknown type
    (the statement's cast, e.g. ``::text[]``, types it), as psycopg sends a list of texts itself,
    at a tenth of the cost (its dumper escapes each element with a regular expression: 50 µs
    for a journal append of two entries). Any other list is psycopg's to dump."""
    if type(items[0]) is str:  # joined in C, then escaped once: no text Postgres stores holds NUL
        try:
            text = "\x00".join(items)
        except TypeError:  # not all texts (a NULL among them)
            return items
        if text.count("\x00") != len(items) - 1:
            return items  # a NUL in a text: psycopg's to refuse
        if "\\" in text or '"' in text:
            text = text.replace("\\", "\\\\").replace('"', '\\"')
        return '{"' + text.replace("\x00", '","') + '"}'
    if {type(x) for x in items} == {int}:
        return "{" + ",".join(map(str, items)) + "}"
    return items


@dataclass(slots=True)
class Dumped:
    """``Dumped`` holds one statement's parameters, adapted once (a retry sends the same bytes)."""

    sql: str
    values: Sequence[Buffer | None]
    types: tuple[int, ...]
    formats: Sequence[pq.Format]
    size: int  # bytes of parameters, for the writer's cap on a batch


@dataclass(slots=True)
class _Statement:
    name: bytes
    make_row: Callable[[Sequence[Any]], Row] | None = None  # built from the first result's columns
    width: int = -1  # how many columns make_row was built for


class Wire:
    """``Wire`` holds one connection's prepared statements, and the transaction that sends a batch on it."""

    def __init__(
        self,
        conn: psycopg.AsyncConnection[Any],
        prepare: bool = True,
        prelude: tuple[str, dict[str, Any]] | None = None,
    ) -> None:
        self.conn = conn
        self._tx = Transformer(conn)
        self._encoding = conn.info.encoding
        self._prepared: dict[tuple[str, tuple[int, ...]], _Statement] = {}
        self._names = itertools.count()
        self._prepare = prepare
        self._prelude = None if prelude is None else self.dump(*prelude)
        # The server process running this wire's transaction and the transaction's start (text, as
        # the server wrote it), from the prelude's reply until the Sync's (None otherwise): what to
        # end if the link is lost under way, and not another transaction the process runs later.
        self.server_tx: tuple[int, str] | None = None

    def dump(self, sql: str, params: dict[str, Any]) -> Dumped:
        _, names = _convert(sql)
        args = [params[n] for n in names]
        for i, v in enumerate(args):
            if type(v) is list and v:
                args[i] = _array_literal(v)
        values = self._tx.dump_sequence(args, [PyFormat.AUTO] * len(names))
        size = sum(map(len, filter(None, values)))
        return Dumped(sql, values, self._tx.types or (), self._tx.formats or [], size)

    async def transaction(self, batch: Sequence[Dumped]) -> list[list[Row]]:
        """Commit the statements together; each one's rows, or the first error raised."""
        pgconn = self.conn.pgconn
        sent = self._send(batch if self._prelude is None else (self._prelude, *batch))
        groups: list[list[PGresult]] = []  # filled as the replies come: kept if they stop
        at = (1 if sent[0][1] is not None else 0) if self._prelude is not None else -1
        self.server_tx = None
        came = None if at < 0 else lambda: self._note_pid(groups, at)
        await self.conn.wait(_exchange(pgconn, groups, came))
        self.server_tx = None  # the Sync came back: the transaction is over, committed or not
        pgconn.exit_pipeline_mode()
        if at >= 0:  # the prelude's replies are no statement's of the batch
            del sent[: at + 1], groups[: at + 1]
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
            exc = psycopg.errors.error_from_result(error, encoding=self._encoding)
            if exc.sqlstate == "0A000":  # "cached plan must not change result type": a migration
                self._prepared.clear()  # added a column a statement returns; prepare them afresh
            raise exc
        if len(out) < len(batch):
            raise psycopg.OperationalError("the pipeline was aborted without an error")
        return out

    def _send(self, batch: Sequence[Dumped]) -> list[tuple[_Statement, tuple[str, tuple[int, ...]] | None]]:
        """Queue the statements (each prepared first if new) and the Sync, in pipeline mode; what
        was sent, in order (a Parse's entry carries its key)."""
        pgconn = self.conn.pgconn
        fresh: dict[tuple[str, tuple[int, ...]], _Statement] = {}  # prepared by this batch
        sent: list[tuple[_Statement, tuple[str, tuple[int, ...]] | None]] = []
        pgconn.enter_pipeline_mode()
        for d in batch:
            key = (d.sql, d.types)
            if not self._prepare:  # an unnamed statement, parsed again at each use
                unnamed = self._prepared.setdefault(key, _Statement(b""))
                text = _convert(d.sql)[0].encode(self._encoding)
                pgconn.send_query_params(text, d.values, d.types, d.formats, _TEXT)
                sent.append((unnamed, None))
                if d is self._prelude:
                    pgconn.send_flush_request()
                continue
            st = self._prepared.get(key) or fresh.get(key)
            if st is None:
                st = fresh[key] = _Statement(b"_outlast_w%d" % next(self._names))
                pgconn.send_prepare(st.name, _convert(d.sql)[0].encode(self._encoding), d.types)
                sent.append((st, key))
            pgconn.send_query_prepared(st.name, d.values, d.formats, _TEXT)
            sent.append((st, None))
            if d is self._prelude:  # its reply now, not after the batch: it names the process
                pgconn.send_flush_request()
        pgconn.pipeline_sync()
        return sent

    def _note_pid(self, groups: list[list[PGresult]], at: int) -> None:
        if len(groups) == at + 1:  # the prelude's reply, just come
            res = groups[at][0]
            if res.status == _TUPLES_OK and res.ntuples and res.fname(0) == b"pid":
                pid, began = res.get_value(0, 0), res.get_value(0, 1)
                if pid and began:
                    self.server_tx = (int(pid), bytes(began).decode())

    def _rows(self, st: _Statement, res: PGresult) -> list[Row]:
        # An unnamed statement is planned afresh at each use: after a migration added a column,
        # its `SELECT *` returns one more, and the row maker is built again for it.
        if st.make_row is None or st.width != res.nfields:
            names = tuple((res.fname(i) or b"").decode(self._encoding) for i in range(res.nfields))
            st.make_row, st.width = (lambda values: dict(zip(names, values, strict=True))), res.nfields
        self._tx.set_pgresult(res)
        return self._tx.load_rows(0, res.ntuples, st.make_row)


def _exchange(pgconn: PGconn, groups: list[list[PGresult]], came: Callable[[], None] | None) -> PQGen[None]:
    """Send what is buffered, then read every statement's results, into ``groups`` as they come
    (``came``, if any, told after each), up to the Sync's."""
    yield from generators.send(pgconn)
    while True:
        results = yield from generators.fetch_many(pgconn)
        if not results:
            raise psycopg.OperationalError("the connection returned no result before the Sync")
        if results[-1].status == _PIPELINE_SYNC:
            if len(results) > 1:
                groups.append(results[:-1])
            return
        groups.append(results)
        if came is not None:
            came()
