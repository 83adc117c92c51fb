"""This module is the app of ``outlast demo agent``.

It holds a support agent (pydantic-ai, ``outlast[agents]``) on a scripted model, and the shop it
acts on (its refunds, its outbox, and the calls the model answered), in a
schema of its own beside the demo's (``<schema>_shop``)."""

from __future__ import annotations

import os
from typing import Any

import psycopg
from psycopg import sql
from pydantic_ai import Agent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from outlast.action import NOT_EXECUTED, Action, current_action
from outlast.agents import OutlastDurability, agent_workflow, idempotent, read, reconciled
from outlast.app import App

_TABLES = """
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.refunds (idempotency_key text PRIMARY KEY, run_id text NOT NULL,
    order_id text NOT NULL, amount integer NOT NULL, requests integer NOT NULL DEFAULT 1);
CREATE TABLE IF NOT EXISTS {s}.outbox (message_id text PRIMARY KEY, run_id text NOT NULL,
    text text NOT NULL);
CREATE TABLE IF NOT EXISTS {s}.model_calls (id serial PRIMARY KEY, run_id text NOT NULL,
    step integer NOT NULL);
"""


def shop_schema(outlast_schema: str) -> str:
    return f"{outlast_schema}_shop"


def reset_shop(database_url: str, schema: str) -> None:
    with psycopg.connect(database_url, autocommit=True) as conn:
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(sql.Identifier(schema)))
        conn.execute(sql.SQL(_TABLES).format(s=sql.Identifier(schema)))


def shop_rows(database_url: str, schema: str, table: str, run_id: str) -> list[tuple[Any, ...]]:
    with psycopg.connect(database_url, autocommit=True, options=f"-c search_path={schema}") as conn:
        query = sql.SQL("SELECT * FROM {} WHERE run_id = %s ORDER BY 1").format(sql.Identifier(table))
        return conn.execute(query, (run_id,)).fetchall()


def _execute(statement: str, *params: Any) -> tuple[Any, ...] | None:
    """In the worker: the shop beside the schema it serves."""
    schema = shop_schema(os.environ["OUTLAST_SCHEMA"])
    with psycopg.connect(
        os.environ["OUTLAST_DATABASE_URL"], autocommit=True, options=f"-c search_path={schema}"
    ) as c:
        cur = c.execute(statement.encode(), params)
        return cur.fetchone() if cur.description else None


def lookup_order(order_id: str) -> dict[str, Any]:
    """Look an order up."""
    return {"order_id": order_id, "customer": "ann@example.com", "amount": 80}


def refund(order_id: str, amount: int) -> str:
    """Refund an order: the shop keeps one refund per idempotency key, and counts the requests."""
    a = current_action()
    _execute(
        "INSERT INTO refunds (idempotency_key, run_id, order_id, amount) VALUES (%s, %s, %s, %s)"
        " ON CONFLICT (idempotency_key) DO UPDATE SET requests = refunds.requests + 1",
        a.idempotency_key,
        a.run_id,
        order_id,
        amount,
    )
    return f"refunded {amount} EUR"


def email_customer(to: str, text: str) -> str:
    """Email the customer (not idempotent: the outbox is asked after a crash)."""
    a = current_action()
    _execute(
        "INSERT INTO outbox (message_id, run_id, text) VALUES (%s, %s, %s)", a.idempotency_key, a.run_id, text
    )
    return "sent"


def email_sent(args: dict[str, Any], action: Action) -> Any:
    found = _execute("SELECT 1 FROM outbox WHERE message_id = %s", action.idempotency_key)
    return "sent" if found else NOT_EXECUTED


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """The model: look the order up, refund it, email the customer, answer (each call counted)."""
    step = sum(isinstance(m, ModelResponse) for m in messages) + 1
    _execute("INSERT INTO model_calls (run_id, step) VALUES (%s, %s)", current_action().run_id, step)
    said = {
        p.tool_name: p.content
        for m in messages
        for p in getattr(m, "parts", ())
        if isinstance(p, ToolReturnPart)
    }
    if step == 1:
        return ModelResponse([ToolCallPart("lookup_order", {"order_id": "A7"})])
    if step == 2:
        return ModelResponse([ToolCallPart("refund", {"order_id": "A7", "amount": 80})])
    if step == 3:
        text = f"Order A7: {said.get('refund')}."
        return ModelResponse([ToolCallPart("email_customer", {"to": "ann@example.com", "text": text})])
    return ModelResponse(
        [TextPart(f"Order A7 is refunded ({said.get('refund')}); the customer was emailed.")]
    )


app = App()
support = Agent(
    FunctionModel(script),
    name="support",
    tools=[lookup_order, refund, email_customer],
    capabilities=[
        OutlastDurability(
            app,
            tools={"lookup_order": read(), "refund": idempotent(), "email_customer": reconciled(email_sent)},
        )
    ],
)
agent_workflow(app, "support", support)
