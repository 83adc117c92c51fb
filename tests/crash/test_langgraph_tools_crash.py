"""The tool calls of a LangGraph ``ToolNode`` run by a workflow (DurableGraph) under a real crash:
a worker process killed in the middle of a plain tool, or right after an idempotent tool's effect,
then an unarmed worker resumes the run. Counted in the world (tests/apps/graph_tools.py): each
tool's runs with their idempotency keys, the bank's refunds, the emails. The same for the tools of
a real MCP server process (tests/apps/mcp_server.py) that kills the worker, its caller, right
after a call's effect: what the server did is counted in its tables."""

from __future__ import annotations

from typing import Any

import pytest

from outlast import Client
from tests.apps import graph_tools, mcp_server
from tests.conftest import World
from tests.crash import killed

pytestmark = pytest.mark.crash

APP = "tests.apps.graph_tools:app"


def resumed(world: World, die_in: str) -> tuple[Any, dict[str, list[str]]]:
    """The run's end after a worker killed in ``die_in``, and each tool's runs (their keys)."""
    graph_tools.setup(world.database_url, world.schema)
    with Client(settings=world.settings()) as c:
        run_id = c.enqueue("tooled", {"prompt": "refund A1"}).id
        killed(world.worker(APP, GRAPH_DIE_IN=die_in))
        world.worker(APP)
        run = c.wait(run_id, timeout=90)
    ran: dict[str, list[str]] = {}
    for tool, key in world.sql("SELECT tool, key FROM effects WHERE run_id = %s ORDER BY id", run_id):
        ran.setdefault(tool, []).append(key)
    return run, ran


def test_killed_in_the_middle_of_a_plain_tool_it_is_in_doubt_never_run_twice(world: World) -> None:
    run, ran = resumed(world, "email")
    assert run.state == "succeeded", run.reason
    assert run.result["in_doubt"] is True
    assert "outcome of this email call is unknown" in run.result["answer"]
    assert len(ran["email"]) == 1  # begun once, cut, never run again
    assert world.sql("SELECT count(*) FROM emails") == [(0,)]
    assert world.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]


def test_killed_after_an_idempotent_tool_s_effect_it_is_sent_again_with_the_same_key(world: World) -> None:
    run, ran = resumed(world, "refund")
    assert run.state == "succeeded", run.reason
    assert run.result == {"answer": "lookup=A1: 30 EUR; refund=refunded 30; email=sent", "in_doubt": False}
    assert len(ran["refund"]) == 2 and len(set(ran["refund"])) == 1  # sent again, with its key
    assert world.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]  # one refund in the bank
    assert world.sql("SELECT count(*) FROM emails") == [(1,)]


def mcp_resumed(world: World, die_in: str) -> tuple[Any, list[tuple[str, str]]]:
    """The run's end after the MCP server killed the worker in a call of ``die_in``, its effect
    made; and each call the server served, with the key in its ``_meta``."""
    mcp_server.setup(world.database_url, world.schema)
    with Client(settings=world.settings()) as c:
        run_id = c.enqueue("mcp_graph", {"prompt": "refund A1"}).id
        killed(world.worker(MCP_APP, MCP_DIE_IN=die_in))
        world.worker(MCP_APP)
        run = c.wait(run_id, timeout=90)
    return run, [(t, k) for t, k in world.sql("SELECT tool, key FROM mcp_calls ORDER BY id")]


MCP_APP = "tests.apps.graph_mcp:app"


def test_an_mcp_server_s_idempotent_tool_cut_after_its_effect_is_called_again_with_its_key(
    world: World,
) -> None:
    run, served = mcp_resumed(world, "refund")
    assert run.state == "succeeded", run.reason
    assert run.result["answer"] == "find_order=order A1: 30; refund=refunded 30; email_customer=sent"
    refunds = [k for t, k in served if t == "refund"]
    assert len(refunds) == 2 and len(set(refunds)) == 1  # called again, with the same key in _meta
    assert world.sql("SELECT order_id, amount FROM mcp_refunds") == [("A1", 30)]
    assert [t for t, _ in served].count("find_order") == 1  # the lookup, journaled, not called again


def test_an_mcp_server_s_plain_tool_cut_after_its_effect_is_in_doubt_never_called_twice(world: World) -> None:
    run, served = mcp_resumed(world, "email_customer")
    assert run.state == "succeeded", run.reason
    assert run.result["in_doubt"] is True
    assert "outcome of this email_customer call is unknown" in run.result["answer"]
    assert [t for t, _ in served].count("email_customer") == 1
    assert world.sql("SELECT count(*) FROM mcp_emails") == [(1,)]
