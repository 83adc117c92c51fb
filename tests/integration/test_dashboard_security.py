"""What security probes of the dashboard found, each closed: roles (viewers see and do not act, on
every route), revocation without a restart, run ids encoded in every URL, a bundle made in memory
under a quoted name, client addresses from the right-most untrusted hop, a limiter in Postgres that
is pruned and keyed on the real peer, a capped sign-in body, bad input refused with a 400 that says
why, users and groups never sharing a name; several dashboard processes sharing sessions; through
the real command, no local process passing for a trusted proxy and the limiter keyed on parsed
addresses only (IPv6 by its /64); and the database's address never shown to a caller not signed
in."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import html
import io
import json
import os
import re
import secrets
import subprocess
import sys
import tempfile
import time
import zipfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urljoin

import httpx2 as httpx
import pytest
from starlette.routing import Route
from starlette.testclient import TestClient
from structlog.testing import capture_logs

from outlast import _bundle as bundle
from outlast._journal import args_hash
from outlast.dashboard import create_app
from outlast.dashboard.app import UNAVAILABLE
from outlast.dashboard.auth import LOGIN_TRIES, PROXY_TRIES
from outlast.errors import ConfigError
from outlast.identity import Users, add_user
from outlast.producer import AsyncClient
from outlast.producer.admission import Admission
from tests.conftest import ROOT, World, wait_for
from tests.dashboard import Desk, dashboard_process, desk

URL = "http://127.0.0.1"


@pytest.fixture
def d(world: World) -> Iterator[Desk]:
    with desk(world) as it:
        yield it


@pytest.fixture
def http(d: Desk) -> Iterator[TestClient]:
    with TestClient(create_app(d.settings), base_url=URL) as tc:
        yield tc


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def csrf_in(text: str) -> str:
    found = re.search(r'name="csrf" value="([0-9a-f]+)"', text)
    assert found is not None, text[:500]
    return found.group(1)


def sign_in(http: TestClient, token: str) -> str:
    """Sign in through the form; returns the CSRF token the pages' forms carry."""
    csrf = csrf_in(http.get("/login").text)
    signed = http.post("/login", data={"csrf": csrf, "token": token}, follow_redirects=False)
    assert signed.status_code == 303, signed.text
    return csrf_in(http.get("/").text)


# Each act, and the role it takes. Every POST route but signing in and out is listed here (the
# test below checks that), so a new act cannot be added without saying who may do it.
ACTS = {
    "/api/runs/{run_id:path}/resolve/{op_id}": "approver",
    "/api/runs/{run_id:path}/cancel": "operator",
    "/api/runs/{run_id:path}/resume": "operator",
    "/api/approvals/{run_id:path}/{approval_id}": "approver",
    "/api/dead-letters/{queue}/{entry}/requeue": "operator",
    "/runs/{run_id:path}/resolve/{op_id}": "approver",
    "/runs/{run_id:path}/cancel": "operator",
    "/runs/{run_id:path}/resume": "operator",
    "/approvals/{run_id:path}/{approval_id}": "approver",
    "/fleet/requeue": "operator",
    "/api/runs/{run_id:path}/retry": "operator",
    "/runs/{run_id:path}/retry": "operator",
    "/api/schedules/{name}/{act}": "operator",
    "/schedules/{name}/{act}": "operator",
    "/api/batch/cancel": "operator",
    "/api/batch/resume": "operator",
    "/api/batch/retry": "operator",
    "/batch/{act}": "operator",
    "/api/runs/{run_id:path}/messages/{channel}": "operator",  # or a sender (test_messages_http)
    "/runs/{run_id:path}/send": "operator",
    "/api/runs/{run_id:path}/requests/{request_id}": "operator",
    "/runs/{run_id:path}/respond/{request_id}": "operator",
    "/api/pause": "operator",
    "/api/unpause": "operator",
}


def test_each_route_for_each_role(d: Desk, http: TestClient) -> None:
    posts = {
        r.path
        for r in http.app.routes  # type: ignore[attr-defined]
        if isinstance(r, Route) and "POST" in (r.methods or ()) and r.path not in ("/login", "/logout")
    }
    assert posts - {"/callbacks/{token}"} == set(ACTS)  # a callback's signed token is its own key
    gets = [
        re.sub(r"\{[^}]+\}", "x", r.path)
        for r in http.app.routes  # type: ignore[attr-defined]
        if isinstance(r, Route) and "GET" in (r.methods or ()) and r.path not in ("/login", "/live")
    ]
    people = {"viewer": d.bob, "operator": d.olga, "approver": d.alice}
    for role, token in people.items():
        for path in gets:  # everyone sees everything (an unknown run is a 404, never a 403)
            assert http.get(path, headers=bearer(token)).status_code in (200, 404), (role, path)
        with TestClient(create_app(d.settings), base_url=URL) as browser:
            csrf = sign_in(browser, token)
            for route, needs in ACTS.items():
                path = re.sub(r"\{[^}]+\}", "x", route)
                if path.startswith("/api/"):
                    got = http.post(path, json={}, headers=bearer(token))
                    why = got.json()["error"] if got.status_code == 403 else ""
                else:
                    got = browser.post(path, data={"csrf": csrf}, follow_redirects=False)
                    why = html.unescape(got.text)
                if role == needs:
                    assert got.status_code != 403, (role, path, got.text[:300])
                else:
                    assert got.status_code == 403, (role, path, got.status_code)
                    assert f"takes the {needs} role" in why, (role, path, why[:300])
    me = http.get("/api/me", headers=bearer(d.bob)).json()
    assert me["roles"] == ["viewer"]
    assert http.get("/api/me", headers=bearer(d.alice)).json()["roles"] == ["approver", "viewer"]


def test_a_viewer_acts_on_nothing_an_operator_and_an_approver_do(d: Desk, http: TestClient) -> None:
    run = d.client.enqueue("bill", {"amount": 3})
    wait_for(lambda: d.client.status(run.id).reason == "in_doubt", what="the charge to be in doubt")
    resolve = f"/api/runs/{run.id}/resolve/op-1"
    body = {"executed": False, "comment": "the bank shows nothing"}
    for token in (d.bob, d.olga):  # a viewer, an operator: it is an approver's act
        assert http.post(resolve, json=body, headers=bearer(token)).status_code == 403
    assert d.client.status(run.id).reason == "in_doubt" and d.journal(run.id, "resolution") == []
    page = http.get("/in-doubt", headers=bearer(d.olga))
    assert run.id in page.text and "/resolve/" not in page.text  # shown, without the form
    assert http.post(f"/api/runs/{run.id}/cancel", json={}, headers=bearer(d.bob)).status_code == 403
    assert d.client.status(run.id).state == "waiting"
    cancelled = http.post(f"/api/runs/{run.id}/cancel", json={}, headers=bearer(d.olga))
    assert cancelled.status_code == 200, cancelled.text
    d.reach(run.id, "cancelled")


def test_a_removed_user_or_a_new_token_is_refused_without_a_restart(d: Desk, http: TestClient) -> None:
    users = Path(d.settings.users or "")
    sign_in(http, d.alice)
    assert http.get("/api/me").json()["principal"] == "alice"
    assert http.get("/api/me", headers=bearer(d.bob)).status_code == 200

    alice = add_user(users, "alice", ["ops"])  # a new token: the old one and its session end
    assert http.get("/api/me").status_code == 401
    assert http.get("/api/me", headers=bearer(d.alice)).status_code == 401
    assert http.get("/api/me", headers=bearer(alice)).json()["principal"] == "alice"

    sign_in(http, alice)
    assert d.world.sql("SELECT principal FROM dashboard_sessions") == [("alice",)]
    text = users.read_text()
    users.write_text(re.sub(r'\[users\."alice"\]\ngroups = .*\ntoken = .*\n', "", text))  # removed
    assert http.get("/api/me", headers=bearer(d.bob)).status_code == 200  # read again: ends hers
    assert d.world.sql("SELECT principal FROM dashboard_sessions") == []
    assert http.get("/api/me").status_code == 401
    assert http.get("/api/me", headers=bearer(alice)).status_code == 401


def test_a_deleted_users_file_lists_nobody_a_half_written_one_keeps_the_last_good(
    d: Desk, http: TestClient
) -> None:
    users = Path(d.settings.users or "")
    good = users.read_text()
    sign_in(http, d.alice)
    assert http.get("/api/me").json()["principal"] == "alice"

    users.write_text(good[: len(good) // 2] + '\n[users."x\n')  # half-written: not TOML
    with capture_logs() as logs:
        assert http.get("/api/me").json()["principal"] == "alice"  # the last good copy stands
        assert http.get("/api/me", headers=bearer(d.bob)).status_code == 200
    assert [e["event"] for e in logs if e["event"].startswith("users.")] == ["users.unreadable"]

    users.unlink()  # gone: nobody is listed, every session ends
    with capture_logs() as logs:
        assert http.get("/api/me", headers=bearer(d.bob)).status_code == 401
        assert http.get("/api/me").status_code == 401
    assert [e["event"] for e in logs if e["event"].startswith("users.")] == ["users.gone"]
    assert d.world.sql("SELECT principal FROM dashboard_sessions") == []

    users.write_text(good)  # back: its users are known again (the ended session stays ended)
    assert http.get("/api/me", headers=bearer(d.bob)).json()["principal"] == "bob"
    assert http.get("/api/me").status_code == 401


def test_a_session_row_the_dashboard_did_not_make_is_refused_and_none_outlives_its_lifetime(
    d: Desk, http: TestClient
) -> None:
    alice_hash = Users.load(Path(d.settings.users or "")).users["alice"].token_hash
    sign_in(http, d.bob)  # a viewer's own session, to be moved to alice
    assert http.get("/api/me").json()["principal"] == "bob"
    d.world.sql("UPDATE dashboard_sessions SET principal = 'alice', token_hash = %s", alice_hash)
    with capture_logs() as logs:
        assert http.get("/api/me").status_code == 401
    assert [e["event"] for e in logs if e["event"].startswith("session.")] == ["session.forged"]
    assert d.world.sql("SELECT principal FROM dashboard_sessions") == []  # ended

    sid = secrets.token_urlsafe(32)  # minted: the users file's hash and a row written by hand
    d.world.sql(
        "INSERT INTO dashboard_sessions (id_hash, principal, token_hash, expires_at) "
        "VALUES (%s, 'alice', %s, 'infinity')",
        hashlib.sha256(sid.encode()).hexdigest(),
        alice_hash,
    )
    for cookie in (sid, sid + "." + "0" * 64):
        http.cookies.set("outlast_session", cookie)
        assert http.get("/api/me").status_code == 401, cookie
    http.cookies.clear()

    sign_in(http, d.alice)  # a real session whose row is made to last for ever
    d.world.sql("UPDATE dashboard_sessions SET expires_at = 'infinity'")
    assert http.get("/api/me").json()["principal"] == "alice"
    http.app.state.gate.lifetime = 1.0  # type: ignore[attr-defined]
    time.sleep(1.2)
    assert http.get("/api/me").status_code == 401  # its lifetime from its making has gone by


def test_a_proxy_users_csrf_token_changes_with_the_time(d: Desk) -> None:
    settings = d.settings.with_(auth_header="X-Remote-User", trusted_proxies="127.0.0.1")
    app = create_app(settings)
    with TestClient(app, base_url=URL, client=("127.0.0.1", 40000)) as http:
        app.state.gate.csrf_seconds = 1.0
        olga = {"X-Remote-User": "olga"}  # an operator
        token = http.get("/api/me", headers=olga).json()["csrf"]
        cancel = "/api/runs/no-such-run/cancel"
        fresh = http.post(cancel, json={}, headers={**olga, "X-CSRF-Token": token})
        assert fresh.status_code == 404, fresh.text  # past the CSRF check: the run is not there
        time.sleep(2.1)  # two windows on: the token of the one before no longer holds
        stale = http.post(cancel, json={}, headers={**olga, "X-CSRF-Token": token})
        assert stale.status_code == 403 and "X-CSRF-Token" in stale.json()["error"]
        now = http.get("/api/me", headers=olga).json()["csrf"]
        assert now != token
        again = http.post(cancel, json={}, headers={**olga, "X-CSRF-Token": now})
        assert again.status_code == 404, again.text


def legacy_ids(monkeypatch: pytest.MonkeyPatch) -> None:
    """Let the test make runs with ids a new run may no longer take ('/', '..'): runs made before
    that rule keep them, and the dashboard must still show and act on them safely."""

    async def allowed(self: Admission, rows: list[dict[str, Any]]) -> None:
        return None

    monkeypatch.setattr(Admission, "_refuse_unsafe_new_ids", allowed)


def test_run_ids_are_encoded_in_every_url(d: Desk, monkeypatch: pytest.MonkeyPatch) -> None:
    legacy_ids(monkeypatch)
    suffix = os.urandom(3).hex()
    victim = d.client.enqueue("post", {"text": "same"}, run_id=f"victim-{suffix}")
    aimed = d.client.enqueue("post", {"text": "same"}, run_id=f"../approvals/victim-{suffix}/op-1?")
    slashed = d.client.enqueue("post", {"text": "other"}, run_id=f"team/{suffix}")
    for run in (victim, aimed, slashed):
        d.reach(run.id, "awaiting_approval")
    with TestClient(create_app(d.settings), base_url=URL) as http:
        csrf = sign_in(http, d.alice)
        inbox = http.get("/approvals").text
        actions = {
            html.unescape(a)
            for a in re.findall(r'class="approval" id="approval-[^"]*">.*?action="([^"]+)"', inbox, re.S)
        }
        assert f"/approvals/{quote(aimed.id, safe='')}/op-1" in actions
        form = {
            "csrf": csrf,
            "decision": "approve",
            "comment": "ok",
            "args_hash": args_hash({"text": "same"}),
        }
        for action in actions:
            if quote(aimed.id, safe="") in action:  # what a browser posts: the action resolved
                done = http.post(urljoin(f"{URL}/approvals", action), data=form, follow_redirects=False)
                assert done.status_code == 303, done.text
                assert done.headers["location"] == "/runs/" + quote(aimed.id, safe="")
        d.reach(aimed.id, "succeeded", "running")
        assert d.client.status(victim.id).state == "awaiting_approval"  # the other run untouched

        url = f"/approvals/{quote(slashed.id, safe='')}/op-1"
        assert url in {a for a in actions}
        form["args_hash"] = args_hash({"text": "other"})
        assert http.post(url, data=form, follow_redirects=False).status_code == 303
        d.reach(slashed.id, "succeeded", "running")
        page = http.get("/runs/" + quote(slashed.id, safe=""))
        assert page.status_code == 200 and f"/api/runs/{quote(slashed.id, safe='')}/bundle" in page.text
        assert http.get("/api/runs/" + quote(slashed.id, safe="")).json()["run"]["id"] == slashed.id


def test_the_bundle_is_made_in_memory_under_a_quoted_name(
    d: Desk, http: TestClient, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    legacy_ids(monkeypatch)
    odd = d.client.enqueue("bill", {"amount": 1}, run_id="..")
    accented = d.client.enqueue("bill", {"amount": 2}, run_id=f"café-{os.urandom(2).hex()}")
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    got = http.get("/api/runs/%2E%2E/bundle", headers=bearer(d.bob))
    assert got.status_code == 200, got.text
    assert list((tmp_path / "tmp").rglob("*")) == []  # nothing written in it
    assert not (tmp_path / "events.jsonl").exists()  # nor above it
    with zipfile.ZipFile(io.BytesIO(got.content)) as z:
        assert all(n.startswith("run/") for n in z.namelist()), z.namelist()
        assert json.loads(z.read("run/last_state.json"))["run"]["id"] == odd.id
    named = http.get("/api/runs/" + quote(accented.id, safe="") + "/bundle", headers=bearer(d.bob))
    assert named.status_code == 200, named.text
    header = named.headers["content-disposition"]
    assert header == (
        f'attachment; filename="outlast-caf_-{accented.id[-4:]}.zip"; '
        f"filename*=UTF-8''outlast-{quote(accented.id, safe='')}.zip"
    )

    out = tmp_path / "export"  # outlast export: a symbolic link planted in its folder is refused
    out.mkdir()
    target = tmp_path / "precious"
    target.write_text("keep")
    (out / "events.jsonl").symlink_to(target)

    async def export() -> None:
        async with AsyncClient(settings=d.settings) as c:
            await bundle.export(c, odd.id, out)

    with pytest.raises(OSError):
        asyncio.run(export())
    assert target.read_text() == "keep"


def test_client_addresses_and_the_sign_in_limiter(d: Desk) -> None:
    app = create_app(d.settings)
    with TestClient(app, base_url=URL, client=("127.0.0.1", 40000)) as near:
        csrf = csrf_in(near.get("/login").text)
        codes = [
            near.post(
                "/login",
                data={"csrf": csrf, "token": "guess"},
                headers={"X-Forwarded-For": f"198.51.100.{i}"},
            ).status_code
            for i in range(PROXY_TRIES + 1)
        ]
        assert codes == [401] * PROXY_TRIES + [429]  # a new address each time: the peer's own limit

    app = create_app(d.settings)
    with TestClient(app, base_url=URL, client=("192.0.2.50", 40000)) as far:
        csrf = csrf_in(far.get("/login").text)
        tries = [far.post("/login", data={"csrf": csrf, "token": "guess"}).status_code for _ in range(6)]
        assert tries == [401] * LOGIN_TRIES + [429]
        assert len(d.world.sql("SELECT 1 FROM dashboard_sign_ins")) == PROXY_TRIES + 3
        app.state.gate.window = 0.5
        time.sleep(0.6)  # the window goes by: its rows are deleted by the next attempt
        assert far.post("/login", data={"csrf": csrf, "token": "guess"}).status_code == 401
    rows = d.world.sql("SELECT address, tries FROM dashboard_sign_ins ORDER BY address")
    assert rows == [("client:192.0.2.50", 1)], rows


def test_the_sign_in_body_is_capped(http: TestClient) -> None:
    csrf = csrf_in(http.get("/login").text)
    fields = {f"f{i}": "x" * 1000 for i in range(100)}
    big = http.post("/login", data={"csrf": csrf, "token": "t", **fields})
    assert big.status_code == 413 and "over 8192 bytes" in html.unescape(big.text)


def test_bad_input_is_a_400_with_a_reason(d: Desk, http: TestClient) -> None:
    run = d.client.enqueue("post", {"text": "hi"})
    d.reach(run.id, "awaiting_approval")
    me = bearer(d.alice)
    url = f"/api/approvals/{run.id}/op-1"
    body = {"decision": "approve", "args_hash": args_hash({"text": "hi"})}
    deep = b'{"decision": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    for got in (
        http.get("/api/runs?state=%00", headers=me),
        http.get("/api/runs?workflow=a%00b", headers=me),
        http.get("/api/runs/a%00b", headers=me),
        http.get("/api/runs?limit=%C2%B2", headers=me),
        http.post(url, json={**body, "comment": "fine\x00"}, headers=me),
        http.post(url, content=deep, headers={**me, "Content-Type": "application/json"}),
        http.post(
            url, json={**body, "decision": "revise", "comment": "x", "args": "[" * 100_000}, headers=me
        ),
    ):
        error = got.json()["error"]
        assert got.status_code == 400, (got.request.url, got.status_code, error)
        assert "\n" not in error and "Postgres" not in error and "127.0.0.1" not in error, error
    csrf = sign_in(http, d.alice)
    page = http.post(f"/approvals/{run.id}/op-1", data={**body, "comment": "a\x00", "csrf": csrf})
    assert page.status_code == 400 and "NUL" in page.text
    assert d.client.status(run.id).state == "awaiting_approval"


def cursor_of(*row: Any) -> str:
    """A cursor as a forger writes one: the list's own encoding of a row it never gave."""
    return base64.urlsafe_b64encode(json.dumps(row).encode()).decode().rstrip("=")


SECURITY_HEADERS = ("Content-Security-Policy", "X-Content-Type-Options", "X-Frame-Options")


def test_hostile_input_is_a_400_with_its_reason_and_the_security_headers(d: Desk) -> None:
    me = bearer(d.alice)
    deep = '{"a": ' + "[" * 3000 + "]" * 3000 + "}"
    run = d.client.enqueue("post", {"text": "hi"})
    d.reach(run.id, "awaiting_approval")
    big = b'{"decision": "approve", "n": ' + b"9" * 5000 + b"}"
    with (
        capture_logs() as logs,
        TestClient(create_app(d.settings), base_url=URL, raise_server_exceptions=False) as http,
    ):
        answers = [
            *(
                http.get("/api/runs", params={"input": text}, headers=me)
                for text in ('{"a": NaN}', '{"a": Infinity}', '{"a": "\\u0000"}', '{"a": "\\ud800"}', deep)
            ),
            http.get("/", params={"input": deep}, headers=me),
            *(
                http.get(
                    path,
                    params={"cursor": cursor_of("created_at", "2026-01-01T00:00:00+00:00", bad)},
                    headers=me,
                )
                for bad in ("a\x00b", "a\ud800b")
                for path in ("/api/runs", "/api/in-doubt", "/in-doubt")
            ),
            http.post("/login", data={f"f{i}": "x" for i in range(9)}),
            http.post(
                f"/api/approvals/{run.id}/op-1",
                content=big,
                headers={**me, "Content-Type": "application/json"},
            ),
        ]
    for got in answers:
        said = got.json()["error"] if got.headers["content-type"].startswith("application/json") else got.text
        assert got.status_code == 400, (got.request.url, got.status_code, said[:200])
        assert all(h in got.headers for h in SECURITY_HEADERS), (got.request.url, got.headers)
    assert "too many digits" in answers[-1].json()["error"]
    assert "a token and its CSRF token" in html.unescape(answers[-2].text)
    assert [e for e in logs if e.get("log_level") in ("error", "exception")] == []
    assert d.client.status(run.id).state == "awaiting_approval"


def test_a_failure_of_the_dashboards_own_is_a_500_with_the_security_headers(
    d: Desk, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def broken(client: AsyncClient) -> Any:
        raise RuntimeError("a bug, with a detail a caller should not see")

    monkeypatch.setattr("outlast.dashboard.api.fleet_view", broken)
    with (
        capture_logs() as logs,
        TestClient(create_app(d.settings), base_url=URL, raise_server_exceptions=False) as http,
    ):
        got = http.get("/api/fleet", headers=bearer(d.bob))
    assert got.status_code == 500 and "its log says why" in got.json()["error"]
    assert "a detail" not in got.text
    assert all(h in got.headers for h in SECURITY_HEADERS), got.headers
    assert [e["event"] for e in logs if e.get("log_level") == "error"] == ["dashboard.failed"]


def test_users_and_groups_never_share_a_name(tmp_path: Path) -> None:
    users = tmp_path / "users.toml"
    add_user(users, "alice", ["ops"])
    with pytest.raises(ConfigError, match="may not share a name"):
        add_user(users, "ops", [])
    with pytest.raises(ConfigError, match="may not share a name"):
        add_user(users, "carol", ["alice"])
    users.write_text(users.read_text() + '[users."ops"]\ngroups = []\n')
    with pytest.raises(ConfigError, match="'ops' is both a user and a group"):
        Users.load(users)
    users.write_text('[roles]\napprover = ["finance"]\n[users."finance"]\ngroups = []\n')
    with pytest.raises(ConfigError, match="'finance' is both a user and a group"):
        Users.load(users)


def test_two_dashboards_share_a_session_and_a_restart_keeps_it(d: Desk) -> None:
    run = d.client.enqueue("post", {"text": "two"})
    d.reach(run.id, "awaiting_approval")
    with TestClient(create_app(d.settings), base_url=URL) as one:
        csrf = sign_in(one, d.alice)
        cookie = one.cookies["outlast_session"]
        with TestClient(create_app(d.settings), base_url=URL) as two:
            two.cookies.set("outlast_session", cookie)
            assert two.get("/api/me").json()["principal"] == "alice"
            form = {"csrf": csrf, "decision": "approve", "comment": "on the other one"}
            form["args_hash"] = args_hash({"text": "two"})
            decided = two.post(f"/approvals/{run.id}/op-1", data=form, follow_redirects=False)
            assert decided.status_code == 303, decided.text  # its CSRF token holds there too
            guesses = {"csrf": csrf_in(two.get("/login").text), "token": "guess"}
            codes = [two.post("/login", data=guesses).status_code for _ in range(LOGIN_TRIES - 1)]
        assert codes == [401] * (LOGIN_TRIES - 1)  # and one sign-in on the first
        assert one.post("/login", data=guesses).status_code == 429  # one limit for both
    d.reach(run.id, "succeeded", "running")
    with TestClient(create_app(d.settings), base_url=URL) as restarted:
        restarted.cookies.set("outlast_session", cookie)
        assert restarted.get("/api/me").json()["principal"] == "alice"


def test_the_root_path_for_a_reverse_proxy(d: Desk) -> None:
    # the proxy took /outlast off: the dashboard puts it back
    base = dashboard_process(d.world, "--root-path", "/outlast", OUTLAST_USERS=d.settings.users or "")
    page = httpx.get(base + "/login", timeout=2)
    assert 'action="/outlast/login"' in page.text and 'href="/outlast/static/style.css"' in page.text
    cookies = dict(page.cookies)
    signed = httpx.post(
        base + "/login",
        data={"csrf": csrf_in(page.text), "token": d.alice},
        cookies=cookies,
        follow_redirects=False,
    )
    assert signed.status_code == 303 and signed.headers["location"] == "/outlast/"
    assert "Path=/outlast" in signed.headers["set-cookie"]


# Through the real command (uvicorn, with the options outlast dashboard gives it): what a server's
# own proxy-header handling would do to the client's address cannot be seen through TestClient.


def people(world: World) -> tuple[str, str]:
    """A users file with alice (ops) and bob (viewers): its path, and alice's token."""
    users = world.tmp / "people.toml"
    alice = add_user(users, "alice", ["ops"])
    add_user(users, "bob", ["viewers"])
    return str(users), alice


def test_a_local_process_cannot_pass_for_a_trusted_proxy(world: World) -> None:
    users, alice = people(world)
    base = dashboard_process(
        world, OUTLAST_USERS=users, OUTLAST_AUTH_HEADER="X-Remote-User", OUTLAST_TRUSTED_PROXIES="10.0.0.5"
    )
    posing = httpx.get(base + "/api/me", headers={"X-Remote-User": "bob", "X-Forwarded-For": "10.0.0.5"})
    assert posing.status_code == 401, posing.text
    # Nor does the address it writes reach the audit record: its own does.
    me = httpx.get(base + "/api/me", headers={**bearer(alice), "X-Forwarded-For": "203.0.113.9"})
    assert (me.json()["principal"], me.json()["where"]) == ("alice", "127.0.0.1")


def test_a_trusted_proxy_on_loopback_signs_people_in_by_its_header(world: World) -> None:
    users, _ = people(world)
    base = dashboard_process(
        world, OUTLAST_USERS=users, OUTLAST_AUTH_HEADER="X-Remote-User", OUTLAST_TRUSTED_PROXIES="127.0.0.1"
    )
    proxied = {
        "X-Remote-User": "alice",
        "X-Forwarded-For": "203.0.113.9, 192.0.2.7",  # the client wrote the first, nginx added its peer
        "X-Forwarded-Proto": "https",
    }
    me = httpx.get(base + "/api/me", headers=proxied)
    assert me.status_code == 200, me.text
    assert (me.json()["principal"], me.json()["where"]) == ("alice", "192.0.2.7")
    # The proxy says the client came over HTTPS: the dashboard's cookies are Secure.
    assert "secure" in httpx.get(base + "/login", headers=proxied).headers["set-cookie"].lower()
    assert "secure" not in httpx.get(base + "/login").headers["set-cookie"].lower()


def test_secure_cookies_on_marks_them_secure_whatever_the_proxy_says(world: World) -> None:
    users, alice = people(world)
    base = dashboard_process(world, "--secure-cookies", "on", OUTLAST_USERS=users)  # plain HTTP
    page = httpx.get(base + "/login", timeout=5)
    assert "secure" in page.headers["set-cookie"].lower()
    assert page.headers["strict-transport-security"] == "max-age=31536000"
    signed = httpx.post(
        base + "/login",
        data={"csrf": csrf_in(page.text), "token": alice},
        cookies=dict(page.cookies),
        follow_redirects=False,
    )
    assert signed.status_code == 303 and "secure" in signed.headers["set-cookie"].lower()
    refused = httpx.get(base + "/api/me", timeout=5)  # an error carries it too
    assert refused.status_code == 401 and "strict-transport-security" in refused.headers
    with TestClient(create_app(world.settings(users=users)), base_url=URL) as plain:
        page = plain.get("/login")  # auto, the default: plain HTTP, no proxy's word
        assert "secure" not in page.headers["set-cookie"].lower()
        assert "strict-transport-security" not in page.headers
    helped = subprocess.run(
        [sys.executable, "-m", "outlast", "dashboard", "--help"],
        capture_output=True,
        text=True,
        check=True,
        cwd=ROOT,
    )
    assert "--secure-cookies" in helped.stdout and "OUTLAST_DASHBOARD_SECURE_COOKIES" in helped.stdout


def guesses(http: httpx.Client, *forwarded: str) -> list[int]:
    """The status of a sign-in with a wrong token from each address of ``forwarded`` (in
    X-Forwarded-For; "": none sent)."""
    form = {"csrf": csrf_in(http.get("/login").text), "token": "guess"}
    heads = [{"X-Forwarded-For": h} if h else {} for h in forwarded]
    return [http.post("/login", data=form, headers=h).status_code for h in heads]


def test_a_new_forwarded_address_for_each_guess_meets_the_proxys_limit(world: World) -> None:
    base = dashboard_process(world, OUTLAST_USERS=people(world)[0])  # loopback: a trusted proxy
    with httpx.Client(base_url=base) as near:
        codes = guesses(near, *(f"198.51.100.{i}" for i in range(PROXY_TRIES + 1)))
    assert codes == [401] * PROXY_TRIES + [429]


def test_posing_as_an_address_does_not_lock_its_holder_out(world: World) -> None:
    base = dashboard_process(world, OUTLAST_USERS=people(world)[0], OUTLAST_TRUSTED_PROXIES="10.0.0.5")
    holder = httpx.HTTPTransport(local_address="127.0.0.2")
    with httpx.Client(base_url=base) as poser, httpx.Client(base_url=base, transport=holder) as held:
        assert guesses(poser, *["127.0.0.2"] * (LOGIN_TRIES + 1)) == [401] * LOGIN_TRIES + [429]
        assert guesses(held, "") == [401]  # the poser spent its own address's tries


def test_only_an_ip_address_keys_the_limit_and_ipv6_by_its_64(world: World) -> None:
    base = dashboard_process(world, OUTLAST_USERS=people(world)[0])  # loopback: a trusted proxy
    with httpx.Client(base_url=base) as near:
        assert guesses(near, secrets.token_urlsafe(3750)) == [401]  # 5 KB, no address: the peer
        same_64 = [f"2001:db8::{i:x}" for i in range(1, LOGIN_TRIES + 2)]
        assert guesses(near, *same_64) == [401] * LOGIN_TRIES + [429]
        assert guesses(near, "2001:db8:0:1::1") == [401]  # the next /64
    keys = {row[0] for row in world.sql("SELECT address FROM dashboard_sign_ins")}
    assert keys == {"client:127.0.0.1", "client:2001:db8::/64", "client:2001:db8:0:1::/64", "proxy:127.0.0.1"}


def test_a_caller_not_signed_in_is_told_only_that_the_dashboard_cannot_answer(world: World) -> None:
    users, alice = people(world)
    down = world.settings(database_url="postgresql://postgres:hunter2@127.0.0.1:1/db", users=users)
    with capture_logs() as logs, TestClient(create_app(down), base_url=URL) as http:
        page = http.get("/login")
        form = http.post("/login", data={"csrf": "x", "token": "guess"})
        http.cookies.set("outlast_session", "x")
        me = http.get("/api/me")
        http.cookies.clear()
        signed_in = http.get("/api/runs", headers=bearer(alice))  # a token needs no Postgres
    for got in (page, form, me):
        assert got.status_code == 503, got.text
        assert UNAVAILABLE in html.unescape(got.text), got.text
        assert "Postgres" not in got.text and "127.0.0.1" not in got.text and "postgres:" not in got.text
    reason = "cannot reach Postgres at postgresql://postgres:***@127.0.0.1:1/db"
    assert signed_in.status_code == 503 and reason in signed_in.json()["error"]
    logged = [e["error"] for e in logs if e["event"] == "dashboard.unavailable"]
    assert len(logged) == 3 and all(reason in e for e in logged), logs
