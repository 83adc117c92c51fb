"""MCP tools of an agent (outlast.agents): each call of a tool served by a real MCP server process
(tests/apps/mcp_server.py, over stdio and over streamable HTTP) is an operation of the run, of the
effect the server's tool annotations declare (or the app's ``tools=`` says), and carries its
operation's idempotency key in its ``_meta``. No network beyond the machine, no model provider."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from outlast import App
from outlast.agents import ToolEffect, mcp_effect
from outlast.testing import Harness, HarnessFactory
from outlast.testing.agents import no_model_requests
from tests.apps import mcp_server, mcp_shop

ANSWER = "find_order=order A1: 30; refund=refunded 30; email_customer=sent"


@pytest.fixture(autouse=True)
def offline() -> Iterator[None]:
    with no_model_requests():
        yield


def shop(outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch, app: App) -> Harness:
    """A harness on ``app``, the server's world in the harness's schema (its stdio child inherits it)."""
    h = outlast_harness(app)
    monkeypatch.setenv("OUTLAST_DATABASE_URL", h.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", h.schema)
    mcp_shop.setup(h.database_url, h.schema)
    return h


def served(h: Harness) -> list[tuple[str, str | None]]:
    return [(t, k) for t, k in h.sql("SELECT tool, key FROM mcp_calls ORDER BY id")]


def effects(app: App, name: str) -> dict[str, tuple[str, bool]]:
    tools = ("find_order", "refund", "email_customer")
    return {t: (app.tools[f"{name}.{t}"].effect, app.tools[f"{name}.{t}"].idempotent) for t in tools}


def test_annotations_declare_the_effect() -> None:
    assert mcp_effect({"readOnlyHint": True, "idempotentHint": True}) == ToolEffect("read")
    assert mcp_effect({"readOnlyHint": False, "idempotentHint": True}) == ToolEffect("idempotent")
    assert mcp_effect({"destructiveHint": False}) == ToolEffect("plain")
    assert mcp_effect(None) == ToolEffect("plain")


def test_each_mcp_call_is_an_operation_keyed_in_its_meta(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch, mcp_shop.app)
    h.start_worker()
    run = h.client.enqueue("mcp_shop", {"prompt": "refund order A1"})
    done = h.wait(run.id, timeout=60)
    assert done.state == "succeeded", done.reason
    assert done.result == {"output": ANSWER, "in_doubt": False}
    # The server was called once per tool, each call carrying its operation's idempotency key.
    assert served(h) == [
        ("find_order", f"{run.id}:op-2"),
        ("refund", f"{run.id}:op-4"),
        ("email_customer", f"{run.id}:op-6"),
    ]
    # Registered with the effect the server's annotations declare.
    assert effects(mcp_shop.app, "mcp_shop") == {
        "find_order": ("read", False),
        "refund": ("write", True),
        "email_customer": ("write", False),
    }


def test_the_app_overrides_the_server_s_annotations(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch, mcp_shop.overriding_app)
    h.start_worker()
    run = h.client.enqueue("mcp_overriding", {"prompt": "refund order A1"})
    assert h.wait(run.id, timeout=60).state == "succeeded"
    assert effects(mcp_shop.overriding_app, "mcp_overriding") == {
        "find_order": ("write", False),  # plain(), over readOnlyHint
        "refund": ("write", True),  # the server's idempotentHint
        "email_customer": ("write", True),  # idempotent(), over no hint
    }


def test_over_streamable_http_a_cut_idempotent_call_is_sent_again_with_its_key(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    port = mcp_server.free_port()
    app = mcp_shop.build("mcp_http", url=f"http://127.0.0.1:{port}/mcp")
    h = shop(outlast_harness, monkeypatch, app)
    with mcp_server.serving(port):
        run = h.client.enqueue("mcp_http", {"prompt": "refund order A1"})
        # The worker dies once the server refunded, before the result is journaled.
        h.crash_at("after_effect", tool="mcp_http.refund")
        h.start_worker()
        done = h.wait(run.id, timeout=60)
    assert done.state == "succeeded", done.reason
    assert done.result["output"] == ANSWER
    keys = [k for t, k in served(h) if t == "refund"]
    assert keys == [f"{run.id}:op-4"] * 2  # sent again, with the same key
    assert h.sql("SELECT key, amount FROM mcp_refunds") == [(f"{run.id}:op-4", 30)]
    assert effects(app, "mcp_http")["refund"] == ("write", True)
