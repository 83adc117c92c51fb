"""The LangGraph tools world: a graph whose ``agent`` node asks a scripted model for tool calls
and whose ``tools`` node (LangGraph's ``ToolNode``) makes them, run durably by the workflow
``tooled`` (DurableGraph): each tool call an operation with the effect declared for its tool,
``lookup`` a read, ``refund`` idempotent (the bank's ``refunds`` keeps one refund per idempotency
key), ``email`` plain (one row of ``emails`` a call). Each tool counts its every run in
``effects`` with its idempotency key. ``GRAPH_DIE_IN=email`` kills the worker in the middle of the
email (before its row); ``GRAPH_DIE_IN=refund`` right after the bank's row (before its result).
The workflow ``tooled_streamed`` runs the same graph with its ``updates`` streamed."""

from __future__ import annotations

import os
import signal
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.tools import tool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode

from outlast import App, Run, current_action
from outlast.integrations.langgraph import DurableGraph
from tests.apps import connect, setup_tables

TABLES = """
CREATE TABLE IF NOT EXISTS effects (id serial PRIMARY KEY, run_id text NOT NULL, tool text NOT NULL,
    key text NOT NULL);
CREATE TABLE IF NOT EXISTS refunds (key text PRIMARY KEY, order_id text NOT NULL, amount int NOT NULL);
CREATE TABLE IF NOT EXISTS emails (id serial PRIMARY KEY, run_id text NOT NULL, body text NOT NULL);
"""


def setup(database_url: str, schema: str) -> None:
    setup_tables(database_url, schema, TABLES)


def _counted(name: str, statement: str = "", args: tuple[Any, ...] = ()) -> str:
    a = current_action()
    with connect() as c:
        c.execute(
            "INSERT INTO effects (run_id, tool, key) VALUES (%s, %s, %s)", (a.run_id, name, a.idempotency_key)
        )
        if os.environ.get("GRAPH_DIE_IN") == name == "email":
            os.kill(os.getpid(), signal.SIGKILL)
        if statement:
            c.execute(statement, (a.idempotency_key, *args) if name == "refund" else args)
    if os.environ.get("GRAPH_DIE_IN") == name == "refund":
        os.kill(os.getpid(), signal.SIGKILL)
    return a.idempotency_key


@tool
def lookup(order_id: str) -> str:
    """Look an order up."""
    _counted("lookup")
    return f"{order_id}: 30 EUR"


@tool
def refund(order_id: str, amount: int) -> str:
    """Refund an order (the bank honours the idempotency key)."""
    insert = "INSERT INTO refunds (key, order_id, amount) VALUES (%s, %s, %s) ON CONFLICT DO NOTHING"
    _counted("refund", insert, (order_id, amount))
    return f"refunded {amount}"


@tool
def email(text: str) -> str:
    """Email the customer."""
    _counted("email", "INSERT INTO emails (run_id, body) VALUES (%s, %s)", (current_action().run_id, text))
    return "sent"


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


SCRIPT = [  # the model's turns: the lookup and the refund (in parallel), then the email
    [
        {"name": "lookup", "args": {"order_id": "A1"}, "id": "c1"},
        {"name": "refund", "args": {"order_id": "A1", "amount": 30}, "id": "c2"},
    ],
    [{"name": "email", "args": {"text": "refunded"}, "id": "c3"}],
]


def agent(state: Chat) -> dict[str, Any]:
    """A scripted model: its turns of calls, then an answer made of what the tools said."""
    said = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    turn = sum(isinstance(m, AIMessage) for m in state["messages"])
    if turn < len(SCRIPT):
        return {"messages": [AIMessage("", tool_calls=SCRIPT[turn])]}
    return {"messages": [AIMessage("; ".join(f"{m.name}={m.content}" for m in said))]}


def route(state: Chat) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


builder = StateGraph(Chat)
builder.add_node("agent", agent)
builder.add_node("tools", ToolNode([lookup, refund, email]))
builder.add_edge(START, "agent")
builder.add_conditional_edges("agent", route, ["tools", END])
builder.add_edge("tools", "agent")

app = App()
tooled = DurableGraph(
    app,
    "tooled",
    builder.compile(),
    nodes={"agent": "read"},
    tools={"lookup": "read", "refund": "idempotent"},
)


@app.workflow("tooled", version="1")
async def tooled_workflow(run: Run, prompt: str) -> dict[str, Any]:
    state = await tooled.run(run, {"messages": [("user", prompt)]})
    return {"answer": state["messages"][-1].content, "in_doubt": run.in_doubt("tooled.email")}


@app.workflow("tooled_streamed", version="1")
async def tooled_streamed(run: Run, prompt: str) -> str:
    state = await tooled.run(run, {"messages": [("user", prompt)]}, stream_mode=["updates"])
    return str(state["messages"][-1].content)
