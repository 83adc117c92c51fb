"""An agent on outlast (outlast.agents): each model request and tool call one operation, replayed
from the journal on resume, with the effects each tool declared. No network: pydantic-ai's
``FunctionModel`` answers (tests/apps/agent_shop.py), and ``ALLOW_MODEL_REQUESTS`` is off."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterable, Iterator
from typing import Any

import pydantic
import pytest
from pydantic_ai import Agent, FunctionToolset, RunContext
from pydantic_ai.exceptions import UserError
from pydantic_ai.messages import ModelResponse, TextPart, ToolCallPart
from pydantic_ai.models.test import TestModel
from pydantic_ai.toolsets import DynamicToolset

from outlast import App, Run
from outlast._status import operation, render_operation
from outlast.action import Action
from outlast.agents import OutlastDurability, agent_workflow, run_agent
from outlast.testing import Harness, HarnessFactory
from outlast.testing.agents import Script, no_model_requests
from tests.apps import agent_shop

ANSWER = 'done: lookup_order={"amount":30,"order_id":"A1"}; refund=refunded 30; email_customer=sent'


@pytest.fixture(autouse=True)
def offline() -> Iterator[None]:
    with no_model_requests():  # no request of these tests may reach a provider
        yield


def shop(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch, app: App = agent_shop.app
) -> Harness:
    """A harness on the shop's app, its tools' world in the harness's schema."""
    h = outlast_harness(app)
    monkeypatch.setenv("OUTLAST_DATABASE_URL", h.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", h.schema)
    agent_shop.setup(h.database_url, h.schema)
    return h


def effects(h: Harness, run_id: str) -> list[tuple[str, str]]:
    rows = h.sql("SELECT tool, detail FROM effects WHERE run_id = %s ORDER BY tool, id", run_id)
    return [(t, d) for t, d in rows]


def model_calls(h: Harness, run_id: str) -> list[int]:
    return [s for (s,) in h.sql("SELECT step FROM model_calls WHERE run_id = %s ORDER BY id", run_id)]


def ops(h: Harness, run_id: str, kind: str = "intention") -> list[tuple[str, str]]:
    return [(e["op"], e.get("tool", "")) for e in h.journal(run_id) if e["kind"] == kind]


ONCE = [
    ("email_customer", "ann@example.com:refunded"),
    ("lookup_order", "A1"),
    ("refund", "A1:30"),
]


def test_every_model_request_and_tool_call_is_an_operation_of_the_run(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch)
    h.start_worker()
    run = h.client.enqueue("shop", {"prompt": "refund order A1"})
    done = h.wait(run.id)
    assert done.state == "succeeded", done.reason
    assert done.result == {"output": ANSWER, "in_doubt": False}
    assert model_calls(h, run.id) == [1, 2, 3]
    assert effects(h, run.id) == ONCE
    # The model's requests (intention, capture, result) and the tools' calls, in the journal;
    # the read's result is its only entry.
    assert ops(h, run.id) == [
        ("op-1", "shop:model"),
        ("op-3", "shop:model"),
        ("op-4", "shop.refund"),
        ("op-5", "shop.email_customer"),
        ("op-6", "shop:model"),
    ]
    assert ops(h, run.id, "result")[1] == ("op-2", "shop.lookup_order")
    # What the model received is captured: the second request carries the read's answer.
    captured = [e for e in h.journal(run.id) if e["kind"] == "capture"]
    assert [e["op"] for e in captured] == ["op-1", "op-3", "op-6"]
    second = captured[1]["request"]
    assert second["tools"] == ["lookup_order", "refund", "email_customer"]
    parts = [p for m in second["messages"] for p in m["parts"]]
    assert {"part_kind": "tool-return", "tool_name": "lookup_order"}.items() <= parts[-1].items()
    # As `outlast status RUN --op op-3` shows it: what the model received, beside its answer.
    view = operation(h.client.journal(run.id), "op-3")
    assert view is not None and view["state"] == "done"
    shown = render_operation(run.id, view)
    assert "shop:model" in shown and '"tool_name":"lookup_order"' in shown.replace(" ", "")


def test_a_resumed_agent_replays_the_model_and_sends_no_request_again(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch)
    run = h.client.enqueue("shop", {"prompt": "refund order A1"})
    # The worker dies once the second model response is journaled (before its tools run).
    h.crash_at("after_result", tool="shop:model")
    h.crash_at("after_result", tool="shop:model")
    assert model_calls(h, run.id) == [1, 2]
    h.start_worker()
    done = h.wait(run.id)
    assert done.state == "succeeded", done.reason
    assert done.result["output"] == ANSWER
    # Each journaled response came from one model call; none was sent again.
    assert model_calls(h, run.id) == [1, 2, 3]
    assert effects(h, run.id) == ONCE


def test_a_model_request_in_flight_when_its_worker_died_is_sent_again(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch)
    run = h.client.enqueue("shop", {"prompt": "refund order A1"})
    # The model answered the first request; its worker died before the response was journaled.
    h.crash_at("after_effect", tool="shop:model")
    h.start_worker()
    done = h.wait(run.id)
    assert done.state == "succeeded", done.reason
    assert done.result["output"] == ANSWER
    assert model_calls(h, run.id) == [1, 1, 2, 3]  # that one request sent again: a cost, no effect
    assert effects(h, run.id) == ONCE
    how = [e.get("how") for e in h.journal(run.id) if e["kind"] == "result" and e["op"] == "op-1"]
    assert how == ["reconciler: not executed"]


def test_parallel_tool_calls_keep_their_identities_on_replay(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch)
    run = h.client.enqueue("shop", {"prompt": "refund order A1"})
    # The refund and the email are two calls of one response, under way together: the worker
    # dies once the email's result is journaled, the refund's perhaps not.
    h.crash_at("after_result", tool="shop.email_customer")
    h.start_worker()
    done = h.wait(run.id)
    assert done.state == "succeeded", done.reason
    # Each call got its own result back: the refund's is the refund's, the email's the email's.
    assert done.result["output"] == ANSWER
    assert ops(h, run.id)[2:4] == [("op-4", "shop.refund"), ("op-5", "shop.email_customer")]
    assert model_calls(h, run.id) == [1, 2, 3]
    # The email went out once; the refund's idempotency key kept it to one refund.
    assert [d for t, d in effects(h, run.id) if t == "email_customer"] == ["ann@example.com:refunded"]
    assert h.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]


def test_an_in_doubt_tool_is_not_run_again_and_the_agent_is_told_the_outcome_is_unknown(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch, agent_shop.plain_app)
    run = h.client.enqueue("shop_plain", {"prompt": "refund order A1"})
    # The plain email's effect landed; its worker died before its result was journaled.
    h.crash_at("after_effect", tool="shop_plain.email_customer")
    h.start_worker()
    done = h.wait(run.id)
    assert done.state == "succeeded", done.reason
    assert done.result["in_doubt"] is True  # run.in_doubt("shop_plain.email_customer")
    output = done.result["output"]
    assert "refund=refunded 30" in output
    assert "email_customer=" in output and "outcome of this email_customer call is unknown" in output
    assert [d for t, d in effects(h, run.id) if t == "email_customer"] == ["ann@example.com:refunded"]
    assert [op for op, _ in ops(h, run.id, "in_doubt")] == ["op-5"]


def approval_of(h: Harness, run_id: str) -> dict[str, Any]:
    h.wait(run_id, "awaiting_approval")
    pending = [a for a in h.client.approvals(run_id) if a["status"] == "pending"]
    assert len(pending) == 1, pending
    return pending[0]


def test_a_tool_needing_approval_waits_for_one_bound_to_the_model_s_arguments(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch, agent_shop.approving_app)
    h.start_worker()
    run = h.client.enqueue("shop_approving", {"prompt": "refund order A1"})
    asked = approval_of(h, run.id)
    assert (asked["action"], asked["args"]) == ("shop_approving.refund", {"order_id": "A1", "amount": 30})
    assert h.sql("SELECT count(*) FROM refunds") == [(0,)]
    # A revision is a new call: it needs an approval of its own, then the tool gets its arguments.
    revised = {"order_id": "A1", "amount": 25}
    h.client.revise(
        run.id, asked["op_id"], approver="ann", comment="25 only", args_hash=asked["args_hash"], args=revised
    )
    again = approval_of(h, run.id)
    assert again["args"] == revised and again["op_id"] != asked["op_id"]
    h.client.approve(run.id, again["op_id"], approver="ann", comment="ok", args_hash=again["args_hash"])
    done = h.wait(run.id)
    assert done.state == "succeeded", done.reason
    assert "refund=refunded 25" in done.result["output"]
    assert h.sql("SELECT order_id, amount FROM refunds") == [("A1", 25)]
    assert model_calls(h, run.id) == [1, 2, 3]  # the waits sent no model request again


def test_a_rejected_call_is_not_made_and_the_agent_is_told(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch, agent_shop.approving_app)
    h.start_worker()
    run = h.client.enqueue("shop_approving", {"prompt": "refund order A1"})
    asked = approval_of(h, run.id)
    h.client.reject(
        run.id, asked["op_id"], approver="ann", comment="not eligible", args_hash=asked["args_hash"]
    )
    done = h.wait(run.id)
    assert done.state == "succeeded", done.reason
    assert "rejected by its approvers" in done.result["output"] and "not eligible" in done.result["output"]
    assert h.sql("SELECT count(*) FROM refunds") == [(0,)]


def test_model_usage_is_spent_from_the_budget_and_a_run_out_of_it_ends_exhausted(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch)
    h.start_worker()
    # Each request reserves 20 tokens, then spends what it used (15) instead: the third does not
    # fit in 45 (30 spent, 20 more asked).
    run = h.client.enqueue("shop", {"prompt": "refund order A1"}, budget={"tokens": 45})
    done = h.wait(run.id)
    assert done.state == "exhausted", done.reason
    assert "shop:model" in (done.reason or "")
    assert model_calls(h, run.id) == [1, 2]
    spent = h.sql("SELECT spent, reserved FROM budgets")
    assert [(float(s), float(r)) for s, r in spent] == [(30.0, 0.0)]


def test_agent_workflow_runs_an_agent_on_a_prompt_with_test_model(outlast_harness: HarnessFactory) -> None:
    app = App()
    agent = Agent(TestModel(), name="echo", capabilities=[OutlastDurability(app)])
    agent_workflow(app, "echo", agent)
    h = outlast_harness(app)
    h.start_worker()
    run = h.client.enqueue("echo", {"prompt": "hello"})
    done = h.wait(run.id)
    assert done.state == "succeeded", done.reason
    assert done.result == "success (no tool calls)"
    assert ops(h, run.id) == [("op-1", "echo:model")]


script = Script(
    ModelResponse([ToolCallPart("lookup_order", {"order_id": "A1"}, "c1")]),
    ModelResponse([TextPart("looked up")]),
)
script_app = App()
script_agent = Agent(
    script.model,
    name="scripted",
    tools=[agent_shop.lookup_order],
    capabilities=[OutlastDurability(script_app, tools={"lookup_order": "read"})],
)
agent_workflow(script_app, "scripted", script_agent)


def test_the_testing_kit_counts_the_model_s_answers_across_a_crash(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch, script_app)
    run = h.client.enqueue("scripted", {"prompt": "look A1 up"})
    h.crash_at("after_result", tool="scripted:model")  # the first response journaled
    h.start_worker()
    assert h.wait(run.id).result == "looked up"
    assert script.steps(run.id) == [1, 2]  # the journaled response was not asked for again


def test_an_agent_run_is_cancelled_and_timed_out_as_any_run(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch, agent_shop.approving_app)
    h.start_worker()
    cancelled = h.client.enqueue("shop_approving", {"prompt": "refund order A1"})
    late = h.client.enqueue("shop_approving", {"prompt": "refund order A1"}, deadline=60)
    approval_of(h, cancelled.id)
    approval_of(h, late.id)
    h.client.cancel(cancelled.id)
    assert h.wait(cancelled.id).state == "cancelled"
    h.advance(120)  # past the deadline, still waiting for its approval
    done = h.wait(late.id)
    assert done.state == "timed_out", done.reason
    assert h.sql("SELECT count(*) FROM refunds") == [(0,)]
    assert model_calls(h, cancelled.id) == [1, 2] and model_calls(h, late.id) == [1, 2]


async def wait_a_little(seconds: float) -> str:
    """Take a while."""
    await asyncio.sleep(seconds)
    return "waited"


slow = Script(
    ModelResponse([ToolCallPart("wait_a_little", {"seconds": 1.5}, "w1")]),
    ModelResponse([ToolCallPart("wait_a_little", {"seconds": 1.5}, "w2")]),
    ModelResponse([TextPart("done")]),
)
slow_app = App()
agent_workflow(
    slow_app,
    "slow",
    Agent(
        slow.model,
        name="slow",
        tools=[wait_a_little],
        capabilities=[OutlastDurability(slow_app, tools={"wait_a_little": "read"})],
    ),
)


def test_a_running_agent_stops_at_its_next_crossing_when_cancelled(outlast_harness: HarnessFactory) -> None:
    h = outlast_harness(slow_app)
    h.start_worker()
    run = h.client.enqueue("slow", {"prompt": "wait"})
    h.wait(run.id, "running")
    while slow.steps(run.id) != [1]:
        time.sleep(0.01)
    h.client.cancel(run.id)  # while the first tool call is under way
    assert h.wait(run.id).state == "cancelled"
    assert slow.steps(run.id) == [1]  # the next model request was not sent


class Verdict(pydantic.BaseModel):
    refund: bool
    reason: str


typed_app = App()
agent_workflow(
    typed_app,
    "typed",
    Agent(TestModel(), name="typed", output_type=Verdict, capabilities=[OutlastDurability(typed_app)]),
)


def test_a_structured_output_is_the_run_s_result(outlast_harness: HarnessFactory) -> None:
    h = outlast_harness(typed_app)
    h.start_worker()
    run = h.client.enqueue("typed", {"prompt": "decide"})
    done = h.wait(run.id)
    assert done.state == "succeeded", done.reason
    assert set(done.result) == {"refund", "reason"}
    # Its output tool validates the model's answer: no operation of its own, no effect.
    assert ops(h, run.id) == [("op-1", "typed:model")]


streamed: list[str] = []
stream_app = App()
stream_agent = Agent(TestModel(), name="streamed", capabilities=[OutlastDurability(stream_app)])


async def collect(ctx: Any, events: AsyncIterable[Any]) -> None:
    async for event in events:
        streamed.append(type(event).__name__)


@stream_app.workflow("streamed")
async def streamed_run(run: Run, prompt: str) -> str:
    result = await run_agent(run, stream_agent, prompt, event_stream_handler=collect)
    return str(result.output)


def test_a_streamed_request_is_delivered_live_and_journaled_as_one_request(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Where an action can stream live output, the model's text goes there as it comes.
    live: list[tuple[str, str]] = []
    monkeypatch.setattr(Action, "stream", lambda self, chunk: live.append((self.tool, chunk)), raising=False)
    h = outlast_harness(stream_app)
    h.start_worker()
    run = h.client.enqueue("streamed", {"prompt": "hi"})
    assert h.wait(run.id).result == "success (no tool calls)"
    assert "PartStartEvent" in streamed and "FinalResultEvent" in streamed  # live, as it came
    assert ops(h, run.id) == [("op-1", "streamed:model")]  # the durable answer: one journaled response
    assert live and {tool for tool, _ in live} == {"streamed:model"}
    assert "".join(chunk for _, chunk in live) == "success (no tool calls)"


def test_a_toolset_outlast_cannot_journal_is_refused_when_the_agent_is_built() -> None:
    def tools(ctx: RunContext[Any]) -> FunctionToolset[Any]:
        return FunctionToolset([agent_shop.lookup_order])

    with pytest.raises(UserError, match="outlast journals function and MCP tools only, not DynamicToolset"):
        Agent(
            TestModel(),
            name="d",
            toolsets=[DynamicToolset(tools, id="d")],
            capabilities=[OutlastDurability(App())],
        )
    with pytest.raises(UserError, match="tools= names no tool of it: nope"):
        Agent(TestModel(), name="u", capabilities=[OutlastDurability(App(), tools={"nope": "read"})])
