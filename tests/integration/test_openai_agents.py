"""An OpenAI Agents SDK agent run inside a workflow (DurableAgent): each model call and each
function tool call one operation, the model's response journaled and served from the journal on a
resume (in process here; tests/crash/test_openai_agents_crash.py kills a real worker). The model is
a scripted ``Model`` (tests/apps/oai_shop.py): no network, no key."""

from __future__ import annotations

import dataclasses
from typing import Any, cast

import pytest
from agents import Agent

from outlast import App, Run
from outlast.integrations.openai_agents import DurableAgent
from outlast.testing import Harness, HarnessFactory
from tests.apps import oai_shop
from tests.conftest import wait_for

ANSWER = "done: email_customer=sent; lookup_order={'amount': 30, 'order_id': 'A1'}; refund=refunded 30"


def shop(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch, app: App = oai_shop.app
) -> Harness:
    h = outlast_harness(app)
    monkeypatch.setenv("OUTLAST_DATABASE_URL", h.database_url)
    monkeypatch.setenv("OUTLAST_SCHEMA", h.schema)
    oai_shop.setup(h.database_url, h.schema)
    return h


def model_calls(h: Harness, run_id: str) -> list[int]:
    return [s for (s,) in h.sql("SELECT step FROM model_calls WHERE run_id = %s ORDER BY id", run_id)]


def test_each_model_call_and_tool_call_is_an_operation(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch)
    h.start_worker()
    run_id = h.client.enqueue("oai_shop", {"prompt": "refund order A1"}).id
    run = h.wait(run_id, "succeeded")
    assert run.result == {"output": ANSWER, "in_doubt": False}
    assert model_calls(h, run_id) == [1, 2, 3]
    journal = h.journal(run_id)
    # each model call an intention and its result; a read journaled as its result alone
    ops = [e["tool"] for e in journal if e["kind"] in ("intention", "result") and "tool" in e]
    model, tool = "oai_shop:model", "oai_shop."
    assert ops == [model, tool + "lookup_order", model, tool + "refund", tool + "email_customer", model]
    # what the model received is captured with each call: the third carries the tools' outputs
    captures = [e for e in journal if e["kind"] == "capture"]
    assert len(captures) == 3
    assert h.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]


def test_a_run_crashed_after_a_model_response_is_served_it_from_the_journal(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch)
    run_id = h.client.enqueue("oai_shop", {"prompt": "refund order A1"}).id
    h.crash_at("after_result", "oai_shop:model")
    assert model_calls(h, run_id) == [1]
    h.start_worker()
    assert h.wait(run_id, "succeeded", timeout=60).result == {"output": ANSWER, "in_doubt": False}
    assert model_calls(h, run_id) == [1, 2, 3]  # the first response replayed, not asked again


def test_the_example_runs_an_agent_with_a_scripted_model_offline(outlast_harness: HarnessFactory) -> None:
    """examples/openai_agents_refund.py: no key, no network; one refund, three model calls."""
    from examples import openai_agents_refund

    h = outlast_harness(openai_agents_refund.app)
    h.start_worker()
    run_id = h.client.enqueue("support", {"message": "Please refund order A1."}).id
    assert h.wait(run_id, "succeeded").result == "Your order A1 is refunded: 30 EUR."
    assert list(openai_agents_refund.refunds.values()) == [30]
    assert [e.get("tool") for e in h.journal(run_id) if e["kind"] == "capture"] == ["support:model"] * 3


def test_a_streamed_run_sends_the_model_s_text_live_and_journals_each_response(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run_streamed``: the text reaches client.stream(run_id) as it comes, the final output is
    the run's result, and a run crashed after a response is served it from the journal."""
    h = shop(outlast_harness, monkeypatch, oai_shop.streamed_app)
    run_id = h.client.enqueue("oai_shop_streamed", {"prompt": "refund order A1"}).id
    h.crash_at("after_result", "oai_shop_streamed:model")
    assert model_calls(h, run_id) == [1]
    h.start_worker()
    assert h.wait(run_id, "succeeded", timeout=60).result == {"output": ANSWER, "in_doubt": False}
    assert model_calls(h, run_id) == [1, 2, 3]  # the first response replayed, not asked again
    assert "".join(h.stream(run_id)) == ANSWER  # the third response's text, word by word
    captures = [e.get("tool") for e in h.journal(run_id) if e["kind"] == "capture"]
    assert captures == ["oai_shop_streamed:model"] * 3  # each streamed call an operation, its request kept
    assert h.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]


def approval_of(h: Harness, run_id: str) -> dict[str, Any]:
    h.wait(run_id, "awaiting_approval")
    pending = [a for a in h.client.approvals(run_id) if a["status"] == "pending"]
    assert len(pending) == 1, pending
    return pending[0]


def test_a_tool_needing_approval_waits_for_one_bound_to_the_model_s_arguments(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SDK's interruption for a tool's approval is an outlast approval: the run waits with no
    worker held; a revision needs an approval of its own, and the tool gets what was approved."""
    h = shop(outlast_harness, monkeypatch, oai_shop.approving_app)
    h.start_worker()
    run_id = h.client.enqueue("oai_shop_approving", {"prompt": "refund order A1"}).id
    asked = approval_of(h, run_id)
    assert (asked["action"], asked["args"]) == ("oai_shop_approving.refund", {"order_id": "A1", "amount": 30})
    assert h.sql("SELECT count(*) FROM refunds") == [(0,)]
    revised = {"order_id": "A1", "amount": 25}
    h.client.revise(
        run_id, asked["op_id"], approver="ann", comment="25 only", args_hash=asked["args_hash"], args=revised
    )
    again = approval_of(h, run_id)
    assert again["args"] == revised and again["op_id"] != asked["op_id"]
    h.client.approve(run_id, again["op_id"], approver="ann", comment="ok", args_hash=again["args_hash"])
    done = h.wait(run_id)
    assert done.state == "succeeded", done.reason
    assert "refund=refunded 25" in done.result["output"]
    assert h.sql("SELECT order_id, amount FROM refunds") == [("A1", 25)]
    assert model_calls(h, run_id) == [1, 2, 3]  # the waits sent no model call again


def test_a_rejected_call_is_not_made_and_the_agent_is_told(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch, oai_shop.approving_app)
    h.start_worker()
    run_id = h.client.enqueue("oai_shop_approving", {"prompt": "refund order A1"}).id
    asked = approval_of(h, run_id)
    h.client.reject(
        run_id, asked["op_id"], approver="ann", comment="not eligible", args_hash=asked["args_hash"]
    )
    done = h.wait(run_id)
    assert done.state == "succeeded", done.reason
    assert "rejected by its approvers" in done.result["output"] and "not eligible" in done.result["output"]
    assert "email_customer=sent" in done.result["output"]  # the other call of the response was made
    assert h.sql("SELECT count(*) FROM refunds") == [(0,)]


def test_approval_when_picks_the_calls_that_need_one_from_the_model_s_arguments(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    h = shop(outlast_harness, monkeypatch, oai_shop.approving_large_app)
    h.start_worker()
    run_id = h.client.enqueue("oai_shop_approving_large", {"prompt": "refund order A1"}).id
    assert h.wait(run_id, "succeeded").result == {"output": ANSWER, "in_doubt": False}
    assert h.client.approvals(run_id) == []  # 30 is not above 100: no approval asked
    assert h.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]


def test_a_streamed_run_waits_for_its_approvals_and_sends_no_text_twice(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``run_streamed`` of an agent whose refund needs approval: the SDK's interruption is an
    outlast approval bound to the model's arguments, waited for with no worker held; the resumed
    run replays the responses streamed before the wait from the journal, so the text they sent
    live is not sent again, and the refund is made with what was approved."""
    h = shop(outlast_harness, monkeypatch, oai_shop.streamed_approving_app)
    h.start_worker()
    run_id = h.client.enqueue("oai_shop_streamed_approving", {"prompt": "refund order A1"}).id
    asked = approval_of(h, run_id)
    assert (asked["action"], asked["args"]) == (
        "oai_shop_streamed_approving.refund",
        {"order_id": "A1", "amount": 30},
    )
    assert h.sql("SELECT count(*) FROM refunds") == [(0,)]
    assert model_calls(h, run_id) == [1, 2]
    h.client.approve(run_id, asked["op_id"], approver="ann", comment="ok", args_hash=asked["args_hash"])
    done = h.wait(run_id)
    assert done.state == "succeeded", done.reason
    assert done.result == {"output": ANSWER, "in_doubt": False}
    assert h.sql("SELECT order_id, amount FROM refunds") == [("A1", 30)]
    assert model_calls(h, run_id) == [1, 2, 3]  # the wait sent no model call again
    assert "".join(h.stream(run_id)) == "Refunding order A1." + ANSWER  # each text sent once


def test_a_tool_the_sdk_says_needs_approval_must_be_given_its_approvers() -> None:
    agent = Agent(name="support", model=oai_shop.ScriptedModel(), tools=[oai_shop.refund])
    agent.tools = [dataclasses.replace(oai_shop.refund, needs_approval=True)]
    with pytest.raises(ValueError, match="declare who approves"):
        DurableAgent(App(), "unapproved", agent)


def test_a_chat_keeps_its_conversation_in_the_run_across_waits(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Between turns the run waits for the user's message (``run.receive``, no worker held); the
    conversation is a ``RunSession`` of the run, rebuilt on each resume by replaying the turns
    before from the journal: the second turn's model is given both messages, and the first
    turn's model call is not made again."""
    h = shop(outlast_harness, monkeypatch, oai_shop.chat_app)
    h.start_worker()
    run_id = h.client.enqueue("oai_chat", {"turns": 2}).id
    h.wait(run_id, "waiting")
    h.send(run_id, "user", {"text": "Where is my order?"})
    wait_for(lambda: model_calls(h, run_id) == [1], 30, 0.05, "the first turn's answer")
    h.wait(run_id, "waiting")
    h.send(run_id, "user", {"text": "Thanks"})
    done = h.wait(run_id)
    assert done.state == "succeeded", done.reason
    assert done.result == ["You said 'Where is my order?' (1 messages)", "You said 'Thanks' (2 messages)"]
    assert model_calls(h, run_id) == [1, 2]  # the first turn replayed from the journal, not asked again


def test_a_session_kept_outside_the_run_is_refused() -> None:
    """Its items would be added again by each resume's replay of the turns before."""
    from agents import SQLiteSession

    durable = DurableAgent(App(), "chat_outside", Agent(name="chat", model=oai_shop.ChatModel()))
    with pytest.raises(ValueError, match="RunSession"):
        durable.run_streamed(cast(Run, None), "hi", session=SQLiteSession("s"))


def test_a_guardrail_s_verdict_is_journaled_and_served_on_a_resume(
    outlast_harness: HarnessFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An input guardrail's check is an operation (``NAME:guardrail``) before the first model
    call: a run crashed after that call is served the verdict from the journal, and the
    guardrail's service is asked once."""
    h = shop(outlast_harness, monkeypatch, oai_shop.guarded_app)
    run_id = h.client.enqueue("oai_shop_guarded", {"prompt": "refund order A1"}).id
    h.crash_at("after_result", "oai_shop_guarded:model")
    h.start_worker()
    assert h.wait(run_id, "succeeded", timeout=60).result == {"output": ANSWER, "in_doubt": False}
    assert h.sql("SELECT count(*) FROM effects WHERE tool = 'guardrail'") == [(1,)]
    assert model_calls(h, run_id) == [1, 2, 3]
    checks = [e for e in h.journal(run_id) if e.get("tool") == "oai_shop_guarded:guardrail"]
    assert [c["kind"] for c in checks] == ["result"]  # a read: its result alone, once
    assert checks[0]["ok"] == {"output_info": {"polite": True}, "tripwire_triggered": False}
