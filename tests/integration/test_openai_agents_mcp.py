"""MCP tools of an OpenAI Agents SDK agent (DurableAgent, the SDK's MCPServerStdio and
MCPServerStreamableHttp): each call of a tool served by a real MCP server process
(tests/apps/mcp_server.py) is an operation of the run, of the effect the server's annotations
declare (or the app's ``tools=`` says), and carries its operation's idempotency key in its
``_meta``. No network beyond the machine, no model provider."""

from __future__ import annotations

import pytest

from outlast import App
from outlast.testing import Harness, HarnessFactory
from tests.apps import mcp_server, oai_mcp

ANSWER = "find_order=order A1: 30; refund=refunded 30; email_customer=sent"


def shop(outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch, app: App) -> Harness:
    h = outlast_harness(app)
    monkeypatch.setenv("OUTLAST_DATABASE_URL", h.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", h.schema)
    oai_mcp.setup(h.database_url, h.schema)
    return h


def served(h: Harness) -> list[tuple[str, str | None]]:
    return [(t, k) for t, k in h.sql("SELECT tool, key FROM mcp_calls ORDER BY id")]


def effects(app: App, name: str) -> dict[str, tuple[str, bool]]:
    tools = ("find_order", "refund", "email_customer")
    return {t: (app.tools[f"{name}.{t}"].effect, app.tools[f"{name}.{t}"].idempotent) for t in tools}


def test_each_mcp_call_is_an_operation_keyed_in_its_meta(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch, oai_mcp.app)
    h.start_worker()
    run_id = h.client.enqueue("oai_mcp", {"prompt": "refund order A1"}).id
    done = h.wait(run_id, timeout=60)
    assert done.state == "succeeded", done.reason
    assert done.result == {"output": ANSWER, "in_doubt": False}
    # The server was called once per tool, each call carrying its operation's idempotency key.
    assert served(h) == [
        ("find_order", f"{run_id}:op-2"),
        ("refund", f"{run_id}:op-4"),
        ("email_customer", f"{run_id}:op-6"),
    ]
    assert effects(oai_mcp.app, "oai_mcp") == {
        "find_order": ("read", False),
        "refund": ("write", True),
        "email_customer": ("write", False),
    }


def test_the_app_overrides_the_server_s_annotations(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch, oai_mcp.overriding_app)
    h.start_worker()
    run_id = h.client.enqueue("oai_mcp_overriding", {"prompt": "refund order A1"}).id
    assert h.wait(run_id, timeout=60).state == "succeeded"
    assert effects(oai_mcp.overriding_app, "oai_mcp_overriding") == {
        "find_order": ("write", False),  # plain, over readOnlyHint
        "refund": ("write", True),  # the server's idempotentHint
        "email_customer": ("write", True),  # idempotent, over no hint
    }


def test_over_streamable_http_a_cut_idempotent_call_is_sent_again_with_its_key(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = mcp_server.free_port()
    app = oai_mcp.build("oai_mcp_http", url=f"http://127.0.0.1:{port}/mcp")
    h = shop(outlast_harness, monkeypatch, app)
    with mcp_server.serving(port):
        run_id = h.client.enqueue("oai_mcp_http", {"prompt": "refund order A1"}).id
        h.crash_at("after_effect", tool="oai_mcp_http.refund")  # refunded, its result not journaled
        h.start_worker()
        done = h.wait(run_id, timeout=60)
    assert done.state == "succeeded", done.reason
    assert done.result["output"] == ANSWER
    assert [k for t, k in served(h) if t == "refund"] == [f"{run_id}:op-4"] * 2  # again, same key
    assert h.sql("SELECT key, amount FROM mcp_refunds") == [(f"{run_id}:op-4", 30)]
    assert [t for t, _ in served(h)].count("find_order") == 1  # journaled: not asked again
