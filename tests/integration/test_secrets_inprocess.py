"""Secret arguments through the other paths a call can take (in-process worker, outlast.testing):
a policy refusal journals them sealed, and its reason (which quotes the secret) redacted, as is
the exception raised; a reconciler that raises with the secret in its message leaves an in-doubt
record with the secret redacted; ``outlast_harness(app, secret_key=...)`` gives the worker its key;
the dashboard that knows the app type-checks a revision around its sealed argument."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from starlette.testclient import TestClient

from outlast import App, PolicyRefused, Run
from outlast.action import Action
from outlast.dashboard import create_app
from outlast.identity import add_user
from outlast.testing import HarnessFactory, outlast_harness, outlast_servers

__all__ = ["outlast_harness", "outlast_servers"]  # the fixtures, without the plugin installed

app = App()
SECRET = f"tok-{uuid.uuid4().hex}"
sent: list[str] = []
refusals: list[str] = []  # the messages of the PolicyRefused the workflow caught


@app.tool("send", secret=["token"])
def send(token: str, text: str) -> str:
    sent.append(text)
    return text


@app.reconciler("send")
def ask(args: dict[str, Any], action: Action) -> Any:
    raise ConnectionError(f"the mailer refused {args['token']}")


@app.tool("blocked", secret=["token"])
def blocked(token: str) -> None:
    raise AssertionError("never dispatched: the policy refuses it")


@app.policy
def policy(action: str, args: dict[str, Any], run: Any) -> bool | str:
    return action != "blocked" or f"blocked is never allowed, not even with {args['token']}"


@app.workflow("mail")
async def mail(run: Run) -> str:
    try:
        await run.call(blocked, token=SECRET)
    except PolicyRefused as exc:
        refusals.append(str(exc))
    return await run.call(send, token=SECRET, text="hello")


def test_a_refusal_and_a_reconcilers_error_keep_the_secret_out(outlast_harness: HarnessFactory) -> None:
    h = outlast_harness(app, secret_key="iQ8m-Wz3Rk6Tx1Lv9Nb4Hc0Gp7Fs2Dy5J")
    rid = h.client.enqueue("mail", {}).id
    h.crash_at("after_intention", "send")
    h.start_worker()
    run = h.wait(rid, "waiting")
    assert run.reason == "in_doubt"
    entries = {(e["kind"], e["op"]): e for e in h.journal(rid)}
    assert entries["refused", "op-1"]["args"]["token"]["secret"].startswith("hmac-sha256:")
    assert entries["refused", "op-1"]["reason"] == "blocked is never allowed, not even with [secret]"
    refused = f"run '{rid}': policy refused blocked: blocked is never allowed, not even with [secret]"
    assert refusals and set(refusals) == {refused}  # live, and replayed after the crash
    doubt = entries["in_doubt", "op-2"]
    assert doubt["why"] == "reconciler raised ConnectionError: the mailer refused [secret]"
    assert "[secret]" in doubt["traceback"]
    assert sent == []
    stored = json.dumps(h.journal(rid)) + json.dumps(h.events(rid), default=str)
    assert SECRET not in stored


def test_a_dashboard_with_the_app_revises_an_approval_around_its_sealed_argument(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The dashboard that knows the app (``--app``) checks a revision against the tool's types,
    but not a sealed argument left as shown: the worker gives it its value back."""
    from tests.apps.secret import app as secret_app

    monkeypatch.setenv("SECRET_API_KEY", SECRET)
    users = tmp_path / "users.toml"
    token = add_user(users, "ann", ["approvers"])
    h = outlast_harness(secret_app, secret_key="iQ8m-Wz3Rk6Tx1Lv9Nb4Hc0Gp7Fs2Dy5J", users=str(users))
    h.sql("CREATE TABLE executions (run_id text, what text)")  # where `pay` records its effect
    monkeypatch.setenv("OUTLAST_DATABASE_URL", h.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", h.schema)
    rid = h.client.enqueue("approved_charge", {"amount": 5}).id
    h.start_worker()
    h.wait(rid, "awaiting_approval")
    (asked,) = h.client.approvals(rid)
    url = f"/api/approvals/{rid}/{asked['op_id']}"
    body = {"decision": "revise", "comment": "7, not 5", "args_hash": asked["args_hash"]}
    bearer = {"Authorization": f"Bearer {token}"}
    other_seal = {"secret": "hmac-sha256:00"}
    with TestClient(create_app(h.settings, app=secret_app), base_url="http://127.0.0.1") as http:
        for args, why in (
            ({**asked["args"], "amount": "seven"}, "amount: Input should be a valid integer"),
            ({"amount": 7}, "api_key: Field required"),
            ({**asked["args"], "api_key": 7}, "api_key: Input should be a valid string"),
            ({**asked["args"], "api_key": other_seal}, "secret argument 'api_key' a new value"),
        ):
            refused = http.post(url, json={**body, "args": args}, headers=bearer)
            assert refused.status_code in (400, 409) and why in refused.json()["error"], refused.text
        revised = http.post(url, json={**body, "args": {**asked["args"], "amount": 7}}, headers=bearer)
        assert revised.status_code == 200, revised.text
    run = h.wait(rid)
    assert (run.state, run.result) == ("succeeded", {"paid": 7, "with": "right key"})
