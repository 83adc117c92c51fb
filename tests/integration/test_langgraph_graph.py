"""A compiled LangGraph graph run inside a workflow (DurableGraph): each node's execution one
operation whose state update is journaled, served from the journal on a resume (in process here;
tests/crash/test_langgraph_crash.py kills a real worker)."""

from __future__ import annotations

from typing import Any

import pytest

from outlast.errors import AnswerRefused
from outlast.testing import Harness, HarnessFactory
from tests.apps import graph_shop

DONE = {"order_id": "A1", "amount": 30, "log": ["found A1", "charged 30", "notified"]}


def shop(outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch) -> Harness:
    h = outlast_harness(graph_shop.app)
    monkeypatch.setenv("OUTLAST_DATABASE_URL", h.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", h.schema)
    graph_shop.setup(h.database_url, h.schema)
    return h


def effects(h: Harness, run_id: str) -> list[str]:
    return [n for (n,) in h.sql("SELECT node FROM effects WHERE run_id = %s ORDER BY id", run_id)]


def test_each_node_is_an_operation_whose_update_is_journaled(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch)
    h.start_worker()
    run_id = h.client.enqueue("orders", {"order_id": "A1"}).id
    run = h.wait(run_id, "succeeded")
    assert run.result == DONE
    assert effects(h, run_id) == ["lookup", "charge", "notify"]
    journal = h.journal(run_id)
    # a read is journaled as its result alone; the others, an intention then a result
    assert [e["tool"] for e in journal if "tool" in e] == ["orders.lookup", "orders.charge", "orders.notify"]
    updates = [e["ok"] for e in journal if e["kind"] == "result"]
    assert updates[1] == {"json": {"log": ["charged 30"]}}


def test_a_run_crashed_after_two_nodes_replays_them_and_runs_the_third(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch)
    run_id = h.client.enqueue("orders", {"order_id": "A1"}).id
    h.crash_at("after_result", "orders.charge")
    assert effects(h, run_id) == ["lookup", "charge"]
    h.start_worker()
    assert h.wait(run_id, "succeeded", timeout=60).result == DONE
    ran = effects(h, run_id)
    # the lookup replayed, the notice sent once; the charge may be sent again with its key (its
    # result was held when the worker crashed), and the bank kept one
    assert (ran.count("lookup"), ran.count("notify")) == (1, 1)
    assert h.sql("SELECT order_id, amount FROM charges") == [("A1", 30)]


def test_the_example_runs_a_graph_with_a_chat_model_offline(outlast_harness: HarnessFactory) -> None:
    """examples/langgraph_refund.py: a fake chat model's message goes through the journal (with
    LangGraph's serializer) and back into the graph's state."""
    from examples import langgraph_refund

    h = outlast_harness(langgraph_refund.app)
    h.start_worker()
    run_id = h.client.enqueue("refund", {"order_id": "A1", "message": "Please refund order A1."}).id
    answer = "Your order A1 is refunded: 30 EUR."
    assert h.wait(run_id, "succeeded").result == {"amount": 30, "answer": answer}
    assert list(langgraph_refund.refunds.values()) == [30]
    drafted = next(e["ok"] for e in h.journal(run_id) if e.get("tool") == "refund.draft")
    assert drafted["serde"] == "msgpack"


def test_an_interrupt_is_a_durable_request_answered_with_respond(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``interrupt()`` in a node: the run waits on a request (no worker held), named after the
    node, its payload the interrupt's value; the answer is what ``interrupt()`` returns when the
    node runs again, and the graph goes on. A worker crashed while it waited changes nothing."""
    h = shop(outlast_harness, monkeypatch)
    run_id = h.client.enqueue("reviewed", {"order_id": "A1"}).id
    h.start_worker()
    asked = h.wait_for_request(run_id, "op-3")  # op-1: the lookup; op-2: the review, interrupted
    assert (asked["name"], asked["payload"]) == ("reviewed.review", {"order_id": "A1", "amount": 30})
    h.stop_worker()
    h.client.respond(run_id, "op-3", {"by": "ann"})
    h.start_worker()
    done = h.wait(run_id, "succeeded", timeout=60)
    assert done.result == {
        "order_id": "A1",
        "amount": 30,
        "log": ["found A1", "approved by ann", "charged 30"],
    }
    assert effects(h, run_id) == ["lookup", "review", "review", "charge"]


def test_an_interrupt_s_answer_is_typed_checked_by_respond_and_given_as_its_type(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``interrupts={"review": Approval}``: the request carries the model's JSON schema, an answer
    that does not fit it is refused by ``client.respond`` (the run still waits), and the node's
    ``interrupt()`` returns an ``Approval``."""
    h = shop(outlast_harness, monkeypatch)
    run_id = h.client.enqueue("typed", {"order_id": "A1"}).id
    h.start_worker()
    asked = h.wait_for_request(run_id, "op-3")
    assert asked["response_schema"]["required"] == ["by", "up_to"]
    with pytest.raises(AnswerRefused, match="up_to"):
        h.client.respond(run_id, "op-3", {"by": "ann"})
    assert h.client.status(run_id).state == "waiting"
    h.client.respond(run_id, "op-3", {"by": "ann", "up_to": 50})
    done = h.wait(run_id, "succeeded", timeout=60)
    assert done.result["log"] == ["found A1", "approved by ann up to 50", "charged 30"]


def streamed(h: Harness, run_id: str, mode: str) -> list[Any]:
    return [c["data"] for c in h.stream(run_id) if isinstance(c, dict) and c.get("mode") == mode]


def test_the_graph_s_stream_modes_reach_the_run_s_live_readers(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``stream_mode=[...]``: each node's update, the nodes' custom chunks and the chat model's
    tokens go to ``client.stream(run_id)`` as the graph runs."""
    h = shop(outlast_harness, monkeypatch)
    h.start_worker()
    run_id = h.client.enqueue("told", {"order_id": "A1"}).id
    assert h.wait(run_id, "succeeded").result["log"] == ["found A1", "charging your order now", "charged 30"]
    updates = streamed(h, run_id, "updates")
    assert [next(iter(u)) for u in updates] == ["lookup", "explain", "charge"]
    assert updates[0] == {"lookup": {"amount": 30, "log": ["found A1"]}}
    assert streamed(h, run_id, "custom") == [{"explaining": "A1"}]
    tokens = [m[0]["content"] for m in streamed(h, run_id, "messages")]
    assert "".join(tokens) == "charging your order now" and len(tokens) > 1
    assert {m[1]["langgraph_node"] for m in streamed(h, run_id, "messages")} == {"explain"}


def test_a_resumed_graph_does_not_stream_again_the_nodes_served_from_the_journal(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Crashed as the charge was about to be sent, the ``explain`` node's update the last one
    journaled: on the resume, the lookup and the explanation are served from the journal, their
    updates, chunks and tokens not sent again; the charge, new work, is streamed once."""
    h = shop(outlast_harness, monkeypatch)
    run_id = h.client.enqueue("told", {"order_id": "A1"}).id
    h.crash_at("before_intention", "told.charge")
    h.start_worker()
    assert h.wait(run_id, "succeeded", timeout=60).result["amount"] == 30
    assert [next(iter(u)) for u in streamed(h, run_id, "updates")] == ["lookup", "explain", "charge"]
    assert streamed(h, run_id, "custom") == [{"explaining": "A1"}]
    said = "".join(m[0]["content"] for m in streamed(h, run_id, "messages"))
    assert said == "charging your order now"


def test_of_two_branches_of_one_step_only_the_one_run_again_is_streamed_again(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``explain`` and ``score`` run in the same step. Crashed as ``score`` (a read) returned,
    ``explain``'s update journaled and streamed: on the resume, ``explain`` is served from the
    journal while ``score`` runs live beside it; ``explain``'s update, chunk and tokens are not
    streamed again, ``score``'s update is streamed (once: the crash cut it before)."""
    h = shop(outlast_harness, monkeypatch)
    run_id = h.client.enqueue("fanned", {"order_id": "A1"}).id
    h.crash_at("after_effect", "fanned.score")
    h.start_worker()
    done = h.wait(run_id, "succeeded", timeout=60).result
    assert sorted(done["log"]) == ["charged 30", "charging your order now", "found A1", "scored"]
    assert effects(h, run_id).count("explain") == 1 and effects(h, run_id).count("score") == 2
    updates = [next(iter(u)) for u in streamed(h, run_id, "updates")]
    assert sorted(updates[1:3]) == ["explain", "score"] and len(updates) == 4, updates
    assert streamed(h, run_id, "custom") == [{"explaining": "A1"}]
    said = "".join(m[0]["content"] for m in streamed(h, run_id, "messages"))
    assert said == "charging your order now"


def test_each_tool_call_of_a_tool_node_is_an_operation_with_its_declared_effect(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``ToolNode`` runs in the workflow: each of its tool calls is an operation of
    ``GRAPH.TOOL``, with the effect declared for the tool (a read journaled as its result alone),
    its code given ``current_action()`` and the operation's idempotency key."""
    from tests.apps import graph_tools

    h = outlast_harness(graph_tools.app)
    monkeypatch.setenv("OUTLAST_DATABASE_URL", h.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", h.schema)
    graph_tools.setup(h.database_url, h.schema)
    h.start_worker()
    run_id = h.client.enqueue("tooled", {"prompt": "refund A1"}).id
    done = h.wait(run_id, "succeeded").result
    assert done == {"answer": "lookup=A1: 30 EUR; refund=refunded 30; email=sent", "in_doubt": False}
    journal = h.journal(run_id)
    tools = [e["tool"] for e in journal if "tool" in e]
    assert {"tooled.lookup", "tooled.refund", "tooled.email"} <= set(tools)
    assert "tooled.tools" not in tools  # the ToolNode itself is no operation
    assert [k for (k,) in h.sql("SELECT key FROM refunds")] == [  # the operation's key, to the bank
        k for (k,) in h.sql("SELECT key FROM effects WHERE tool = 'refund'")
    ]
    assert not any(e.get("tool") == "tooled.lookup" for e in journal if e["kind"] == "intention")


def test_a_tool_node_s_updates_are_streamed(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A ``ToolNode`` is no operation, but its calls made now are: its update (the calls'
    messages) is streamed like any node's."""
    from tests.apps import graph_tools

    h = outlast_harness(graph_tools.app)
    monkeypatch.setenv("OUTLAST_DATABASE_URL", h.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", h.schema)
    graph_tools.setup(h.database_url, h.schema)
    h.start_worker()
    run_id = h.client.enqueue("tooled_streamed", {"prompt": "refund A1"}).id
    h.wait(run_id, "succeeded")
    updates = streamed(h, run_id, "updates")
    assert [next(iter(u)) for u in updates] == ["agent", "tools", "agent", "tools", "agent"]
    said = [m["content"] for m in updates[1]["tools"]["messages"]]
    assert said == ["A1: 30 EUR", "refunded 30"], updates[1]


def test_each_call_of_an_mcp_tool_is_an_operation_of_its_annotated_effect_keyed_in_its_meta(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tools of a real MCP server process (``mcp_tools``) in a ``ToolNode``: each call an
    operation of the effect the server's annotations declare (read-only a read, idempotent
    idempotent, neither plain), or the graph's ``tools=`` says; each carries its operation's
    idempotency key in its ``_meta``."""
    from tests.apps import graph_mcp, mcp_server

    h = outlast_harness(graph_mcp.app)
    monkeypatch.setenv("OUTLAST_DATABASE_URL", h.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", h.schema)
    mcp_server.setup(h.database_url, h.schema)
    h.start_worker()
    for name in ("mcp_graph", "mcp_graph_overriding"):
        done = h.wait(h.client.enqueue(name, {"prompt": "refund A1"}).id, timeout=60)
        assert done.state == "succeeded", done.reason
        answer = "find_order=order A1: 30; refund=refunded 30; email_customer=sent"
        assert done.result == {"answer": answer, "in_doubt": False}
    tools = graph_mcp.app.tools
    kinds = {
        t: (tools[f"mcp_graph.{t}"].effect, tools[f"mcp_graph.{t}"].idempotent)
        for t in ("find_order", "refund", "email_customer")
    }
    assert kinds == {
        "find_order": ("read", False),
        "refund": ("write", True),
        "email_customer": ("write", False),
    }
    overridden = tools["mcp_graph_overriding.email_customer"], tools["mcp_graph_overriding.find_order"]
    assert [(t.effect, t.idempotent) for t in overridden] == [("write", True), ("write", False)]
    served = h.sql("SELECT tool, key FROM mcp_calls ORDER BY id")
    assert [t for t, _ in served] == ["find_order", "refund", "email_customer"] * 2
    assert all(key and ":op-" in key for _, key in served), served  # each call keyed by its operation


def test_the_mcp_example_runs_its_server_s_tools_as_operations_offline(
    outlast_harness: HarnessFactory,
) -> None:
    """examples/langgraph_mcp.py: its MCP server's read-only lookup and idempotent refund, called
    from the graph's ToolNode, each an operation of the effect the annotations declare."""
    from examples import langgraph_mcp

    h = outlast_harness(langgraph_mcp.app)
    h.start_worker()
    run_id = h.client.enqueue("mcp_refund", {"message": "Please refund order A1."}).id
    assert h.wait(run_id, "succeeded", timeout=60).result == "Done: order A1: 30 EUR; refunded 30 EUR."
    tools = {e["tool"] for e in h.journal(run_id) if "tool" in e}
    assert {"mcp_refund.find_order", "mcp_refund.refund"} <= tools
    refund = langgraph_mcp.app.tools["mcp_refund.refund"]
    assert (refund.effect, refund.idempotent, langgraph_mcp.app.tools["mcp_refund.find_order"].effect) == (
        "write",
        True,
        "read",
    )
