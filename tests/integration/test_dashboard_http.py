"""The dashboard's HTTP side, on real Postgres and Redis with a real worker: every route refuses
the unauthenticated, forms need their CSRF token, user text is escaped, the JSON API decides and
resolves, and the journal names the authenticated principal (never a form field)."""

from __future__ import annotations

import asyncio
import html
import io
import json
import re
import subprocess
import sys
import zipfile
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from urllib.parse import quote

import httpx2 as httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.routing import Mount, Route
from starlette.testclient import TestClient

from outlast._journal import args_hash
from outlast.dashboard import create_app
from outlast.dashboard.auth import LOGIN_TRIES, Gate, check_bind
from outlast.errors import ConfigError
from outlast.producer import AsyncClient
from tests.conftest import ROOT, World, wait_for
from tests.dashboard import Desk, desk, free_port

XSS = "<script>alert('x')</script>"


@pytest.fixture
def d(world: World) -> Iterator[Desk]:
    with desk(world) as it:
        yield it


@pytest.fixture
def http(d: Desk) -> Iterator[TestClient]:
    with TestClient(create_app(d.settings), base_url="http://127.0.0.1") as tc:
        yield tc


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def sign_in(http: TestClient, token: str) -> str:
    """Sign in through the form; returns the CSRF token the pages' forms carry."""
    page = http.get("/login")
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert csrf is not None
    signed = http.post("/login", data={"csrf": csrf.group(1), "token": token}, follow_redirects=False)
    assert signed.status_code == 303, signed.text
    cookie = signed.headers["set-cookie"]
    assert "HttpOnly" in cookie and "SameSite=strict" in cookie, cookie
    runs = http.get("/")
    mine = re.search(r'name="csrf" value="([0-9a-f]+)"', runs.text)
    assert runs.status_code == 200 and mine is not None
    return mine.group(1)


def test_every_route_refuses_without_a_valid_token(d: Desk, http: TestClient) -> None:
    paths = []
    for route in http.app.routes:  # type: ignore[attr-defined]
        if isinstance(route, Route) and route.path != "/login" and not route.path.startswith("/callbacks/"):
            path = re.sub(r"\{[^}]+\}", "x", route.path)
            paths += [(m, path) for m in sorted(route.methods or {"GET"}) if m != "HEAD"]
    assert len(paths) >= 15
    for method, path in paths:
        for headers in ({}, bearer("not-a-token"), bearer(""), {"Cookie": "outlast_session=forged"}):
            got = http.request(method, path, headers=headers)
            assert got.status_code == 401, (method, path, headers, got.status_code)
            assert "Content-Security-Policy" in got.headers
    page = http.get("/approvals", headers={"Accept": "text/html"})
    assert page.status_code == 401 and 'action="/login"' in page.text  # the sign-in form, not a run
    assert http.get("/api/me", headers=bearer(d.alice)).json()["principal"] == "alice"


def test_refuses_to_listen_beyond_loopback_without_users(d: Desk) -> None:
    bare = d.settings.with_()
    object.__setattr__(bare, "users", None)
    with pytest.raises(ConfigError, match="OUTLAST_USERS"):
        check_bind("0.0.0.0", bare)
    check_bind("127.0.0.1", bare)
    check_bind("0.0.0.0", d.settings)


def test_api_decisions_name_the_authenticated_principal(d: Desk, http: TestClient) -> None:
    run = d.client.enqueue("post", {"text": XSS})
    d.reach(run.id, "awaiting_approval")
    inbox = http.get("/api/approvals", headers=bearer(d.bob)).json()
    [req] = [a for a in inbox if a["run_id"] == run.id]
    assert req["args"] == {"text": XSS} and req["args_hash"] == args_hash({"text": XSS})
    url = f"/api/approvals/{run.id}/{req['op_id']}"
    body = {"decision": "approve", "comment": "looks fine", "args_hash": req["args_hash"]}

    viewer = http.post(url, json=body, headers=bearer(d.bob))
    assert viewer.status_code == 403 and "approver role" in viewer.json()["error"]
    stale = http.post(url, json={**body, "args_hash": args_hash({"text": "other"})}, headers=bearer(d.alice))
    assert stale.status_code == 409 and "hash" in stale.json()["error"]
    forged = http.post(url, json={**body, "approver": "ops", "principal": "mallory"}, headers=bearer(d.alice))
    assert forged.status_code == 200, forged.text
    assert d.client.wait(run.id, timeout=20).state == "succeeded"

    [decision] = d.journal(run.id, "decision")
    who = str(decision)
    assert "alice" in who and "mallory" not in who and "'how': 'token'" in who, decision
    shown = http.get(f"/api/runs/{run.id}", headers=bearer(d.bob)).json()
    assert shown["run"]["state"] == "succeeded"
    assert any(t["kind"] == "decision" and t["what"] == "journal" for t in shown["timeline"])


def test_forms_need_csrf_and_user_text_is_escaped(d: Desk, http: TestClient) -> None:
    run = d.client.enqueue("post", {"text": XSS})
    d.reach(run.id, "awaiting_approval")
    csrf = sign_in(http, d.alice)
    inbox = http.get("/approvals")
    assert XSS not in inbox.text and "&lt;script&gt;" in inbox.text
    assert "script-src 'self'" in inbox.headers["Content-Security-Policy"]
    form = {"decision": "approve", "comment": XSS, "args_hash": args_hash({"text": XSS})}
    url = f"/approvals/{run.id}/op-1"

    for bad in ({}, {"csrf": "0" * 64}):
        refused = http.post(url, data={**form, **bad}, follow_redirects=False)
        assert refused.status_code == 403 and "CSRF" in refused.text
    assert d.client.status(run.id).state == "awaiting_approval"
    api = http.post(f"/api/approvals/{run.id}/op-1", json=form)  # a session's API call needs it too
    assert api.status_code == 403 and http.get("/api/me").json()["csrf"] == csrf
    done = http.post(url, data={**form, "csrf": csrf}, follow_redirects=False)
    assert done.status_code == 303 and done.headers["location"] == f"/runs/{run.id}"
    assert d.client.wait(run.id, timeout=20).state == "succeeded"
    page = http.get(f"/runs/{run.id}")
    assert XSS not in page.text and page.text.count("&lt;script&gt;") >= 2  # the input and the comment
    [decision] = d.journal(run.id, "decision")
    assert "'how': 'session'" in str(decision) and "alice" in str(decision)


def test_sign_in_is_rate_limited(d: Desk, http: TestClient) -> None:
    page = http.get("/login")
    csrf = re.search(r'name="csrf" value="([0-9a-f]+)"', page.text)
    assert csrf is not None
    codes = [
        http.post("/login", data={"csrf": csrf.group(1), "token": "guess"}).status_code
        for _ in range(LOGIN_TRIES + 1)
    ]
    assert codes == [401] * LOGIN_TRIES + [429]
    right = http.post("/login", data={"csrf": csrf.group(1), "token": d.alice}, follow_redirects=False)
    assert right.status_code == 429  # even the right token waits out the minute


def test_in_doubt_resolved_through_the_api(d: Desk, http: TestClient) -> None:
    run = d.client.enqueue("bill", {"amount": 12})
    wait_for(lambda: d.client.status(run.id).reason == "in_doubt", what="the charge to be in doubt")
    [doubt] = http.get("/api/in-doubt", headers=bearer(d.bob)).json()["runs"]
    [op] = doubt["in_doubt"]
    assert doubt["run"]["id"] == run.id and op["tool"] == "charge"
    url = f"/api/runs/{run.id}/resolve/{op['operation']}"
    bad = http.post(url, json={"executed": True, "comment": "   "}, headers=bearer(d.alice))
    assert bad.status_code == 400
    ok = http.post(
        url,
        json={"executed": True, "result": {"charged": 12}, "comment": "the bank shows it"},
        headers=bearer(d.alice),
    )
    assert ok.status_code == 200, ok.text
    done = d.client.wait(run.id, timeout=20)
    assert done.state == "succeeded" and done.result == {"charge": {"charged": 12}}
    [resolution] = d.journal(run.id, "resolution")
    assert resolution["who"]["principal"] == "alice" and resolution["comment"] == "the bank shows it"


def test_the_trusted_header_only_from_a_trusted_proxy(d: Desk) -> None:
    settings = d.settings.with_(auth_header="X-Remote-User", trusted_proxies="10.1.0.0/16")

    def request(peer: str, user: bytes = b"alice", forwarded: bytes = b"192.0.2.7") -> Request:
        headers = [(b"x-remote-user", user), (b"x-forwarded-for", forwarded)]
        return Request({"type": "http", "headers": headers, "client": (peer, 5000), "path": "/"})

    async def check() -> None:
        async with AsyncClient(settings=settings) as c:
            gate = Gate(settings, c)
            caller = await gate.caller(request("10.1.2.3"))
            assert caller is not None and caller.csrf is not None
            p = caller.principal
            assert (p.name, p.how, p.where, p.groups) == ("alice", "header", "192.0.2.7", frozenset({"ops"}))
            assert await gate.caller(request("10.2.0.1")) is None
            # A proxy's user named like a group would pass for the group among an action's approvers.
            assert await gate.caller(request("10.1.2.3", b"ops")) is None
            # The right-most hop that is not a trusted proxy: those to its left are the client's.
            spoofed = request("10.1.2.3", forwarded=b"203.0.113.9, 192.0.2.7, 10.1.0.5")
            assert gate.where(spoofed) == "192.0.2.7"
            # A hop that is no address: the walk ends at the last proxy believed.
            junk = request("10.1.2.3", forwarded=b"192.0.2.7, x" * 99 + b", 10.1.0.5")
            assert gate.where(junk) == "10.1.0.5"

    asyncio.run(check())


def test_mounted_in_an_application_of_its_own(d: Desk) -> None:
    dashboard = create_app(d.settings)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        await dashboard.state.client.close()  # a mounted app's own lifespan is not run

    host = Starlette(routes=[Mount("/ops/outlast", dashboard)], lifespan=lifespan)
    with TestClient(host, base_url="http://127.0.0.1") as http:
        assert http.get("/ops/outlast/api/me").status_code == 401
        assert http.get("/ops/outlast/api/me", headers=bearer(d.alice)).json()["principal"] == "alice"
        login = http.get("/ops/outlast/login")
        assert (
            'action="/ops/outlast/login"' in login.text
            and 'href="/ops/outlast/static/style.css"' in login.text
        )
        assert http.get("/ops/outlast/static/live.js").status_code == 200


def test_the_command_serves_and_refuses_an_open_address_without_users(d: Desk) -> None:
    refused = d.world.cli("dashboard", "--host", "0.0.0.0")
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1, refused.stderr
    assert "OUTLAST_USERS" in refused.stderr and "Traceback" not in refused.stderr
    port = free_port()
    users = str(d.world.tmp / "users.toml")
    with open(d.world.tmp / "dashboard.log", "wb") as log:
        proc = subprocess.Popen(
            [sys.executable, "-m", "outlast", "dashboard", "--port", str(port)],
            env=d.world.env(OUTLAST_USERS=users),
            stdout=log,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    d.world.procs.append(proc)

    def me(token: str) -> int | None:
        try:
            return httpx.get(f"http://127.0.0.1:{port}/api/me", headers=bearer(token), timeout=2).status_code
        except httpx.TransportError:
            return None

    assert wait_for(lambda: me(d.bob), 20, what="the dashboard to answer") == 200
    assert me("wrong") == 401


def test_revised_arguments_are_checked_against_the_tool(d: Desk) -> None:
    from tests.apps.desk import app as desk_app

    run = d.client.enqueue("post", {"text": "a long text"})
    d.reach(run.id, "awaiting_approval")
    url = f"/api/approvals/{run.id}/op-1"
    body = {"decision": "revise", "comment": "shorter", "args_hash": args_hash({"text": "a long text"})}
    with TestClient(create_app(d.settings, app=desk_app), base_url="http://127.0.0.1") as http:
        for args, why in (
            ({"txt": "short"}, "text: Field required"),
            ("[1]", "JSON object"),
            ("{", "not JSON"),
        ):
            bad = http.post(url, json={**body, "args": args}, headers=bearer(d.alice))
            assert bad.status_code == 400 and why in bad.json()["error"], bad.text
        assert d.client.status(run.id).state == "awaiting_approval"
        ok = http.post(url, json={**body, "args": '{"text": "short"}'}, headers=bearer(d.alice))
        assert ok.status_code == 200, ok.text
    wait_for(lambda: len(d.client.approvals(run.id)) == 2, what="the revised action's own request")
    first, second = d.client.approvals(run.id)
    assert (first["status"], first["new_args"], second["args"]) == (
        "revised",
        {"text": "short"},
        {"text": "short"},
    )


def test_the_fleet_workers_queues_and_a_dead_letter_requeued(d: Desk, http: TestClient) -> None:
    run = d.client.enqueue("post", {"text": "hello"})
    d.reach(run.id, "awaiting_approval")
    r = d.world.redis()
    letter = r.xadd(f"{d.world.prefix}:{{default}}:dead", {"run": run.id, "_entry": "9-0", "_reason": "test"})
    r.close()
    d.world.sql(  # a run parked by a bug, of a workflow no worker here serves
        "INSERT INTO runs (id, workflow, queue, input, input_hash, state, reason) "
        "VALUES ('b1', 'pay', 'other', '{}', 'h', 'waiting', 'workflow_error')"
    )
    fleet = http.get("/api/fleet", headers=bearer(d.bob)).json()
    assert [(p["workflow"], p["reason"], p["runs"]) for p in fleet["parked"]] == [
        ("pay", "workflow_error", 1)
    ]
    assert [w["live"] for w in fleet["workers"]] == [True]
    [default] = [q for q in fleet["queues"] if q["queue"] == "default"]
    assert default["dead_letters"] == 1 and default["runs"] == {"awaiting_approval": 1}
    assert [x["_id"] for x in fleet["dead_letters"]["default"]] == [letter]
    csrf = sign_in(http, d.olga)
    page = http.get("/fleet")
    assert letter in page.text and "live" in page.text
    assert "outlast resume --workflow pay" in html.unescape(page.text)  # the parked runs' way out
    assert http.post("/fleet/requeue", data={"queue": "default", "entry": letter}).status_code == 403
    done = http.post("/fleet/requeue", data={"queue": "default", "entry": letter, "csrf": csrf})
    assert done.status_code == 200
    assert f"run '{run.id}' (awaiting_approval) requeued" in html.unescape(done.text)
    assert http.get("/api/fleet", headers=bearer(d.bob)).json()["dead_letters"]["default"] == []
    assert "requeued" in [e["kind"] for e in d.client.events(run.id)]
    again = http.post(f"/api/dead-letters/default/{letter}/requeue", headers=bearer(d.olga), json={})
    assert again.status_code == 404


def test_a_rejected_run_shows_its_error_and_its_bundle_downloads(d: Desk, http: TestClient) -> None:
    run = d.client.enqueue("post", {"text": "no"})
    d.reach(run.id, "awaiting_approval")
    body = {"decision": "reject", "comment": "not this", "args_hash": args_hash({"text": "no"})}
    assert http.post(f"/api/approvals/{run.id}/op-1", json=body, headers=bearer(d.alice)).status_code == 200
    assert d.client.wait(run.id, timeout=20).state == "failed"
    csrf = sign_in(http, d.bob)
    page = html.unescape(http.get(f"/runs/{run.id}").text)
    assert "ApprovalRejected" in page and "Traceback (most recent call last)" in page and "not this" in page
    bundle = http.get(f"/api/runs/{run.id}/bundle")
    assert bundle.headers["content-type"] == "application/zip"
    with zipfile.ZipFile(io.BytesIO(bundle.content)) as z:
        names = sorted(z.namelist())
        state = json.loads(z.read(f"{run.id}/last_state.json"))
    files = ("events.jsonl", "journal.jsonl", "last_state.json", "tool_calls.csv", "env.txt")
    assert names == sorted(f"{run.id}/{n}" for n in files)
    assert state["run"]["state"] == "failed"
    assert http.post("/logout", data={}).status_code == 403
    session = http.cookies["outlast_session"]
    assert http.post("/logout", data={"csrf": csrf}, follow_redirects=False).status_code == 303
    http.cookies.set("outlast_session", session)  # sent again: the session is gone, not only the cookie
    assert http.get("/api/me").status_code == 401


def test_the_run_page_draws_its_timeline_and_its_children(d: Desk, http: TestClient) -> None:
    run = d.client.enqueue("tour", {"text": "hi"})
    d.reach(run.id, "awaiting_approval")
    [req] = [a for a in http.get("/api/approvals", headers=bearer(d.alice)).json() if a["run_id"] == run.id]
    body = {"decision": "approve", "comment": "ok", "args_hash": req["args_hash"]}
    assert http.post(f"/api/approvals/{run.id}/{req['op_id']}", json=body, headers=bearer(d.alice)).is_success
    assert d.client.wait(run.id, timeout=20).state == "succeeded"

    page = http.get(f"/runs/{run.id}", headers=bearer(d.bob))
    assert page.status_code == 200
    svg = re.search(r"<svg[^>]*>.*?</svg>", page.text, re.S)
    assert svg is not None, page.text
    bars = re.findall(r'<g class="bar ([a-z_ ]+)" data-op="([^"]*)"><title>([^<]*)</title>', svg.group(0))
    kinds = [(kind, op) for kind, op, _ in bars]
    assert kinds == [
        ("operation failed", "op-1"),  # the read whose connection dropped
        ("retry", "op-2"),  # the workflow's retry of it
        ("approval", "op-3"),
        ("wait", "op-4"),  # the child run, waited for
    ], kinds
    titles = [html.unescape(t) for _, _, t in bars]
    assert "fencing token 1" in titles[0] and "retry of op-1" in titles[1]
    assert "approved by alice" in titles[2] and "succeeded" in titles[3]
    assert "<script" not in svg.group(0)
    child = {"id": f"{run.id}:op-4"}  # a child's id is derived from its parent's and its operation
    tree = re.search(r'<div id="children">(.*?)</div>', page.text, re.S)
    assert tree is not None and f'href="/runs/{quote(child["id"], safe="")}"' in tree.group(1)
    assert "succeeded" in tree.group(1) and "kid" in tree.group(1)
    kid = http.get(f"/runs/{quote(child['id'], safe='')}", headers=bearer(d.bob))
    assert kid.status_code == 200 and child["id"] in kid.text


def test_requests_listed_to_viewers_answered_by_operators(d: Desk, http: TestClient) -> None:
    run = d.client.enqueue("refund", {"order": "A-17"})
    d.reach(run.id, "waiting")
    listed = http.get(f"/api/runs/{run.id}/requests", headers=bearer(d.bob))
    assert listed.status_code == 200, listed.text
    [req] = listed.json()
    assert (req["name"], req["payload"], req["responders"]) == ("refund", {"order": "A-17"}, ["oncall"])
    url = f"/api/runs/{run.id}/requests/{req['id']}"
    answer = {"answer": {"amount": 30, "reason": "late"}}
    viewer = http.post(url, json=answer, headers=bearer(d.bob))
    assert viewer.status_code == 403 and "operator role" in viewer.json()["error"], viewer.text
    bad = http.post(url, json={"answer": {"amount": -1, "reason": "x"}}, headers=bearer(d.olga))
    assert bad.status_code == 409 and "the answer.amount must be >= 0" in bad.json()["error"], bad.text
    no_body = http.post(url, json={}, headers=bearer(d.olga))
    assert no_body.status_code == 400

    # The run page shows the request, with a form for olga (an operator among the responders).
    csrf = sign_in(http, d.olga)
    page = http.get(f"/runs/{run.id}")
    assert "Requests" in page.text and "Refund {amount: integer, reason: string}" in page.text
    assert f'action="/runs/{run.id}/respond/{req["id"]}"' in page.text
    form = {"csrf": csrf, "answer_json": json.dumps(answer["answer"])}
    posted = http.post(f"/runs/{run.id}/respond/{req['id']}", data=form, follow_redirects=False)
    assert posted.status_code == 303, posted.text
    assert d.client.wait(run.id, timeout=20).result == {
        "order": "A-17",
        "amount": 30,
        "reason": "late",
        "type": "Refund",
    }

    again = http.post(url, json=answer, headers=bearer(d.olga))
    assert again.status_code == 200 and again.json()["again"] is True and again.json()["by"] == "olga"
    other = http.post(url, json={"answer": {"amount": 31, "reason": "late"}}, headers=bearer(d.olga))
    assert other.status_code == 409 and "a different answer is refused" in other.json()["error"]
    [response] = d.journal(run.id, "response")
    assert response["by"] == "olga" and response["who"]["how"] == "session"
