"""The MCP tests' agent: a scripted ``FunctionModel`` (counted in ``model_calls``) whose tools are
those of a real MCP server process (tests/apps/mcp_server.py) reached over stdio, or over
streamable HTTP (``build(..., url=...)``). The script: look the order up (read-only), refund
it (idempotent), email the customer (plain), answer with what the tools returned.
``overriding_app`` declares the email idempotent and the lookup plain, over the server's word."""

from __future__ import annotations

import os
import sys
from typing import Any

from fastmcp.client.transports import StdioTransport
from pydantic_ai import Agent, models
from pydantic_ai.mcp import MCPToolset
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.toolsets import AbstractToolset

from outlast import App, Run, current_action
from outlast.agents import Declared, OutlastDurability, idempotent, plain, run_agent
from tests.apps import connect, mcp_server, setup_tables

models.ALLOW_MODEL_REQUESTS = False  # nothing here reaches a provider: the model is a script

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
STEPS = [
    ("find_order", {"order_id": "A1"}),
    ("refund", {"order_id": "A1", "amount": 30}),
    ("email_customer", {"to": "ann@example.com"}),
]


def setup(database_url: str, schema: str) -> None:
    """The model's counter and the server's world, in the test's schema."""
    setup_tables(database_url, schema, "CREATE TABLE IF NOT EXISTS model_calls (run_id text, step int);")
    mcp_server.setup(database_url, schema)


def script(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    step = sum(isinstance(m, ModelResponse) for m in messages)
    with connect() as c:
        c.execute(
            "INSERT INTO model_calls (run_id, step) VALUES (%s, %s)", (current_action().run_id, step + 1)
        )
    if step < len(STEPS):
        tool, args = STEPS[step]
        return ModelResponse([ToolCallPart(tool, args, f"call-{step + 1}")])
    returns = [p for m in messages for p in getattr(m, "parts", []) if isinstance(p, ToolReturnPart)]
    return ModelResponse([TextPart("; ".join(f"{p.tool_name}={p.model_response_str()}" for p in returns))])


class _Inheriting(StdioTransport):
    """Starts the server with the environment as it is when the agent connects (the test's world)."""

    async def connect(self, **kwargs: Any) -> Any:
        self.env = dict(os.environ)
        return await super().connect(**kwargs)


def server(url: str | None = None) -> AbstractToolset[Any]:
    """The MCP server's tools: its own process, over stdio, or the HTTP server at ``url``."""
    if url:
        return MCPToolset(url, id="shop", init_timeout=30)
    stdio = _Inheriting(sys.executable, ["-m", "tests.apps.mcp_server"], cwd=ROOT, keep_alive=False)
    return MCPToolset(stdio, id="shop", init_timeout=30)  # its start: a few seconds on a busy test machine


def build(name: str, tools: dict[str, Declared] | None = None, url: str | None = None) -> App:
    app = App()
    durability = OutlastDurability(app, tools=tools)
    agent = Agent(FunctionModel(script), name=name, toolsets=[server(url)], capabilities=[durability])

    @app.workflow(name)
    async def shop(run: Run, prompt: str) -> dict[str, Any]:
        result = await run_agent(run, agent, prompt)
        return {"output": result.output, "in_doubt": run.in_doubt(f"{name}.email_customer")}

    return app


app = build("mcp_shop")
overriding_app = build("mcp_overriding", {"email_customer": idempotent(), "find_order": plain()})
# over streamable HTTP, to the server a crash test started at MCP_URL (read when the app is imported)
http_app = build("mcp_http", url=os.environ.get("MCP_URL", "http://127.0.0.1:9/mcp"))
