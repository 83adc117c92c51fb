"""MCP tools of an agent (outlast.agents) under real crashes: a worker process killed in the middle
of an MCP tool call, after the server made its effect and before it answered; then an unarmed
worker resumes the run. The server (tests/apps/mcp_server.py) is a real MCP server process, the
worker's stdio child, and counts each call it served with the idempotency key its ``_meta``
carried: the effect its annotations declare decides what the resumed run does."""

from __future__ import annotations

from typing import Any

import pytest

from outlast import Client
from tests.apps import mcp_server, mcp_shop
from tests.conftest import World
from tests.crash import killed

pytestmark = pytest.mark.crash

APP = "tests.apps.mcp_shop:app"
ANSWER = "find_order=order A1: 30; refund=refunded 30; email_customer=sent"


def resumed(
    world: World, armed: dict[str, str], app: str = APP, workflow: str = "mcp_shop", **env: str
) -> tuple[Client, str, Any]:
    """Run the agent on a worker armed with ``armed`` (``MCP_DIE_IN``: its MCP server kills it in
    that tool), then on an unarmed one, both with ``env``."""
    mcp_shop.setup(world.database_url, world.schema)
    c = Client(settings=world.settings())
    run_id = c.enqueue(workflow, {"prompt": "refund order A1"}).id
    killed(world.worker(app, **armed, **env))
    world.worker(app, **env)
    return c, run_id, c.wait(run_id, timeout=90)


def served(world: World, tool: str) -> list[str | None]:
    """The idempotency keys the server's calls of ``tool`` carried, in order."""
    return [k for (k,) in world.sql("SELECT key FROM mcp_calls WHERE tool = %s ORDER BY id", tool)]


def model_steps(world: World, run_id: str) -> list[int]:
    return [s for (s,) in world.sql("SELECT step FROM model_calls WHERE run_id = %s ORDER BY step", run_id)]


def test_an_idempotent_mcp_tool_cut_is_called_again_with_its_key_one_effect(world: World) -> None:
    c, run_id, run = resumed(world, {"MCP_DIE_IN": "refund"})
    with c:
        assert run.state == "succeeded", run.reason
        assert run.result["output"] == ANSWER
        keys = served(world, "refund")
        # Called again after the crash, with the same key in its _meta: the server refunded once.
        assert len(keys) == 2 and keys[0] is not None and keys[0] == keys[1]
        assert world.sql("SELECT key, order_id, amount FROM mcp_refunds") == [(keys[0], "A1", 30)]
        assert (len(served(world, "find_order")), len(served(world, "email_customer"))) == (1, 1)
        assert model_steps(world, run_id) == [1, 2, 3, 4]  # every response journaled once


def test_a_plain_mcp_tool_cut_is_in_doubt_never_called_twice(world: World) -> None:
    c, _, run = resumed(world, {"MCP_DIE_IN": "email_customer"})
    with c:
        assert run.state == "succeeded", run.reason
        assert run.result["in_doubt"] is True
        assert "outcome of this email_customer call is unknown" in run.result["output"]
        assert len(served(world, "email_customer")) == 1  # never called twice
        assert world.sql("SELECT count(*) FROM mcp_emails") == [(1,)]
        assert len(served(world, "refund")) == 1  # journaled before the crash: not called again
        assert world.sql("SELECT count(*) FROM mcp_refunds") == [(1,)]


def test_a_read_only_mcp_tool_cut_is_redone(world: World) -> None:
    c, run_id, run = resumed(world, {"MCP_DIE_IN": "find_order"})
    with c:
        assert run.state == "succeeded", run.reason
        assert run.result["output"] == ANSWER
        assert run.result["in_doubt"] is False
        assert len(served(world, "find_order")) == 2  # redone, harmlessly
        assert (len(served(world, "refund")), len(served(world, "email_customer"))) == (1, 1)
        # Each MCP call an operation of the run, of the tool its server declared.
        tools = [e.data.get("tool") for e in c.journal(run_id)]
        assert [t for t in dict.fromkeys(tools) if t and not t.endswith(":model")] == [
            "mcp_shop.find_order",
            "mcp_shop.refund",
            "mcp_shop.email_customer",
        ]


def test_over_streamable_http_a_plain_mcp_tool_cut_is_in_doubt_never_called_twice(world: World) -> None:
    # The server, its own process, outlives the worker: killed after the email went out, before
    # the result was journaled (a failpoint), the worker leaves the call in doubt.
    mcp_shop.setup(world.database_url, world.schema)
    port = mcp_server.free_port()
    with mcp_server.serving(port, world.env()):
        url = f"http://127.0.0.1:{port}/mcp"
        armed = {"OUTLAST_FAILPOINTS": "after_effect:mcp_http.email_customer"}
        c, _, run = resumed(world, armed, "tests.apps.mcp_shop:http_app", "mcp_http", MCP_URL=url)
    with c:
        assert run.state == "succeeded", run.reason
        assert run.result["in_doubt"] is True
        assert len(served(world, "email_customer")) == 1
        assert world.sql("SELECT count(*) FROM mcp_emails") == [(1,)]
        assert len(served(world, "refund")) == 1 and len(served(world, "find_order")) == 1
