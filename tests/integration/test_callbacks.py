"""Callbacks from the world, on real Postgres and Redis: ``run.callback`` hands out a signed URL
(journaled once), and ``outlast.web.callbacks`` (also the dashboard's ``/callbacks/``) makes a POST
to it a message. A repeated delivery or ``Idempotency-Key`` is one message; an expired, altered or
foreign token is refused and nothing is stored; the body is bounded."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from starlette.testclient import TestClient

from outlast import Client
from outlast._callbacks import sign
from outlast.dashboard.app import create_app
from outlast.web import Callbacks
from tests.apps import chat
from tests.conftest import World, wait_for
from tests.integration.test_messages import done, journal
from tests.integration.test_waiting import reach, worker

KEY = "kA7-qc3Rz0vN1uWd6yXe9mTp2sLb5hGf8jHo4iK"


@pytest.fixture
def client(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[Client]:
    monkeypatch.setenv("OUTLAST_DATABASE_URL", world.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", world.schema)
    chat.setup(world.database_url, world.schema)
    with Client(settings=world.settings(secret_key=KEY), app=chat.app) as c:
        yield c


def url_of(world: World, run_id: str) -> str:
    rows = wait_for(
        lambda: world.sql("SELECT message->>'url' FROM handled WHERE run_id = %s", run_id), what="the URL"
    )
    return str(rows[0][0])


def messages(world: World, run_id: str) -> int:
    return int(world.sql("SELECT count(*) FROM messages WHERE run_id = %s", run_id)[0][0])


def test_a_post_to_the_callback_becomes_the_message(world: World, client: Client) -> None:
    run = client.enqueue("hook")
    endpoint = Callbacks(settings=world.settings(secret_key=KEY, callback_url="https://x.test/cb"))
    with worker(world, chat.app, secret_key=KEY, callback_url="https://x.test/cb"):
        url = url_of(world, run.id)
        assert url.startswith("https://x.test/cb/")
        token = url.rsplit("/", 1)[1]
        assert run.id not in url  # the run is in the signed token, not in plain sight
        reach(client, run.id, "waiting")
        with TestClient(endpoint, base_url="http://127.0.0.1") as http:
            body = {"status": "paid", "amount": 12}
            first = http.post(f"/{token}", json=body)
            assert first.status_code == 202 and first.json() == {"accepted": True, "duplicate": False}
            again = http.post(f"/{token}", json=body)  # the provider delivers it again
            assert again.json() == {"accepted": True, "duplicate": True}
        result = done(client, run.id)
    assert result == {"url": url, "paid": body}
    assert messages(world, run.id) == 1
    # the token is not in the journal: only its channel and expiry (a reader could use it)
    entry = next(d for k, _, d in journal(world, run.id) if k == "callback")
    assert set(entry) - {"seq", "kind", "op"} == {"channel", "expires_at"} and token not in json.dumps(entry)


def test_the_same_idempotency_key_is_one_message(world: World, client: Client) -> None:
    run = client.enqueue("converse", {"turns": 2, "channel": "paid"})
    token = sign(KEY, run.id, "paid", datetime.now(UTC) + timedelta(hours=1))
    with TestClient(Callbacks(settings=world.settings(secret_key=KEY)), base_url="http://127.0.0.1") as http:
        keyed = http.post(f"/{token}", json={"n": 1}, headers={"Idempotency-Key": "evt-1"})
        again = http.post(f"/{token}", json={"n": 1, "retry": True}, headers={"Idempotency-Key": "evt-1"})
        assert keyed.json()["duplicate"] is False and again.json()["duplicate"] is True
        http.post(f"/{token}", json={"n": 2}, headers={"Idempotency-Key": "evt-2"})
    with worker(world, chat.app, secret_key=KEY):
        assert done(client, run.id) == [{"n": 1}, {"n": 2}]


def test_a_bad_token_is_refused_and_nothing_is_stored(world: World, client: Client) -> None:
    run = client.enqueue("converse", {"turns": 1, "channel": "paid"})
    good = sign(KEY, run.id, "paid", datetime.now(UTC) + timedelta(hours=1))
    expired = sign(KEY, run.id, "paid", datetime.now(UTC) - timedelta(seconds=1))
    foreign = sign("f" * 40, run.id, "paid", datetime.now(UTC) + timedelta(hours=1))
    _body, mac = good.split(".")
    other = sign(KEY, "another-run", "paid", datetime.now(UTC) + timedelta(hours=1)).split(".")[0]
    altered = f"{other}.{mac}"  # another run's claims under this run's signature
    endpoint = Callbacks(settings=world.settings(secret_key=KEY, max_payload=1024))
    with TestClient(endpoint, base_url="http://127.0.0.1") as http:
        for token in (expired, foreign, altered, good[:-2], "x", good + "x"):
            r = http.post(f"/{token}", json={"n": 1})
            assert r.status_code == 404 and r.json() == {"error": "not a callback"}
        big = http.post(f"/{good}", content=b"x" * 2000)
        assert big.status_code == 413
        assert messages(world, run.id) == 0
        closed = sign(KEY, "no-such-run", "paid", datetime.now(UTC) + timedelta(hours=1))
        gone = http.post(f"/{closed}", json={"n": 1})
        assert gone.status_code == 404 and "no-such-run" not in gone.text
        ok = http.post(f"/{good}", content=b"plain text", headers={"content-type": "text/plain"})
        assert ok.status_code == 202
    assert world.sql("SELECT payload, via FROM messages WHERE run_id = %s", run.id) == [
        ("plain text", "callback")
    ]


def test_the_dashboard_serves_callbacks_without_an_account(world: World, client: Client) -> None:
    run = client.enqueue("converse", {"turns": 1, "channel": "paid"})
    token = sign(KEY, run.id, "paid", datetime.now(UTC) + timedelta(hours=1))
    with TestClient(create_app(world.settings(secret_key=KEY)), base_url="http://127.0.0.1") as http:
        r = http.post(f"/callbacks/{token}", json={"ok": True})
        assert r.status_code == 202, r.text
        assert http.post("/callbacks/nope", json={}).status_code == 404
    assert messages(world, run.id) == 1
