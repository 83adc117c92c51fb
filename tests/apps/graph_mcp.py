"""The LangGraph MCP world: a graph whose ``ToolNode`` holds the tools of a real MCP server process
(tests/apps/mcp_server.py, over stdio, started by the workflow with the worker's environment),
loaded with ``outlast.integrations.langgraph.mcp_tools``, its ``agent`` node a script that looks
the order up (read-only), refunds it (idempotent), emails the customer (neither), then answers
with what the tools said. ``overriding`` declares the email idempotent over the server's word."""

from __future__ import annotations

import os
import sys
from typing import Annotated, Any, TypedDict

from langchain_core.messages import AIMessage, AnyMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.graph import END, START, StateGraph
from langgraph.graph.message import add_messages
from langgraph.prebuilt import ToolNode
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from outlast import App, Run
from outlast.integrations.langgraph import DurableGraph, EffectName, mcp_tools
from tests.apps.mcp_shop import ROOT, STEPS


class Chat(TypedDict):
    messages: Annotated[list[AnyMessage], add_messages]


def agent(state: Chat) -> dict[str, Any]:
    """A scripted model: one call a turn, then an answer made of what the tools said."""
    turn = sum(isinstance(m, AIMessage) for m in state["messages"])
    if turn < len(STEPS):
        name, args = STEPS[turn]
        return {"messages": [AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"c{turn}"}])]}
    said = [m for m in state["messages"] if isinstance(m, ToolMessage)]
    return {"messages": [AIMessage("; ".join(f"{m.name}={m.text}" for m in said))]}


def route(state: Chat) -> str:
    last = state["messages"][-1]
    return "tools" if isinstance(last, AIMessage) and last.tool_calls else END


def graph(tools: list[BaseTool]) -> Any:
    builder = StateGraph(Chat)
    builder.add_node("agent", agent)
    builder.add_node("tools", ToolNode(tools))
    builder.add_edge(START, "agent")
    builder.add_conditional_edges("agent", route, ["tools", END])
    builder.add_edge("tools", "agent")
    return builder.compile()


app = App()
SERVER = StdioServerParameters(command=sys.executable, args=["-m", "tests.apps.mcp_server"], cwd=ROOT)


def shop(name: str, tools: dict[str, EffectName] | None = None) -> None:
    @app.workflow(name)
    async def workflow(run: Run, prompt: str) -> dict[str, Any]:
        server = SERVER.model_copy(update={"env": dict(os.environ)})  # the worker's world
        async with stdio_client(server) as (read, write), ClientSession(read, write) as session:
            await session.initialize()
            durable = DurableGraph(
                app, name, graph(await mcp_tools(session)), nodes={"agent": "read"}, tools=tools
            )
            state = await durable.run(run, {"messages": [("user", prompt)]})
        return {"answer": state["messages"][-1].text, "in_doubt": run.in_doubt(f"{name}.email_customer")}


shop("mcp_graph")
shop("mcp_graph_overriding", {"email_customer": "idempotent", "find_order": "plain"})
