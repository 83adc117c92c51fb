"""``outlast_send`` under least privilege, on the machine's Postgres: the role docs/secrets.md
creates (its SQL block run as written, the names made unique to the test), granted to a fresh
login role, sends with the default search_path, and can do nothing else: no read of runs,
messages or limits, no write, no call of the inner send, no limit raised with ``SET``, no table of
its own taken for outlast's. The limits are the ones the workers wrote at their start."""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterator
from dataclasses import fields

import psycopg
import pytest
from psycopg import sql
from psycopg.conninfo import make_conninfo

from outlast import Client
from outlast.settings import Settings
from tests.apps import chat
from tests.conftest import ROOT, World, wait_for
from tests.integration.test_waiting import worker

LIMITS = {"max_payload": 2048, "max_inbox": 2, "max_inbox_run": 3}


def documented_grants() -> str:
    """The SQL block of docs/secrets.md's "A role that may only send"."""
    text = (ROOT / "docs" / "secrets.md").read_text()
    section = text.split("## A role that may only send", 1)[1]
    found = re.search(r"```sql\n(.*?)```", section, re.S)
    assert found is not None
    return found.group(1)


@pytest.fixture
def app_role(world: World) -> Iterator[str]:
    """A login role granted the documented sender role (both named for this test), dropped after."""
    tag = uuid.uuid4().hex[:10]
    sender, login = f"outlast_sender_{tag}", f"orders_app_{tag}"
    grants = (
        documented_grants()
        .replace("outlast_sender", sender)
        .replace("orders_app", login)
        .replace("SCHEMA outlast ", f'SCHEMA "{world.schema}" ')
        .replace("outlast.outlast_send", f'"{world.schema}".outlast_send')
    )
    with psycopg.connect(world.database_url, autocommit=True) as admin:
        admin.execute(sql.SQL("CREATE ROLE {} LOGIN").format(sql.Identifier(login)))
        try:
            admin.execute(grants.encode())
            yield login
        finally:
            for role in (login, sender):
                admin.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
                admin.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))


def test_the_sender_role_sends_and_does_nothing_else(world: World, app_role: str) -> None:
    chat.setup(world.database_url, world.schema)
    limits = "SELECT max_payload, max_inbox, max_inbox_run FROM send_limits"
    defaults = {f.name: f.default for f in fields(Settings)}
    assert world.sql(limits) == [tuple(defaults[k] for k in LIMITS)]  # the migration's: settings.py's
    with worker(world, chat.app, **LIMITS):  # its start writes the limits outlast_send applies
        wait_for(lambda: world.sql(limits) == [(2048, 2, 3)], what="the worker's limits")
    with Client(settings=world.settings(), app=chat.app) as c:
        run = c.enqueue("converse", {"turns": 1})  # no worker serves it now: nothing is taken
    s = sql.Identifier(world.schema)
    send = sql.SQL("SELECT * FROM {}.outlast_send(%s, %s, %s::jsonb)").format(s)
    url = make_conninfo(world.database_url, user=app_role)  # the default search_path
    with psycopg.connect(url, autocommit=True) as app:
        # limits raised in the session change nothing
        app.execute("SET outlast.max_inbox = '1000000'")
        app.execute("SET outlast.max_payload = '2000000000'")
        # nor do tables of the caller's own named as outlast's, found first on its search_path
        app.execute(
            "CREATE TEMP TABLE send_limits AS SELECT true AS one, 10000000 AS max_payload, "
            "1000000 AS max_inbox, 1000000 AS max_inbox_run"
        )
        app.execute("CREATE TEMP TABLE messages (LIKE pg_class)")
        app.execute("SET search_path = pg_temp, public")
        row = app.execute(send, (run.id, "in", '{"order": 1}')).fetchone()
        assert row is not None and row[1] == 1
        app.execute(send, (run.id, "in", '{"order": 2}'))
        with pytest.raises(psycopg.errors.CheckViolation, match="2 messages already wait untaken on this"):
            app.execute(send, (run.id, "in", '{"order": 3}'))
        with pytest.raises(psycopg.errors.CheckViolation, match="over 2048 bytes"):
            app.execute(send, (run.id, "big", f'"{"x" * 3000}"'))
        app.execute(send, (run.id, "shipping", '"A7"'))  # another channel, up to the run's bound
        with pytest.raises(psycopg.errors.CheckViolation, match="3 messages already wait untaken in the run"):
            app.execute(send, (run.id, "other", '"B1"'))
        # and nothing else
        forbidden = [
            "SELECT input, result FROM {}.runs",
            "SELECT * FROM {}.messages",
            "SELECT * FROM {}.send_limits",
            "UPDATE {}.runs SET messages_waiting = 0",
            "UPDATE {}.send_limits SET max_inbox = 1000000",
            "INSERT INTO {}.messages (run_id, message_id, channel, seq, payload, via) "
            "VALUES ('x', 'y', 'z', 1, '1', 'callback')",
            "SELECT * FROM {}.outlast_send_message('x', 'in', '1', 'y', NULL, NULL, 'callback')",
            "SELECT * FROM {}.outlast_send_message('x', 'in', '1', 'y', NULL, NULL, NULL, 'callback')",
        ]
        for statement in forbidden:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                app.execute(sql.SQL(statement).format(s))  # type: ignore[arg-type]
    assert world.sql("SELECT channel, via FROM messages WHERE run_id = %s ORDER BY seq", run.id) == [
        ("in", "sql"),
        ("in", "sql"),
        ("shipping", "sql"),
    ]
    assert world.sql("SELECT messages_waiting FROM runs WHERE id = %s", run.id) == [(3,)]
