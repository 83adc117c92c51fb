"""Callbacks from the world, on real Postgres and Redis: ``run.callback`` hands out a signed URL
(journaled once), and ``outlast.web.callbacks`` (also the dashboard's ``/callbacks/``) makes a POST
to it a message. A repeated delivery or ``Idempotency-Key`` is one message; an expired, altered or
foreign token is refused and nothing is stored; the body is bounded. Through a real ``outlast
dashboard`` and worker: the URL is a bearer credential no viewer reads anywhere; only a token's
canonical text verifies; a key or a message id is scoped to its callback and channel; a token is
refused by a later run of the same id."""

from __future__ import annotations

import io
import json
import time
import zipfile
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import httpx2 as httpx
import pytest
from starlette.testclient import TestClient

from outlast import Client
from outlast._callbacks import sign
from outlast._model import incarnation
from outlast.dashboard.app import create_app
from outlast.identity import add_user
from outlast.web import Callbacks
from tests.apps import chat
from tests.conftest import World, wait_for
from tests.dashboard import dashboard_process, served
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
    # the tool was given the URL (url_of reads what it wrote); the run's result shows it masked
    assert result == {"url": "https://x.test/cb/[secret]", "paid": body}
    assert messages(world, run.id) == 1
    # the token is not in the journal: its channel, expiry and the run's incarnation (a reader could use it)
    entry = next(d for k, _, d in journal(world, run.id) if k == "callback")
    assert set(entry) - {"seq", "kind", "op"} == {"channel", "expires_at", "born"}
    assert token not in json.dumps(journal(world, run.id))


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
    endpoint = Callbacks(settings=world.settings(secret_key=KEY, max_payload=1024, max_referenced=1024))
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


CHAT = "tests.apps.chat:app"


def test_no_viewer_reads_a_callback_url_the_tool_is_given(world: World, client: Client) -> None:
    """docs/conversations.md's pattern: the URL handed to a tool, and shown as state, an event and
    the result. Every place a viewer reads (the API, the run page, the bundle, events and state,
    the CLI, the worker's log with payloads on) shows it masked; the tool got the real one."""
    users = world.tmp / "users.toml"
    bob = add_user(users, "bob", ["viewers"])  # may look, not act
    env = {"OUTLAST_SECRET_KEY": KEY, "OUTLAST_USERS": str(users)}
    base = dashboard_process(world, **env)
    world.worker(CHAT, OUTLAST_CALLBACK_URL=f"{base}/callbacks", OUTLAST_LOG_PAYLOADS="on", **env)
    run = client.enqueue("pay", {"order": "A7"})
    url = url_of(world, run.id)  # what the tool was given (it keeps it in its own table)
    token = url.rsplit("/", 1)[1]
    mac = token.split(".")[1]
    reach(client, run.id, "waiting")
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {bob}"}, timeout=10) as http:
        seen = {
            "api": http.get(f"/api/runs/{run.id}").text,
            "page": http.get(f"/runs/{run.id}").text,
            "state": http.get(f"/api/runs/{run.id}/state").text,
        }
        assert "/callbacks/[secret]" in seen["api"] and "/callbacks/[secret]" in seen["page"]
        forged = http.post(url.replace(token, "[secret]"), json={"status": "paid"})
        assert forged.status_code == 404  # what a viewer reads is no callback
        real = httpx.post(url, json={"status": "paid"}, timeout=10)  # the provider, with the real URL
        assert real.status_code == 202, real.text
        result = done(client, run.id)
        assert result["confirmation"] == {"status": "paid"}
        assert result["url"] == f"{base}/callbacks/[secret]"
        seen["api, ended"] = http.get(f"/api/runs/{run.id}").text
        seen["page, ended"] = http.get(f"/runs/{run.id}").text
        seen["events"] = http.get(f"/api/runs/{run.id}/events").text  # ends with the run
        assert "custom:payment" in seen["events"]
        bundle = http.get(f"/api/runs/{run.id}/bundle")
        assert bundle.status_code == 200
        with zipfile.ZipFile(io.BytesIO(bundle.content)) as z:
            seen |= {f"bundle {n}": z.read(n).decode() for n in z.namelist()}
    op = next(e.op_id for e in client.journal(run.id) if e.kind == "intention")
    for args in (["status", run.id], ["status", run.id, "--op", op], ["events", run.id], ["state", run.id]):
        got = world.cli(*args, **env)
        assert got.returncode == 0, got.stderr
        seen[" ".join(args[:1] + args[2:])] = got.stdout + got.stderr
    seen["worker log"] = world.logs()
    assert '"notify_url"' in seen["worker log"]  # its dispatches were logged with their arguments
    assert any("[secret]" in text for name, text in seen.items() if name.startswith("bundle"))
    for where, text in seen.items():
        assert mac not in text and token not in text, f"the callback's token is readable in {where}"


def token_of(world: World, client: Client, run_id: str, channel: str) -> str:
    """The token a worker hands out for ``channel`` of the run (bound to its incarnation)."""
    born = incarnation(client.status(run_id).created_at)
    return sign(KEY, run_id, channel, datetime.now(UTC) + timedelta(hours=1), born)


def test_only_the_canonical_text_of_a_token_verifies(world: World, client: Client) -> None:
    """Base64 decoded leniently took a padded signature, another last character (its unused bits)
    or characters it skips: each a new URL, and a new delivery key for the same body."""
    run = client.enqueue("converse", {"turns": 1, "channel": "paid"})
    token = token_of(world, client, run.id, "paid")
    alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_"
    last = alphabet.index(token[-1])
    other_bits = alphabet[(last & 0b110000) | ((last + 1) & 0b1111)]  # the same 32 bytes decoded
    variants = [token + "=", token + "%3D%3D", token[:-1] + other_bits, token[:-5] + "!" + token[-5:]]
    variants.append(token[:-5] + "%0A" + token[-5:])
    with served(world.settings(secret_key=KEY)) as base:
        for variant in variants:
            got = httpx.post(f"{base}/callbacks/{variant}", json={"n": 1}, timeout=10)
            assert got.status_code == 404 and got.json() == {"error": "not a callback"}, variant
        assert messages(world, run.id) == 0
        ok = httpx.post(f"{base}/callbacks/{token}", json={"n": 1}, timeout=10)
        assert ok.status_code == 202 and ok.json()["duplicate"] is False
    assert messages(world, run.id) == 1


def test_keys_and_ids_are_scoped_to_their_callback_and_channel(world: World, client: Client) -> None:
    """The same Idempotency-Key on two channels' callbacks is two messages; a sender's id cannot
    take a callback's key first; an id reused on another channel is a 409 naming the first one."""
    users = world.tmp / "users.toml"
    sam = add_user(users, "sam", ["senders"])
    run = client.enqueue("two")
    a, b = token_of(world, client, run.id, "a"), token_of(world, client, run.id, "b")
    client.send(run.id, "a", {"claimed": True}, message_id="callback:evt-2")  # a sender, in advance
    with served(world.settings(secret_key=KEY, users=str(users))) as base:
        for token, n in ((a, 1), (b, 2)):
            got = httpx.post(f"{base}/callbacks/{token}", json={"n": n}, headers={"Idempotency-Key": "evt-1"})
            assert got.status_code == 202 and got.json()["duplicate"] is False, got.text
        got = httpx.post(f"{base}/callbacks/{a}", json={"n": 3}, headers={"Idempotency-Key": "evt-2"})
        assert got.json() == {"accepted": True, "duplicate": False}
        again = httpx.post(f"{base}/callbacks/{a}", json={"n": 3}, headers={"Idempotency-Key": "evt-2"})
        assert again.json() == {"accepted": True, "duplicate": True}

        api = f"{base}/api/runs/{run.id}/messages"
        sender = {"Authorization": f"Bearer {sam}", "Idempotency-Key": "m-1"}
        assert httpx.post(f"{api}/a", json={"n": 4}, headers=sender).status_code == 201
        assert httpx.post(f"{api}/a", json={"n": 4}, headers=sender).status_code == 200  # a retry
        other = httpx.post(f"{api}/b", json={"n": 4}, headers=sender)
        assert other.status_code == 409, other.text
        assert "already sent on channel 'a'" in other.json()["error"]
    sent = world.sql("SELECT channel, payload FROM messages WHERE run_id = %s ORDER BY seq", run.id)
    claimed = ("a", {"claimed": True})
    assert sent == [claimed, ("a", {"n": 1}), ("b", {"n": 2}), ("a", {"n": 3}), ("a", {"n": 4})]


def test_a_token_is_refused_by_a_later_run_of_the_same_id(world: World, client: Client) -> None:
    """A run pruned, and a new run under its id: the old run's URL does not reach the new one."""
    first = client.enqueue("hook", run_id="order-9")
    with worker(world, chat.app, secret_key=KEY):
        url = url_of(world, first.id)
        reach(client, first.id, "waiting")
        client.cancel(first.id)
        reach(client, first.id, "cancelled")
    time.sleep(0.2)
    client.prune(0.1)
    assert world.sql("SELECT count(*) FROM runs WHERE id = 'order-9'") == [(0,)]
    second = client.enqueue("converse", {"turns": 1, "channel": "paid"}, run_id="order-9")
    token = url.rsplit("/", 1)[1]
    with served(world.settings(secret_key=KEY)) as base:
        got = httpx.post(f"{base}/callbacks/{token}", json={"forged": True}, timeout=10)
        assert got.status_code == 404 and got.json() == {"error": "not a callback"}
        assert messages(world, second.id) == 0
        fresh = token_of(world, client, second.id, "paid")  # the new run's own is good
        assert httpx.post(f"{base}/callbacks/{fresh}", json={"ok": True}, timeout=10).status_code == 202


def test_a_run_an_earlier_version_journaled_replays_and_takes_its_callback(
    world: World, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A run that waits across the upgrade: an earlier version journaled its callback without an
    incarnation, signed its token without one, and journaled the tool's arguments with the URL in
    clear. Its URL is still good, and its replay (which now masks the URL) takes the delivery."""
    from outlast._secrets import Secrets
    from outlast.worker import waits as waits_module

    run = client.enqueue("hook")
    with monkeypatch.context() as earlier:
        earlier.setattr(waits_module, "incarnation", lambda _: None)
        earlier.setattr(Secrets, "known", lambda self, value: None)
        with worker(world, chat.app, secret_key=KEY):
            url = url_of(world, run.id)
            reach(client, run.id, "waiting")
    token = url.rsplit("/", 1)[1]
    assert token in json.dumps(journal(world, run.id))  # in clear, as an earlier version left it
    with worker(world, chat.app, secret_key=KEY), served(world.settings(secret_key=KEY)) as base:
        got = httpx.post(f"{base}/callbacks/{token}", json={"paid": 1}, timeout=10)
        assert got.status_code == 202, got.text
        assert done(client, run.id) == {"url": "/callbacks/[secret]", "paid": {"paid": 1}}
