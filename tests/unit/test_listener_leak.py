"""A listening connection through a session pooler sets its schema for the session after it
connects; when that fails, the connection is closed, not left open behind the refusal (each
waiting reader would otherwise leak one on the server). No server needed: the driver's connect
is replaced."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from outlast.errors import ServiceUnavailable
from outlast.store.connection import Connection


class _Conn:
    closed = False

    async def execute(self, *args: Any) -> None:
        raise psycopg.OperationalError("server closed the connection unexpectedly")

    async def close(self) -> None:
        self.closed = True


async def test_a_listener_that_cannot_set_its_schema_is_closed(monkeypatch: pytest.MonkeyPatch) -> None:
    made: list[_Conn] = []

    async def connect(*args: Any, **kwargs: Any) -> _Conn:
        made.append(_Conn())
        return made[-1]

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", connect)
    store = Connection("postgresql://u:pw@pooler:6432/db", "s", pooler="session")
    with pytest.raises(ServiceUnavailable, match="cannot reach Postgres at postgresql://u:\\*\\*\\*@"):
        await store._listener()
    assert made and made[0].closed
