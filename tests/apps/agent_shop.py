"""The agents' test world: a support agent on a scripted ``FunctionModel`` whose every call is
counted in ``model_calls``, and tools of each effect whose every run is counted in ``effects`` (in
tables of the test's own schema, so a worker process killed mid-run leaves them to be counted).

The script: look the order up (a read); refund it and email the customer, in parallel (two tool
calls of one response: an idempotent refund, a reconciled email); answer. ``plain_app``'s email is a
plain tool (in doubt after a crash); ``approving_app``'s refund above 20 needs ann's approval;
``admitting_app``'s agent admits the messages on the channel ``customer`` at each model request, and
the model counts in ``model_saw`` how many times each request carried the customer's message."""

from __future__ import annotations

import os
import signal
from typing import Any

from pydantic_ai import Agent, models
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.usage import RequestUsage

from outlast import NOT_EXECUTED, App, Run, current_action
from outlast.action import Action
from outlast.agents import (
    Approval,
    OutlastDurability,
    ToolEffect,
    idempotent,
    plain,
    read,
    reconciled,
    run_agent,
)
from tests.apps import connect, setup_tables

TABLES = """
CREATE TABLE IF NOT EXISTS model_calls (id serial PRIMARY KEY, run_id text NOT NULL, step int NOT NULL);
CREATE TABLE IF NOT EXISTS effects (id serial PRIMARY KEY, run_id text NOT NULL, tool text NOT NULL,
    key text NOT NULL, detail text NOT NULL);
CREATE TABLE IF NOT EXISTS model_saw (id serial PRIMARY KEY, run_id text NOT NULL, step int NOT NULL,
    times int NOT NULL);
CREATE TABLE IF NOT EXISTS refunds (key text PRIMARY KEY, order_id text NOT NULL, amount int NOT NULL);
"""


models.ALLOW_MODEL_REQUESTS = False  # nothing here reaches a provider: the model is a script


def setup(database_url: str, schema: str) -> None:
    setup_tables(database_url, schema, TABLES)


def _effect(tool: str, detail: str) -> Action:
    a = current_action()
    with connect() as c:
        c.execute(
            "INSERT INTO effects (run_id, tool, key, detail) VALUES (%s, %s, %s, %s)",
            (a.run_id, tool, a.idempotency_key, detail),
        )
    return a


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model: one step per response, counted in the world before it answers."""
    step = sum(isinstance(m, ModelResponse) for m in messages) + 1
    returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    with connect() as c:  # a model request runs as an operation: its action names the run
        c.execute("INSERT INTO model_calls (run_id, step) VALUES (%s, %s)", (current_action().run_id, step))
    usage = RequestUsage(input_tokens=10, output_tokens=5)
    if step == 1:
        return ModelResponse([ToolCallPart("lookup_order", {"order_id": "A1"}, "call-1")], usage=usage)
    if step == 2:
        calls = [
            ToolCallPart("refund", {"order_id": "A1", "amount": 30}, "call-2"),
            ToolCallPart("email_customer", {"to": "ann@example.com", "text": "refunded"}, "call-3"),
        ]
        return ModelResponse(calls, usage=usage)
    said = "; ".join(f"{p.tool_name}={p.model_response_str()}" for p in returns)
    return ModelResponse([TextPart(f"done: {said}")], usage=usage)


CUSTOMER_SAYS = "also refund B2"


def admitting_script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The script, counting first how many times the request carries the customer's message."""
    times = sum(
        p.content == CUSTOMER_SAYS
        for m in messages
        for p in getattr(m, "parts", [])
        if isinstance(p, UserPromptPart)
    )
    step = sum(isinstance(m, ModelResponse) for m in messages) + 1
    with connect() as c:
        c.execute(
            "INSERT INTO model_saw (run_id, step, times) VALUES (%s, %s, %s)",
            (current_action().run_id, step, times),
        )
    return script(messages, info)


def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up."""
    _effect("lookup_order", order_id)
    return {"order_id": order_id, "amount": 30}


def refund(order_id: str, amount: int) -> str:
    """Refund an order (the bank honours the idempotency key). ``SHOP_DIE_IN=refund`` (a crash
    test's armed worker) kills the process in the middle of it, before the bank's row."""
    a = _effect("refund", f"{order_id}:{amount}")
    if os.environ.get("SHOP_DIE_IN") == "refund":
        os.kill(os.getpid(), signal.SIGKILL)
    with connect() as c:
        c.execute(
            "INSERT INTO refunds (key, order_id, amount) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING",
            (a.idempotency_key, order_id, amount),
        )
    return f"refunded {amount}"


def email_customer(to: str, text: str) -> str:
    """Email the customer."""
    _effect("email_customer", f"{to}:{text}")
    return "sent"


def email_sent(args: dict[str, Any], action: Action) -> Any:
    """Ask the outbox whether the email went out."""
    with connect() as c:
        row = c.execute(
            "SELECT 1 FROM effects WHERE key = %s AND tool = 'email_customer'", (action.idempotency_key,)
        ).fetchone()
    return "sent" if row else NOT_EXECUTED


def build(
    name: str, email: ToolEffect, refund_approval: Approval | None = None, admit: str | None = None
) -> App:
    """An app whose workflow ``name`` runs the support agent (the email declared ``email``), and
    returns its answer and whether an email call was in doubt (``run.in_doubt``)."""
    app = App()
    durability = OutlastDurability(
        app,
        tools={
            "lookup_order": read(),
            "refund": idempotent(approval=refund_approval),
            "email_customer": email,
        },
        model_cost={"tokens": 20},
    )
    agent = Agent(
        FunctionModel(admitting_script if admit else script),
        name=name,
        tools=[lookup_order, refund, email_customer],
        capabilities=[durability],
    )

    @app.workflow(name)
    async def support(run: Run, prompt: str) -> dict[str, Any]:
        result = await run_agent(run, agent, prompt, admit=admit)
        return {"output": result.output, "in_doubt": run.in_doubt(f"{name}.email_customer")}

    return app


app = build("shop", reconciled(email_sent))
plain_app = build("shop_plain", plain())
approving_app = build(
    "shop_approving", reconciled(email_sent), Approval(["ann"], when=lambda args: args["amount"] > 20)
)
admitting_app = build("shop_admitting", reconciled(email_sent), admit="customer")
