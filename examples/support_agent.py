"""A support agent (pydantic-ai) that outlasts its worker: it looks an order up (a read), refunds it
(idempotent, with an approval above 50), emails the customer (reconciled against the outbox), streams
its answers live (``outlast stream RUN``) and, asked to, waits for the customer's replies with no
worker held (a message the customer sends while it works is admitted at its next model request).

It needs ``outlast[agents]``. With no model named it answers from a script (no API key, no network);
``SUPPORT_MODEL=openai:gpt-4o`` (any pydantic-ai model name, its provider's key in the environment)
makes a real model drive the same tools. Run it from the repository root (with no OUTLAST_*_URL
set, outlast starts its own private Postgres and Redis in .outlast/; the shop lives in that
Postgres, in schema ``outlast_shop``):

    outlast migrate
    outlast worker examples.support_agent:app                 # one terminal
    outlast enqueue support --input '{"prompt": "Refund order A7, please."}' --wait    # another

Order A7 costs 80: the refund waits for an approval (``outlast status RUN`` shows it, with its
arguments' hash; then ``outlast approve`` or ``outlast revise``). With ``"replies": 1`` in the
input, the run then waits for the customer's reply (``outlast send RUN customer '"Thanks!"'``) and
answers it; ``outlast stream RUN`` shows the answers as they are written. To see a crash and a
resume, start the worker armed to die once the model's second response is journaled, then start it
again: the journaled responses are replayed, not asked for again, and the shop has one refund:

    OUTLAST_FAILPOINTS=after_result:support:model outlast worker examples.support_agent:app
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator
from typing import Any

import psycopg
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models import Model
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, DeltaToolCalls, FunctionModel

from examples import own_tables
from outlast import NOT_EXECUTED, Action, App, Run, current_action
from outlast.agents import Approval, OutlastDurability, idempotent, read, reconciled, run_agent

app = App()
ORDERS = {
    "A7": {"customer": "ann@example.com", "amount": 80},
    "B2": {"customer": "bo@example.com", "amount": 12},
}


_TABLES = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.refunds (idempotency_key text PRIMARY KEY, order_id text NOT NULL,
    amount integer NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.outbox (message_id text PRIMARY KEY, to_address text NOT NULL,
    text text NOT NULL);
"""


def tables_schema(outlast_schema: str) -> str:
    return f"{outlast_schema}_shop"


@functools.cache
def _where() -> tuple[str, str]:
    """The shop's tables: in outlast's Postgres, in a schema beside the one the worker serves."""
    return own_tables(tables_schema, _TABLES)


def execute(statement: str, *params: Any) -> tuple[Any, ...] | None:
    url, schema = _where()
    with psycopg.connect(url, autocommit=True, options=f"-c search_path={schema}") as conn:
        cur = conn.execute(statement.encode(), params)
        return cur.fetchone() if cur.description else None


def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up: its customer and amount."""
    order = ORDERS.get(order_id)
    return {"order_id": order_id, **order} if order else {"order_id": order_id, "error": "no such order"}


def refund(order_id: str, amount: int) -> str:
    """Refund an order. The shop keeps one refund per idempotency key: a repeat is not a second one."""
    execute(
        "INSERT INTO refunds (idempotency_key, order_id, amount) VALUES (%s, %s, %s)"
        " ON CONFLICT (idempotency_key) DO NOTHING",
        current_action().idempotency_key,
        order_id,
        amount,
    )
    return f"refunded {amount} for {order_id}"


def email_customer(to: str, text: str) -> str:
    """Email the customer. The mailer is not idempotent: the outbox is asked after a crash."""
    execute(
        "INSERT INTO outbox (message_id, to_address, text) VALUES (%s, %s, %s)",
        current_action().idempotency_key,
        to,
        text,
    )
    return "sent"


def email_sent(args: dict[str, Any], action: Action) -> Any:
    """Whether an interrupted email went out: the outbox knows it by its message id."""
    found = execute("SELECT 1 FROM outbox WHERE message_id = %s", action.idempotency_key)
    return "sent" if found else NOT_EXECUTED


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model when none is named: look the order up, refund it, email the customer, answer;
    then answer each reply of the customer."""
    wrote = [p.content for p in getattr(messages[-1], "parts", ()) if isinstance(p, UserPromptPart)]
    if wrote and any(isinstance(m, ModelResponse) for m in messages):  # the customer wrote again
        return ModelResponse(
            [TextPart(f"Thank you for your reply ({wrote[-1]}). Anything else, just write.")]
        )
    returns = {
        p.tool_name: p.content
        for m in messages
        for p in getattr(m, "parts", ())
        if isinstance(p, ToolReturnPart)
    }
    order = returns.get("lookup_order")
    if order is None:
        return ModelResponse([ToolCallPart("lookup_order", {"order_id": "A7"})])
    if "refund" not in returns:
        assert isinstance(order, dict)
        return ModelResponse([ToolCallPart("refund", {"order_id": "A7", "amount": order["amount"]})])
    if "email_customer" not in returns:
        assert isinstance(order, dict)
        text = f"Your order A7 was handled: {returns['refund']}."
        return ModelResponse([ToolCallPart("email_customer", {"to": order["customer"], "text": text})])
    return ModelResponse(
        [TextPart(f"Done. Refund: {returns['refund']}; email: {returns['email_customer']}.")]
    )


async def streamed(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[str | DeltaToolCalls]:
    """The script, streamed as a provider streams: its text word by word, its tool calls whole."""
    for index, part in enumerate(scripted(messages, info).parts):
        if isinstance(part, TextPart):
            words = part.content.split(" ")
            for i, word in enumerate(words):
                yield word if i == 0 else f" {word}"
        elif isinstance(part, ToolCallPart):
            yield {
                index: DeltaToolCall(
                    name=part.tool_name, json_args=part.args_as_json_str(), tool_call_id=part.tool_call_id
                )
            }


def model() -> Model | str:
    return os.environ.get("SUPPORT_MODEL") or FunctionModel(scripted, stream_function=streamed)


support_agent = Agent(
    model(),
    name="support",
    instructions="You are a shop's support agent. Look the order up before acting on it.",
    tools=[lookup_order, refund, email_customer],
    capabilities=[
        OutlastDurability(
            app,
            tools={
                "lookup_order": read(),
                "refund": idempotent(
                    approval=Approval(["support-lead"], when=lambda a: a.get("amount", 0) > 50)
                ),
                "email_customer": reconciled(email_sent),
            },
            model_cost={"tokens": 4000},
        )
    ],
)


@app.workflow("support")
async def support(run: Run, prompt: str, replies: int = 0) -> str:
    """Answer the customer, streamed; then wait (no worker held, a day at most) for up to
    ``replies`` replies on the channel ``customer``, each answered on the conversation so far.
    The agent's last answer is the result."""
    history: list[ModelMessage] = []
    answer = ""
    for turn in range(replies + 1):
        if turn:
            reply = await run.receive("customer", timeout=86400)
            if reply is None:
                break
            prompt = reply if isinstance(reply, str) else str(reply.get("text", reply))
        result = await run_agent(
            run, support_agent, prompt, message_history=history, admit="customer", stream=True
        )
        history = result.all_messages()
        answer = str(result.output)
    return answer
