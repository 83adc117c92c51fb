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
from tests.integration.test_messages import done
from tests.integration.test_waiting import worker

KEY = "kA7-qc3Rz0vN1uWd6yXe9mTp2sLb5hGf8jHo4iK"


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
    """In SQL, only the channel is checked: a payload its type refuses fails the run at the take."""
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
