"""Typed channels checked for every sender, on real Postgres and Redis: a worker publishes its
workflows' channels (a JSON schema each, migration 0028), and a client without the app, the CLI
without ``--app``, a callback and the HTTP API are refused an unknown channel or a payload its
schema does not fit, in one line naming the run and the channel, with nothing stored; a workflow
that declares no channels takes anything, as before.

Workers run in-process (tests/integration/test_waiting.py's ``worker``); what was stored is counted
in the ``messages`` rows.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx2 as httpx
import psycopg
import pytest
from starlette.testclient import TestClient

from outlast import Client
from outlast._callbacks import sign
from outlast.dashboard import create_app
from outlast.errors import InvalidInput
from outlast.identity import add_user
from outlast.web import Callbacks
from tests.apps import chat
from tests.conftest import World, wait_for
from tests.dashboard import dashboard_process
from tests.integration.test_messages import done
from tests.integration.test_waiting import reach, worker

KEY = "k" * 40


@pytest.fixture
def bare(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    """A client without the app, after a worker of the app published its channels and stopped."""
    monkeypatch.setenv("OUTLAST_DATABASE_URL", world.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", world.schema)
    chat.setup(world.database_url, world.schema)
    with worker(world, chat.app):
        wait_for(lambda: stored(world, "SELECT count(*) FROM workflow_channels") > 0, what="the channels")
    with Client(settings=world.settings(secret_key=KEY)) as c:
        yield c


def stored(world: World, sql: str = "SELECT count(*) FROM messages") -> int:
    return int(world.sql(sql)[0][0])


def test_a_client_without_the_app_is_refused_before_storing(world: World, bare: Client) -> None:
    with Client(settings=world.settings(), app=chat.app) as c:
        admitted = c.enqueue("support")  # its program known from the start
    unclaimed = bare.enqueue("support")  # no program until a worker takes it: the newest declaration
    for run in (admitted, unclaimed):
        where = f"run '{run.id}', channel"
        with pytest.raises(InvalidInput, match=rf"{where} 'reply': the payload is not a valid Reply \("):
            bare.send(run.id, "reply", {"score": 3})
        with pytest.raises(InvalidInput, match=rf"{where} 'count': the payload is not a valid integer"):
            bare.send(run.id, "count", "many")
        with pytest.raises(
            InvalidInput, match=rf"{where} 'other': unknown channel \(its workflow declares: count, reply\)"
        ):
            bare.send(run.id, "other", {"text": "x"})
    assert stored(world) == 0
    bare.send(admitted.id, "reply", {"text": "thanks", "score": 5})
    bare.send(admitted.id, "count", 7)
    with worker(world, chat.app):
        assert done(bare, admitted.id) == {"text": "thanks", "score": 5, "count": 7}


def test_a_workflow_that_declares_no_channels_takes_anything(world: World, bare: Client) -> None:
    run = bare.enqueue("converse", {"turns": 1})
    bare.send(run.id, "in", {"any": ["thing"]})
    bare.send(run.id, "elsewhere", "text")
    assert stored(world) == 2


def test_the_cli_without_the_app_is_refused_before_storing(world: World, bare: Client) -> None:
    run = bare.enqueue("support")
    bad = world.cli("send", run.id, "reply", '{"score": 1}')
    assert bad.returncode == 2, bad.stdout
    assert f"run '{run.id}', channel 'reply': the payload is not a valid Reply" in bad.stderr
    unknown = world.cli("send", run.id, "other", '{"text": "x"}')
    assert unknown.returncode == 2, unknown.stdout
    assert f"run '{run.id}', channel 'other': unknown channel" in unknown.stderr
    assert stored(world) == 0
    assert world.cli("send", run.id, "reply", '{"text": "ok"}').returncode == 0


def test_a_callback_is_refused_before_storing(world: World, bare: Client) -> None:
    run = bare.enqueue("support")
    soon = datetime.now(UTC) + timedelta(hours=1)
    reply, other = sign(KEY, run.id, "reply", soon), sign(KEY, run.id, "other", soon)
    with TestClient(Callbacks(settings=world.settings(secret_key=KEY)), base_url="http://127.0.0.1") as http:
        bad = http.post(f"/{reply}", json={"score": 1})
        assert bad.status_code == 422, bad.text
        assert f"run '{run.id}', channel 'reply': the payload is not a valid Reply" in bad.json()["error"]
        unknown = http.post(f"/{other}", json={"text": "x"})
        assert unknown.status_code == 422, unknown.text
        assert f"run '{run.id}', channel 'other': unknown channel" in unknown.json()["error"]
        assert stored(world) == 0
        assert http.post(f"/{reply}", json={"text": "ok"}).status_code == 202
    assert stored(world) == 1


def test_the_http_api_without_the_app_is_refused_before_storing(world: World, bare: Client) -> None:
    users = world.tmp / "users.toml"
    users.write_text("")
    token = add_user(users, "sam", ["senders"])
    run = bare.enqueue("support")
    headers = {"Authorization": f"Bearer {token}"}
    with TestClient(create_app(world.settings(users=str(users)))) as http:
        url = f"/api/runs/{run.id}/messages"
        bad = http.post(f"{url}/reply", json={"score": 1}, headers=headers)
        assert bad.status_code == 400, bad.text
        assert f"run '{run.id}', channel 'reply': the payload is not a valid Reply" in bad.json()["error"]
        unknown = http.post(f"{url}/other", json={"text": "x"}, headers=headers)
        assert unknown.status_code == 400, unknown.text
        assert f"run '{run.id}', channel 'other': unknown channel" in unknown.json()["error"]
        assert stored(world) == 0
        assert http.post(f"{url}/reply", json={"text": "ok"}, headers=headers).status_code == 201


def test_outlast_send_refuses_an_unknown_channel_in_sql(world: World, bare: Client) -> None:
    """In SQL, only the channel is checked (a payload its type refuses is set aside at the take)."""
    run = bare.enqueue("support")
    with psycopg.connect(world.database_url, options=f"-c search_path={world.schema}") as conn:
        with pytest.raises(psycopg.errors.CheckViolation, match=rf"run '{run.id}', channel 'other': unknown"):
            conn.execute("SELECT * FROM outlast_send(%s, 'other', '1'::jsonb)", (run.id,))
        conn.rollback()
        conn.execute("SELECT * FROM outlast_send(%s, 'reply', '{\"text\": \"ok\"}'::jsonb)", (run.id,))
    assert stored(world) == 1


def test_a_run_keeps_the_channels_of_the_program_that_admitted_it(world: World, bare: Client) -> None:
    """A rolling upgrade: a newer program declares other channels; the old program's runs keep
    theirs, and a run no worker has taken yet gets the newest."""
    old = bare.enqueue("support")
    world.sql("UPDATE runs SET program = 'v0:old' WHERE id = %s", old.id)
    world.sql(
        "INSERT INTO workflow_channels (workflow, program, channels, published_at) VALUES "
        "('support', 'v0:old', '{\"reply\": {}}', now() - interval '1 hour'),"
        "('support', 'v2:new', '{\"answer\": {}}', now() + interval '1 hour')"
    )
    bare.send(old.id, "reply", "anything")  # its program's declaration: any payload on 'reply'
    with pytest.raises(InvalidInput, match=r"unknown channel \(its workflow declares: reply\)"):
        bare.send(old.id, "answer", 1)
    new = bare.enqueue("support")
    bare.send(new.id, "answer", 1)
    with pytest.raises(InvalidInput, match=r"unknown channel \(its workflow declares: answer\)"):
        bare.send(new.id, "reply", {"text": "ok"})
    assert stored(world) == 2


def test_a_payload_the_run_cannot_take_is_set_aside_and_the_run_waits_on(world: World, bare: Client) -> None:
    """``outlast_send`` checks only the channel: a payload the channel's type refuses reaches the
    inbox. The run does not fail on it: it sets it aside (kept, with why, shown by ``outlast
    status`` and on the run page), waits on, and takes the next valid message."""
    users = world.tmp / "users.toml"
    users.write_text("")
    token = add_user(users, "bob", ["viewers"])
    run = bare.enqueue("support")
    send = "SELECT * FROM outlast_send(%s, %s, %s::jsonb, %s)"
    aside = "SELECT count(*) FROM messages WHERE set_aside IS NOT NULL"
    with (
        worker(world, chat.app),
        psycopg.connect(world.database_url, options=f"-c search_path={world.schema}", autocommit=True) as sql,
    ):
        reach(bare, run.id, "waiting")
        sql.execute(send, (run.id, "reply", '{"score": 1}', "bad-reply"))
        wait_for(lambda: stored(world, aside) == 1, what="the message set aside")
        wait_for(lambda: bare.status(run.id).state == "waiting", what="the run to wait again")
        waiting = bare.status(run.id)
        assert (waiting.reason, waiting.waits_for) == ("message", "reply"), waiting
        why = "set aside: not a valid Reply (text: Field required)"
        status = world.cli("status", run.id)
        assert status.returncode == 0, status.stderr
        assert "message      #1 on 'reply' id bad-reply sent " in status.stdout
        assert why in status.stdout, status.stdout
        base = dashboard_process(world, OUTLAST_USERS=str(users))
        page = httpx.get(f"{base}/runs/{run.id}", headers={"Authorization": f"Bearer {token}"})
        assert page.status_code == 200, page.text
        assert why in page.text and "bad-reply" in page.text, page.text
        sql.execute(send, (run.id, "reply", '{"text": "ok", "score": 2}', "good-reply"))
        sql.execute(send, (run.id, "count", "3", None))
        assert done(bare, run.id) == {"text": "ok", "score": 2, "count": 3}
    kept = world.sql("SELECT channel, set_aside IS NULL, taken_seq IS NULL FROM messages ORDER BY seq")
    assert kept == [("reply", False, True), ("reply", True, False), ("count", True, False)]


def test_a_payload_set_aside_among_the_first_of_several_waits(world: World, bare: Client) -> None:
    """A receive among ``run.first``'s waits looks at the inbox the same way: the payload its type
    refuses is set aside, the run waits on (reason ``first``), and the valid one wins."""
    run = bare.enqueue("support_or_timer")
    send = "SELECT * FROM outlast_send(%s, 'reply', %s::jsonb, %s)"
    with (
        worker(world, chat.app),
        psycopg.connect(world.database_url, options=f"-c search_path={world.schema}", autocommit=True) as sql,
    ):
        reach(bare, run.id, "waiting")
        sql.execute(send, (run.id, '{"text": ["not", "a", "text"]}', "bad"))
        wait_for(lambda: stored(world, "SELECT count(*) FROM messages WHERE set_aside IS NOT NULL") == 1)
        wait_for(lambda: bare.status(run.id).state == "waiting", what="the run to wait again")
        assert bare.status(run.id).reason == "first"
        sql.execute(send, (run.id, '{"text": "ok"}', "good"))
        assert done(bare, run.id) == {"text": "ok", "score": 0}
    why = world.sql("SELECT set_aside FROM messages WHERE message_id = 'bad'")[0][0]
    assert why == "not a valid Reply (text: Input should be a valid string)", why
