"""A first connection that goes wrong says what to do, in one line: a pooler without
``OUTLAST_PG_POOLER``, a wrong password, no such database, a server not listening, a server too
old, a schema not migrated. Each is tried for real where this machine can make it happen."""

from __future__ import annotations

import asyncio
import socket
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest

from outlast.errors import SchemaError, ServiceUnavailable
from outlast.store import Store
from outlast.store.reach import unreachable
from tests.conftest import World
from tests.faults.pgbouncer import PrivatePgBouncer, pgbouncer_binary


def refusal(url: str, schema: str = "outlast", check: bool = True) -> str:
    async def go() -> str:
        store = Store(url, schema)
        try:
            await store.open(check=check)
        except (ServiceUnavailable, SchemaError) as exc:
            return str(exc)
        finally:
            await store.close()
        raise AssertionError(f"{url} was accepted")

    return asyncio.run(go())


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path=f"/{name}"))


def test_no_such_database_says_to_create_it_or_fix_the_url(world: World) -> None:
    said = refusal(with_database(world.database_url, "no_such_db_here"))
    assert "does not exist" in said and "createdb" in said and "OUTLAST_DATABASE_URL" in said, said


def test_nothing_listening_says_to_check_the_host_and_port() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    said = refusal(f"postgresql://postgres@127.0.0.1:{port}/test")
    assert "Postgres running" in said and "OUTLAST_DATABASE_URL" in said, said


def test_a_schema_not_migrated_says_to_migrate(world: World) -> None:
    said = refusal(world.database_url, schema="never_migrated_here")
    assert "run: outlast migrate" in said, said


def test_a_server_too_old_is_refused_by_name(world: World, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(psycopg.ConnectionInfo, "server_version", property(lambda self: 130012))
    said = refusal(world.database_url, world.schema)
    assert "Postgres 13" in said and "older than outlast supports (14 or newer)" in said, said


def test_a_wrong_password_says_to_check_the_url() -> None:
    # The test servers trust every local user, so no server here refuses a password: the driver's
    # own words are given to the wrapper as libpq says them.
    exc = psycopg.OperationalError('connection failed: FATAL:  password authentication failed for user "app"')
    said = str(unreachable(exc, "postgresql://app:s3cret@db.example/app"))
    assert "check the user and password in OUTLAST_DATABASE_URL" in said, said
    assert "s3cret" not in said, said


def test_a_pooler_refusing_startup_options_names_the_setting(services: tuple[str, str]) -> None:
    pgbouncer_binary()  # skips, saying so, where there is none
    db = services[0]
    bouncer = PrivatePgBouncer(db, "transaction")
    try:
        bouncer.start()
        said = refusal(bouncer.url(db))
    finally:
        bouncer.destroy()
    assert "unsupported startup parameter" in said, said
    assert "OUTLAST_PG_POOLER" in said and "docs/pgbouncer.md" in said, said
