"""The runs list family fetches a page of runs for a ``RunQuery``. The query is composed from the
named fragments of ``sql/listing.sql`` (only the filters given, so each list reads the one index
made for it, 0020): the page's ids are found first by an index-only scan of the filter's index, then
their rows read."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from psycopg.types.json import Jsonb

from outlast._listing import RunQuery
from outlast.errors import InvalidInput
from outlast.store.base import Family
from outlast.store.queries import Q

FILTERS = ("state", "workflow", "queue", "tenant", "priority", "parent", "input", "since", "until")


def _next_prefix(prefix: str) -> str:
    """The least string after every string that starts with ``prefix``, in byte (code point) order."""
    last = ord(prefix[-1]) + 1
    if 0xD800 <= last <= 0xDFFF:  # surrogates are no characters: skip to the next one
        last = 0xE000
    if last > 0x10FFFF:
        raise InvalidInput(f"an id prefix may not end in U+10FFFF, got {prefix[:40]!r}")
    return prefix[:-1] + chr(last)


def page_statement(
    query: RunQuery, after: tuple[datetime | None, str | None], limit: int
) -> tuple[str, dict[str, Any]]:
    """The SQL and parameters of one page (the test of 0020's indexes EXPLAINs exactly this)."""
    given = query.given()
    where = [Q[f"runs_where_{name}"] for name in FILTERS if name in given]
    params: dict[str, Any] = {name: given.get(name) for name in FILTERS} | {"limit": limit}
    params["input"] = Jsonb(query.input) if query.input else None
    if query.in_doubt:
        where.append(Q["runs_where_in_doubt"])
    if query.id_prefix:
        where.append(Q["runs_where_id_prefix"])
        params |= {"id_prefix": query.id_prefix, "id_next": _next_prefix(query.id_prefix)}
    elif query.sort != "created":
        where.append(Q["runs_where_sorted"])
    after_at, after_id = after
    if after_id is not None:
        where.append(Q["runs_after_id" if query.key == "id" else "runs_after_time"])
        params |= {"after_at": after_at, "after_id": after_id}
    order = Q["runs_order_id" if query.key == "id" else "runs_order_time"]
    page = Q["runs_page_direct" if query.input or query.id_prefix else "runs_page"]
    sql = page.replace("{where}", " AND ".join(where) or "true").replace("{order}", order)
    return sql.replace("{key}", query.key), params


class Listing(Family):
    """``Listing`` reads a page of runs, newest first by the sort's time (or by id, for an id prefix)."""

    async def runs_page(
        self, query: RunQuery, after: tuple[datetime | None, str | None], limit: int
    ) -> list[dict[str, Any]]:
        """Up to ``limit`` rows after ``after`` (the key and id a cursor carries), each with its
        ``duration`` (finished minus started, or created)."""
        sql, params = page_statement(query, after, limit)
        # Planned with the values each time (the filter's index); behind a pooler, in a
        # transaction that sets the schema, as every other read is.
        async with self._conn() as conn, self._scoped(conn):
            cur = await conn.execute(sql.encode(), params, prepare=False)
            return await cur.fetchall()
