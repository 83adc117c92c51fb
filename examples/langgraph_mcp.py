"""An MCP server's tools in a LangGraph graph run durably by outlast: each tool call an operation
of the run, of the effect the server's tool annotations declare, its idempotency key in the call's
``_meta``.

The server (this module run with ``serve``, started by the workflow over stdio) has a read-only
``find_order`` (redone freely after a crash) and an idempotent ``refund`` (called again with the
same key after a crash: the server refunds once per key). The graph's ``plan`` node stands in for
a chat model (no API key, no network): it calls the lookup, then the refund, then answers. Run a
worker, then this module::

    outlast worker examples.langgraph_mcp:app
    python -m examples.langgraph_mcp
"""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, HumanMessage, ToolMessage
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import ToolAnnotations

from outlast import App, Client, Run
from outlast.integrations.langgraph import DurableGraph, mcp_tools

server = MCPServer("payments")
refunded: dict[str, int] = {}  # the server's refunds, by the idempotency key each call carried


@server.tool(annotations=ToolAnnotations(read_only_hint=True))
def find_order(order_id: str) -> str:
    """Look an order up."""
    return f"order {order_id}: 30 EUR"


@server.tool(annotations=ToolAnnotations(idempotent_hint=True))
def refund(order_id: str, amount: int, ctx: Context) -> str:
    """Refund an order, once per idempotency key."""
    key = (ctx.request_context.meta or {}).get("outlast/idempotency-key", order_id)
    refunded.setdefault(key, amount)
    return f"refunded {refunded[key]} EUR"


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


PLAN = [("find_order", {"order_id": "A1"}), ("refund", {"order_id": "A1", "amount": 30})]


def plan(state: Chat) -> dict[str, Any]:
    turn = sum(isinstance(m, AIMessage) for m in state["messages"])
    if turn < len(PLAN):
        name, args = PLAN[turn]
        return {"messages": [AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call-{turn}"}])]}
    said = [m.text for m in state["messages"] if isinstance(m, ToolMessage)]
    return {"messages": [AIMessage(f"Done: {'; '.join(said)}.")]}


def next_step(state: Chat) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


app = App()
SERVER = StdioServerParameters(command=sys.executable, args=["-m", "examples.langgraph_mcp", "serve"])


@app.workflow("mcp_refund")
async def mcp_refund(run: Run, message: str) -> str:
    served = SERVER.model_copy(update={"env": dict(os.environ)})
    async with stdio_client(served) as (read, write), ClientSession(read, write) as session:
        await session.initialize()
        builder = StateGraph(Chat)
        builder.add_node("plan", plan)
        builder.add_node("tools", ToolNode(await mcp_tools(session)))
        builder.add_edge(START, "plan")
        builder.add_conditional_edges("plan", next_step, ["tools", END])
        builder.add_edge("tools", "plan")
        graph = DurableGraph(app, "mcp_refund", builder.compile(), nodes={"plan": "read"})
        state = await graph.run(run, {"messages": [HumanMessage(message)]})
    return str(state["messages"][-1].text)


if __name__ == "__main__":
    if sys.argv[1:] == ["serve"]:
        server.run("stdio")
    else:
        with Client.from_env(app=app) as client:
            run = client.enqueue("mcp_refund", {"message": "Please refund order A1."})
            print(client.wait(run.id, timeout=60).result)
