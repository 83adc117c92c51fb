"""The LangGraph chat world: a graph whose ``agent`` node asks langchain-core's fake chat model
(``GenericFakeChatModel``) for its next turn and whose ``tools`` node (LangGraph's ``ToolNode``)
makes the calls, run durably by the workflow ``chat`` (DurableGraph). The ``agent`` node is plain
(the default): its response is journaled before the graph goes on. ``lookup`` is a read;
``refund`` is reconciled: its reconciler asks the bank's ``refunds`` (one row per idempotency
key) whether the refund happened. Counted in the world: each model call with the turn it
answered (``model_calls``, by a LangChain callback), each tool's runs (``effects``) and each
reconciler's (``reconciled``). ``CHAT_DIE_IN=refund`` kills the worker in the middle of the
refund, right after the bank's row (before its result)."""

from __future__ import annotations

import os
import signal
from typing import Annotated, Any, TypedDict
from uuid import UUID

from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, AnyMessage, BaseMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode

from outlast import NOT_EXECUTED, Action, App, Run, current_action
from outlast.integrations.langgraph import DurableGraph, NodeEffect
from tests.apps import connect, setup_tables

TABLES = """
CREATE TABLE IF NOT EXISTS model_calls (id serial PRIMARY KEY, run_id text NOT NULL, turn int NOT NULL);
CREATE TABLE IF NOT EXISTS effects (id serial PRIMARY KEY, run_id text NOT NULL, tool text NOT NULL,
    key text NOT NULL);
CREATE TABLE IF NOT EXISTS reconciled (id serial PRIMARY KEY, key text NOT NULL, found boolean NOT NULL);
CREATE TABLE IF NOT EXISTS refunds (key text PRIMARY KEY, order_id text NOT NULL, amount int NOT NULL);
"""


def setup(database_url: str, schema: str) -> None:
    setup_tables(database_url, schema, TABLES)


SCRIPT = [  # the model's turns: a lookup, then a refund, then its answer
    AIMessage("", tool_calls=[{"name": "lookup", "args": {"order_id": "A1"}, "id": "c1"}]),
    AIMessage("", tool_calls=[{"name": "refund", "args": {"order_id": "A1", "amount": 30}, "id": "c2"}]),
]


class Counted(BaseCallbackHandler):
    """Counts each call of the chat model in ``model_calls``, with the turn it answers."""

    def __init__(self, run_id: str, turn: int) -> None:
        self.run_id, self.turn = run_id, turn

    def on_chat_model_start(
        self, serialized: dict[str, Any], messages: list[list[BaseMessage]], *, run_id: UUID, **kw: Any
    ) -> None:
        with connect() as c:
            c.execute("INSERT INTO model_calls (run_id, turn) VALUES (%s, %s)", (self.run_id, self.turn))


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


async def agent(state: Chat) -> dict[str, Any]:
    """Ask the fake chat model for the turn the conversation is at."""
    turn = sum(isinstance(m, AIMessage) for m in state["messages"])
    said = "; ".join(f"{m.name}={m.content}" for m in state["messages"] if isinstance(m, ToolMessage))
    reply = SCRIPT[turn] if turn < len(SCRIPT) else AIMessage(said)
    model = GenericFakeChatModel(messages=iter([reply]))
    response = await model.ainvoke(state["messages"], {"callbacks": [Counted(current_action().run_id, turn)]})
    return {"messages": [response]}


def _counted(name: str) -> None:
    a = current_action()
    with connect() as c:
        c.execute(
            "INSERT INTO effects (run_id, tool, key) VALUES (%s, %s, %s)", (a.run_id, name, a.idempotency_key)
        )


@tool
def lookup(order_id: str) -> str:
    """Look an order up."""
    _counted("lookup")
    return f"{order_id}: 30 EUR"


@tool
def refund(order_id: str, amount: int) -> str:
    """Refund an order (the bank keeps one refund per key, and can be asked about it)."""
    _counted("refund")
    insert = "INSERT INTO refunds (key, order_id, amount) VALUES (%s, %s, %s)"
    with connect() as c:
        c.execute(insert, (current_action().idempotency_key, order_id, amount))
    if os.environ.get("CHAT_DIE_IN") == "refund":
        os.kill(os.getpid(), signal.SIGKILL)
    return f"refunded {amount}"


def refunded(args: dict[str, Any], action: Action) -> Any:
    """The refund's reconciler: the bank is asked whether the call's refund exists."""
    key = action.idempotency_key
    with connect() as c:
        found = c.execute("SELECT amount FROM refunds WHERE key = %s", (key,)).fetchall()
        c.execute("INSERT INTO reconciled (key, found) VALUES (%s, %s)", (key, bool(found)))
    return f"refunded {found[0][0]}" if found else NOT_EXECUTED


def route(state: Chat) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


builder = StateGraph(Chat)
builder.add_node("agent", agent)
builder.add_node("tools", ToolNode([lookup, refund]))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", route, ["tools", END])
builder.add_edge("tools", "agent")

app = App()
chat = DurableGraph(
    app,
    "chat",
    builder.compile(),
    tools={"lookup": "read", "refund": NodeEffect("reconciled", reconciler=refunded)},
)


@app.workflow("chat", version="1")
async def chat_workflow(run: Run, prompt: str) -> dict[str, Any]:
    state = await chat.run(run, {"messages": [("user", prompt)]})
    return {"answer": state["messages"][-1].content, "in_doubt": run.in_doubt("chat.refund")}
