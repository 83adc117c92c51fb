"""The store's query families share this module. ``Store`` is a ``Connection`` (with its
``Migrations``) and one object per family over it (``store.runs``, ``store.leases``,
``store.journal``...); each family reaches Postgres only through ``Family``, which hands its
statements to the one connection that ``Base`` declares."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from contextlib import AbstractAsyncContextManager
from typing import Any

import psycopg

from outlast._payloads import ObjectStore

Conn = psycopg.AsyncConnection[dict[str, Any]]


def budget_arrays(by_name: Mapping[str, float]) -> tuple[list[str], list[float]]:
    """Budget amounts (limits, estimates, actual use) as the two arrays a statement unnests: the
    names, and the amounts all floats (psycopg refuses a list that mixes int and float)."""
    return list(by_name), [float(v) for v in by_name.values()]


class Base:
    """``Base`` declares the connection's side of every family, so that each family type-checks on its own:
    ``Connection`` gives the reads and writes, ``Migrations`` the schema check. A family names the
    statement (``sql/<family>.sql``) and its parameters; it never opens a connection itself."""

    url: str
    schema: str
    pooler: str  # none, transaction or session (docs/pgbouncer.md)
    tenant_window: int  # a tenant's runs published and not started, per queue (0014_fair)
    objects: ObjectStore | None = None  # where payloads' bytes are, if not in rows (Store.from_settings)

    def _conn(self) -> AbstractAsyncContextManager[Conn]:
        """A pooled connection, driver errors wrapped."""
        raise NotImplementedError

    def _scoped(self, conn: Conn) -> AbstractAsyncContextManager[None]:
        """The block's statements on ``conn`` in the store's schema (through a pooler: one transaction)."""
        raise NotImplementedError

    async def _rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """Run statement ``name`` on a pooled connection (a read, or a write that never waits)."""
        raise NotImplementedError

    async def _write(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """Run statement ``name`` through the shared-commit writer."""
        raise NotImplementedError

    def _submit(self, name: str, **params: Any) -> asyncio.Future[list[dict[str, Any]]]:
        """Queue statement ``name`` on the shared-commit writer now; its rows come in the future."""
        raise NotImplementedError

    async def _beat_rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        """Run statement ``name`` on the lease renewals' connection of its own."""
        raise NotImplementedError

    async def check_schema(self) -> None:
        """Refuse a schema missing, older or newer than this code."""
        raise NotImplementedError


class Family:
    """``Family`` is the base of one family of queries (``store.leases``, ``store.journal``...): an
    object over the store's one connection, which names its statements and their parameters and
    hands them to that connection. A part of the worker is given the families it uses, never the
    whole store."""

    # The connection's own ``_submit``, bound once: an append of every crossing is queued through
    # it, and a method of the family's own between them cost a call and its keywords copied again.
    _submit: Callable[..., asyncio.Future[list[dict[str, Any]]]]

    def __init__(self, db: Base) -> None:
        self._db = db
        self._submit = db._submit

    @property
    def schema(self) -> str:
        return self._db.schema

    @property
    def tenant_window(self) -> int:
        return self._db.tenant_window

    @property
    def objects(self) -> ObjectStore | None:
        return self._db.objects

    def _conn(self) -> AbstractAsyncContextManager[Conn]:
        return self._db._conn()

    def _scoped(self, conn: Conn) -> AbstractAsyncContextManager[None]:
        return self._db._scoped(conn)

    async def _rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        return await self._db._rows(name, **params)

    async def _write(self, name: str, **params: Any) -> list[dict[str, Any]]:
        return await self._db._write(name, **params)

    async def _beat_rows(self, name: str, **params: Any) -> list[dict[str, Any]]:
        return await self._db._beat_rows(name, **params)
