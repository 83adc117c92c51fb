"""The OpenAI Agents SDK's test world: a support agent on a scripted ``Model`` (the SDK's interface,
no network, no key) whose every call is counted in ``model_calls``, and function tools of each
effect whose every run is counted in ``effects`` (tables of the test's own schema, so a worker
process killed mid-run leaves them to be counted).

The script: look the order up (a read); refund it and email the customer, in the same response (an
idempotent refund, a reconciled email); answer with what the tools said. ``plain_app``'s email is
plain (in doubt after a crash)."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncIterator
from typing import Any

from agents import Agent, GuardrailFunctionOutput, ModelSettings, function_tool, input_guardrail
from agents.items import ModelResponse
from agents.models.interface import Model
from agents.usage import Usage
from openai.types.responses import (
    Response,
    ResponseCompletedEvent,
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseTextDeltaEvent,
    ResponseUsage,
)
from openai.types.responses.response_usage import InputTokensDetails, OutputTokensDetails

from outlast import NOT_EXECUTED, App, Run, current_action
from outlast.action import Action
from outlast.integrations.openai_agents import Approval, DurableAgent, RunSession, ToolEffect
from tests.apps import connect, setup_tables

TABLES = """
CREATE TABLE IF NOT EXISTS model_calls (id serial PRIMARY KEY, run_id text NOT NULL, step int NOT NULL);
CREATE TABLE IF NOT EXISTS effects (id serial PRIMARY KEY, run_id text NOT NULL, tool text NOT NULL,
    key text NOT NULL, detail text NOT NULL);
CREATE TABLE IF NOT EXISTS refunds (key text PRIMARY KEY, order_id text NOT NULL, amount int NOT NULL);
"""


def setup(database_url: str, schema: str) -> None:
    setup_tables(database_url, schema, TABLES)


def call(call_id: str, name: str, args: dict[str, Any]) -> ResponseFunctionToolCall:
    return ResponseFunctionToolCall(
        type="function_call", call_id=call_id, name=name, arguments=json.dumps(args)
    )


def text(text: str) -> ResponseOutputMessage:
    content = [ResponseOutputText(type="output_text", text=text, annotations=[])]
    return ResponseOutputMessage(
        id="msg", type="message", role="assistant", status="completed", content=content
    )


def _step(items: list[Any]) -> tuple[int, dict[str, str]]:
    """Which step a request is (one more than the model's responses in it), and the tools' outputs."""
    calls = {
        i["call_id"]: i["name"] for i in items if isinstance(i, dict) and i.get("type") == "function_call"
    }
    outputs = {
        calls[i["call_id"]]: str(i["output"])
        for i in items
        if isinstance(i, dict) and i.get("type") == "function_call_output"
    }
    return len(
        {i.get("call_id") for i in items if isinstance(i, dict) and i.get("type") == "function_call"}
    ), outputs


class ScriptedModel(Model):
    """The model: one step per response, each call counted in the world before it answers
    (``say``: a text the second response carries before its tool calls)."""

    def __init__(self, say: str = "") -> None:
        self.say = say

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [] if isinstance(input, str) else list(input)
        made, outputs = _step(items)
        step = 1 if made == 0 else 2 if made == 1 else 3
        with connect() as c:  # a model call runs as an operation: its action names the run
            c.execute(
                "INSERT INTO model_calls (run_id, step) VALUES (%s, %s)", (current_action().run_id, step)
            )
        usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
        if step == 1:
            output: list[Any] = [call("call-1", "lookup_order", {"order_id": "A1"})]
        elif step == 2:
            output = [text(self.say)] if self.say else []
            output += [
                call("call-2", "refund", {"order_id": "A1", "amount": 30}),
                call("call-3", "email_customer", {"to": "ann@example.com", "text": "refunded"}),
            ]
        else:
            output = [text("done: " + "; ".join(f"{k}={v}" for k, v in sorted(outputs.items())))]
        return ModelResponse(output=output, usage=usage, response_id=None)

    async def stream_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> AsyncIterator[Any]:
        """The same step streamed: its text word by word, then the completed response."""
        response = await self.get_response(system_instructions, input)
        for item in response.output:
            for part in getattr(item, "content", None) or []:
                for n, word in enumerate(part.text.split(" ")):
                    delta = word if n == 0 else " " + word
                    yield ResponseTextDeltaEvent(
                        type="response.output_text.delta",
                        delta=delta,
                        item_id="msg",
                        output_index=0,
                        content_index=0,
                        logprobs=[],
                        sequence_number=n,
                    )
        usage = ResponseUsage(
            input_tokens=10,
            output_tokens=5,
            total_tokens=15,
            input_tokens_details=InputTokensDetails(cached_tokens=0, cache_write_tokens=0),
            output_tokens_details=OutputTokensDetails(reasoning_tokens=0),
        )
        completed = Response(
            id="resp",
            created_at=0,
            model="scripted",
            object="response",
            output=response.output,
            parallel_tool_calls=False,
            tool_choice="auto",
            tools=[],
            usage=usage,
        )
        yield ResponseCompletedEvent(type="response.completed", response=completed, sequence_number=99)


def _effect(tool: str, detail: str) -> Action:
    a = current_action()
    with connect() as c:
        c.execute(
            "INSERT INTO effects (run_id, tool, key, detail) VALUES (%s, %s, %s, %s)",
            (a.run_id, tool, a.idempotency_key, detail),
        )
    return a


@function_tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up."""
    _effect("lookup_order", order_id)
    return {"order_id": order_id, "amount": 30}


@function_tool
def refund(order_id: str, amount: int) -> str:
    """Refund an order (the bank honours the idempotency key)."""
    a = _effect("refund", f"{order_id}:{amount}")
    with connect() as c:
        c.execute(
            "INSERT INTO refunds (key, order_id, amount) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            (a.idempotency_key, order_id, amount),
        )
    return f"refunded {amount}"


def email_customer_fn(to: str, text: str) -> str:
    """Email the customer."""
    _effect("email_customer", f"{to}:{text}")
    return "sent"


email_customer = function_tool(email_customer_fn, name_override="email_customer")


@function_tool(name_override="email_customer")
async def hanging_email(to: str, text: str) -> str:
    """Email the customer (slowly: under ``OAI_SHOP_HANG``, the outbox takes 0.3 s to send, then
    the call hangs, for a crash test to kill its worker mid-call)."""
    if not os.environ.get("OAI_SHOP_HANG"):
        return str(email_customer_fn(to, text))
    _effect("email_started", to)
    await asyncio.sleep(0.3)
    _effect("email_customer", f"{to}:{text}")
    await asyncio.sleep(600)
    return "sent"


@input_guardrail
def polite(ctx: Any, agent: Any, given: Any) -> GuardrailFunctionOutput:
    """A guardrail that asks a service (counted in the world) whether the request is polite."""
    _effect("guardrail", str(given))
    return GuardrailFunctionOutput(output_info={"polite": True}, tripwire_triggered=False)


def email_sent(args: dict[str, Any], action: Action) -> Any:
    """Ask the outbox whether the email went out."""
    with connect() as c:
        row = c.execute(
            "SELECT 1 FROM effects WHERE key = %s AND tool = 'email_customer'", (action.idempotency_key,)
        ).fetchone()
    return "sent" if row else NOT_EXECUTED


def build(
    name: str,
    email: ToolEffect,
    *,
    refunding: ToolEffect | None = None,
    streamed: bool = False,
    say: str = "",
    emailing: Any = email_customer,
    guardrails: list[Any] | None = None,
) -> App:
    """An app whose workflow ``name`` runs the support agent (the email declared ``email``), and
    returns its final output and whether the email was in doubt (``refunding``: the refund's
    declaration, if not plain idempotent; ``streamed``: run with ``run_streamed``; ``say``: what
    the model says before its refund; ``emailing``: the email tool; ``guardrails``: the agent's
    input guardrails)."""
    app = App()
    agent = Agent(
        name="support",
        instructions="Refund what the customer asks for.",
        model=ScriptedModel(say),
        model_settings=ModelSettings(parallel_tool_calls=False),
        tools=[lookup_order, refund, emailing],
        input_guardrails=guardrails or [],
    )
    durable = DurableAgent(
        app,
        name,
        agent,
        tools={"lookup_order": "read", "refund": refunding or "idempotent", "email_customer": email},
    )

    @app.workflow(name, version="1")
    async def shop(run: Run, prompt: str) -> dict[str, Any]:
        if streamed:  # Runner.run_streamed: the model's text goes live to client.stream(run_id)
            streaming = durable.run_streamed(run, prompt)
            async for _ in streaming.stream_events():
                pass
            result: Any = streaming
        else:
            result = await durable.run(run, prompt)
        return {"output": result.final_output, "in_doubt": run.in_doubt(durable.tool_name("email_customer"))}

    return app


app = build("oai_shop", ToolEffect("reconciled", reconciler=email_sent))
plain_app = build("oai_shop_plain", ToolEffect("plain"))
streamed_app = build("oai_shop_streamed", ToolEffect("reconciled", reconciler=email_sent), streamed=True)
approving_app = build(
    "oai_shop_approving",
    ToolEffect("reconciled", reconciler=email_sent),
    refunding=ToolEffect("idempotent", approval=Approval(approvers=["ann"])),
)
# the refund needs approval only above 100: this one (30) is made at once
approving_large_app = build(
    "oai_shop_approving_large",
    ToolEffect("reconciled", reconciler=email_sent),
    refunding=ToolEffect(
        "idempotent", approval=Approval(approvers=["ann"], when=lambda a: a["amount"] > 100)
    ),
)
# streamed, the refund needing approval: the text said before the wait is not sent again after it
streamed_approving_app = build(
    "oai_shop_streamed_approving",
    ToolEffect("reconciled", reconciler=email_sent),
    refunding=ToolEffect("idempotent", approval=Approval(approvers=["ann"])),
    streamed=True,
    say="Refunding order A1.",
)
# the email hangs mid-call under OAI_SHOP_HANG (a crash test kills its worker there)
hanging_app = build(
    "oai_shop_hanging", ToolEffect("reconciled", reconciler=email_sent), emailing=hanging_email
)
hanging_plain_app = build("oai_shop_hanging_plain", ToolEffect("plain"), emailing=hanging_email)


class ChatModel(Model):
    """A chat model: it answers the user's last message and says how many it has seen, each call
    counted in the world (its step: the user messages it was given)."""

    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [{"role": "user", "content": input}] if isinstance(input, str) else list(input)
        said = [str(i["content"]) for i in items if isinstance(i, dict) and i.get("role") == "user"]
        with connect() as c:
            c.execute(
                "INSERT INTO model_calls (run_id, step) VALUES (%s, %s)", (current_action().run_id, len(said))
            )
        usage = Usage(requests=1, input_tokens=10, output_tokens=5, total_tokens=15)
        return ModelResponse(
            output=[text(f"You said {said[-1]!r} ({len(said)} messages)")], usage=usage, response_id=None
        )

    async def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError
        yield


chat_app = App()
chat = DurableAgent(chat_app, "oai_chat", Agent(name="chat", model=ChatModel()))


@chat_app.workflow("oai_chat", version="1")
async def chat_run(run: Run, turns: int = 2) -> list[str]:
    """A chat: each turn waits for the user's message (no worker held), the conversation kept in
    a ``RunSession`` of the run."""
    session = RunSession(run)
    answers = []
    for _ in range(turns):
        message = await run.receive("user")
        result = await chat.run(run, message["text"], session=session)
        answers.append(str(result.final_output))
    return answers


# the agent's input guardrail journaled: a resume does not ask its service again
guarded_app = build("oai_shop_guarded", ToolEffect("reconciled", reconciler=email_sent), guardrails=[polite])
