"""Messages through the HTTP API and the run page: ``POST /api/runs/{id}/messages/{channel}`` (the
``Idempotency-Key`` header is the message id), allowed to operators and to the sender role only;
the run page lists the messages (sent, taken by which operation) and has a form to send one."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from starlette.testclient import TestClient

from outlast import Client
from outlast.dashboard import create_app
from outlast.identity import add_user
from outlast.settings import Settings
from tests.apps import chat
from tests.conftest import World
from tests.integration.test_dashboard_http import sign_in
from tests.integration.test_messages import done
from tests.integration.test_waiting import worker


@pytest.fixture
def people(world: World, monkeypatch: pytest.MonkeyPatch) -> Iterator[tuple[Settings, dict[str, str]]]:
    monkeypatch.setenv("OUTLAST_DATABASE_URL", world.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", world.schema)
    chat.setup(world.database_url, world.schema)
    users = world.tmp / "users.toml"
    users.write_text("")
    tokens = {
        "olga": add_user(users, "olga", ["operators"]),
        "sam": add_user(users, "sam", ["senders"]),
        "bob": add_user(users, "bob", ["viewers"]),
    }
    yield world.settings(users=str(users)), tokens


def bearer(token: str, **more: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}", **more}


def test_the_api_sends_with_an_idempotency_key_and_checks_roles(
    world: World, people: tuple[Settings, dict[str, str]]
) -> None:
    settings, t = people
    with Client(settings=settings, app=chat.app) as c, TestClient(create_app(settings, app=chat.app)) as http:
        run = c.enqueue("support")
        url = f"/api/runs/{run.id}/messages/reply"
        viewer = http.post(url, json={"text": "hi"}, headers=bearer(t["bob"]))
        assert viewer.status_code == 403 and "operator role" in viewer.json()["error"]
        sent = http.post(url, json={"text": "hi"}, headers=bearer(t["sam"], **{"Idempotency-Key": "k-1"}))
        assert sent.status_code == 201, sent.text
        assert sent.json()["message_id"] == "k-1" and sent.json()["duplicate"] is False
        again = http.post(url, json={"text": "hi"}, headers=bearer(t["olga"], **{"Idempotency-Key": "k-1"}))
        assert again.status_code == 200 and again.json()["duplicate"] is True
        bad = http.post(url, json={"score": 1}, headers=bearer(t["olga"]))  # the app's type: a Reply
        assert bad.status_code == 400 and f"run '{run.id}', channel 'reply'" in bad.json()["error"]
        gone = http.post("/api/runs/nope/messages/reply", json=1, headers=bearer(t["olga"]))
        assert gone.status_code == 409 and "no such run" in gone.json()["error"]
        # the sender role sends, and does nothing else an operator does
        cancel = http.post(f"/api/runs/{run.id}/cancel", json={}, headers=bearer(t["sam"]))
        assert cancel.status_code == 403
        http.post(f"/api/runs/{run.id}/messages/count", json=3, headers=bearer(t["sam"]))
        with worker(world, chat.app):
            assert done(c, run.id) == {"text": "hi", "score": 0, "count": 3}
        page = http.get(f"/runs/{run.id}", headers=bearer(t["bob"], accept="text/html"))
        assert page.status_code == 200 and 'id="messages"' in page.text
        assert "op-1 (journal #" in page.text and "k-1" in page.text
        assert 'class="send"' not in page.text  # a viewer gets no form (nor does a final run)


def test_the_run_page_form_sends(world: World, people: tuple[Settings, dict[str, str]]) -> None:
    settings, t = people
    with Client(settings=settings, app=chat.app) as c, TestClient(create_app(settings)) as http:
        run = c.enqueue("converse", {"turns": 1})
        csrf = sign_in(http, t["sam"])
        page = http.get(f"/runs/{run.id}", headers={"accept": "text/html"})
        assert 'class="send"' in page.text
        form = {"csrf": csrf, "channel": "in", "payload": '{"from": "form"}'}
        posted = http.post(f"/runs/{run.id}/send", data=form, follow_redirects=False)
        assert posted.status_code in (200, 303), posted.text
        assert [m["payload"] for m in c.messages(run.id)] == [{"from": "form"}]


def test_the_api_sends_a_message_past_the_inline_limit_as_the_client_does(
    world: World, people: tuple[Settings, dict[str, str]]
) -> None:
    """The API takes what ``client.send`` takes: up to ``OUTLAST_MAX_REFERENCED``, held by reference."""
    _, t = people
    settings = world.settings(users=str(world.tmp / "users.toml"), max_payload=4096, max_referenced=100_000)
    with Client(settings=settings, app=chat.app) as c, TestClient(create_app(settings, app=chat.app)) as http:
        run = c.enqueue("support")
        url = f"/api/runs/{run.id}/messages/reply"
        text = "x" * 60_000  # past twice the inline limit, the API's bound before
        sent = http.post(url, json={"text": text}, headers=bearer(t["sam"]))
        assert sent.status_code == 201, sent.text
        assert [m["payload"]["text"] == text for m in c.messages(run.id)] == [True]
        (row,) = world.sql("SELECT payload::text FROM messages WHERE run_id = %s", run.id)
        assert len(row[0]) < 200  # held by reference
        past = http.post(url, json={"text": "x" * 120_000}, headers=bearer(t["sam"]))
        assert past.status_code == 413 and "100000 bytes" in past.json()["error"]
