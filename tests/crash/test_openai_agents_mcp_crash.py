"""MCP tools of an OpenAI Agents SDK agent (DurableAgent) under real crashes: a worker process
killed in the middle of an MCP tool call, after the server (tests/apps/mcp_server.py, the worker's
stdio child) made its effect and before it answered; then an unarmed worker resumes the run. The
effect the server's annotations declare decides what the resumed run does."""

from __future__ import annotations

from typing import Any

import pytest

from outlast import Client
from tests.apps import oai_mcp
from tests.conftest import World
from tests.crash import killed

pytestmark = pytest.mark.crash

ANSWER = "find_order=order A1: 30; refund=refunded 30; email_customer=sent"


def resumed(world: World, tool: str) -> tuple[Client, str, Any]:
    """Run the agent on a worker whose MCP server kills it in ``tool``, then on an unarmed one."""
    oai_mcp.setup(world.database_url, world.schema)
    c = Client(settings=world.settings())
    run_id = c.enqueue("oai_mcp", {"prompt": "refund order A1"}).id
    killed(world.worker("tests.apps.oai_mcp:app", MCP_DIE_IN=tool))
    world.worker("tests.apps.oai_mcp:app")
    return c, run_id, c.wait(run_id, timeout=90)


def served(world: World, tool: str) -> list[str | None]:
    return [k for (k,) in world.sql("SELECT key FROM mcp_calls WHERE tool = %s ORDER BY id", tool)]


def model_steps(world: World, run_id: str) -> list[int]:
    return [s for (s,) in world.sql("SELECT step FROM model_calls WHERE run_id = %s ORDER BY step", run_id)]


def test_a_plain_mcp_tool_cut_is_in_doubt_never_called_twice(world: World) -> None:
    c, run_id, run = resumed(world, "email_customer")
    with c:
        assert run.state == "succeeded", run.reason
        assert run.result["in_doubt"] is True
        assert "outcome of this email_customer call is unknown" in run.result["output"]
        assert len(served(world, "email_customer")) == 1  # never called twice
        assert world.sql("SELECT count(*) FROM mcp_emails") == [(1,)]
        assert len(served(world, "refund")) == 1  # journaled before the crash: not called again
        assert model_steps(world, run_id) == [1, 2, 3, 4]  # every response journaled once


def test_an_idempotent_mcp_tool_cut_is_called_again_with_its_key_one_effect(world: World) -> None:
    c, run_id, run = resumed(world, "refund")
    with c:
        assert run.state == "succeeded", run.reason
        assert run.result["output"] == ANSWER
        keys = served(world, "refund")
        assert len(keys) == 2 and keys[0] is not None and keys[0] == keys[1]
        assert world.sql("SELECT key, order_id, amount FROM mcp_refunds") == [(keys[0], "A1", 30)]
        assert model_steps(world, run_id) == [1, 2, 3, 4]
