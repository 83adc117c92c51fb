"""Secret arguments through the other paths a call can take (in-process worker, outlast.testing):
a policy refusal journals them sealed, and its reason (which quotes the secret) redacted, as is
the exception raised; a reconciler that raises with the secret in its message leaves an in-doubt
record with the secret redacted; ``outlast_harness(app, secret_key=...)`` gives the worker its key."""

from __future__ import annotations

import json
import uuid
from typing import Any

from outlast import App, PolicyRefused, Run
from outlast.action import Action
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
    h = outlast_harness(app, secret_key="s" * 32)
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
