"""The OpenAI Agents SDK's MCP test world: a scripted ``Model`` (counted in ``model_calls``) whose
tools are those of a real MCP server process (tests/apps/mcp_server.py), reached over stdio or
over streamable HTTP (``build(..., url=...)``). The script: look the order up (read-only), refund
it (idempotent), email the customer (neither), answer with what the tools returned.
``overriding_app`` declares the email idempotent and the lookup plain, over the server's word."""

from __future__ import annotations

import os
import sys
from typing import Any

from agents import Agent
from agents.items import ModelResponse
from agents.mcp import MCPServer, MCPServerStdio, MCPServerStreamableHttp
from agents.models.interface import Model
from agents.usage import Usage

from outlast import App, Run, current_action
from outlast.integrations.openai_agents import DurableAgent, ToolEffect
from tests.apps import connect, mcp_server, setup_tables
from tests.apps.mcp_shop import ROOT, STEPS
from tests.apps.oai_shop import call, text


def setup(database_url: str, schema: str) -> None:
    """The model's counter and the server's world, in the test's schema."""
    setup_tables(database_url, schema, "CREATE TABLE IF NOT EXISTS model_calls (run_id text, step int);")
    mcp_server.setup(database_url, schema)


class ScriptedModel(Model):
    async def get_response(
        self, system_instructions: Any, input: Any, *args: Any, **kwargs: Any
    ) -> ModelResponse:
        items = [i for i in ([] if isinstance(input, str) else input) if isinstance(i, dict)]
        names = {i["call_id"]: i["name"] for i in items if i.get("type") == "function_call"}
        step = len(names)
        with connect() as c:
            c.execute(
                "INSERT INTO model_calls (run_id, step) VALUES (%s, %s)", (current_action().run_id, step + 1)
            )
        if step < len(STEPS):
            tool, args = STEPS[step]
            output: list[Any] = [call(f"call-{step + 1}", tool, args)]
        else:
            outputs = [
                f"{names[i['call_id']]}={_text_of(i['output'])}"
                for i in items
                if i.get("type") == "function_call_output"
            ]
            output = [text("; ".join(outputs))]
        return ModelResponse(output=output, usage=Usage(requests=1), response_id=None)

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("the scripted model does not stream")


def _text_of(output: Any) -> str:
    """A tool's output as the model reads it: an MCP tool's text contents, else as it is."""
    if isinstance(output, list):
        return "".join(str(part.get("text", "")) for part in output if isinstance(part, dict))
    return str(output)


def server(url: str | None = None) -> MCPServer:
    """The MCP server's tools: its own process, over stdio, or the HTTP server at ``url``."""
    if url:
        return MCPServerStreamableHttp({"url": url}, client_session_timeout_seconds=30)
    params = {"command": sys.executable, "args": ["-m", "tests.apps.mcp_server"], "cwd": ROOT}
    return MCPServerStdio(params, client_session_timeout_seconds=30)  # type: ignore[arg-type]


def build(name: str, tools: dict[str, Any] | None = None, url: str | None = None) -> App:
    app = App()
    mcp = server(url)
    agent = Agent(name="support", model=ScriptedModel(), mcp_servers=[mcp])
    durable = DurableAgent(app, name, agent, tools=tools)

    @app.workflow(name, version="1")
    async def shop(run: Run, prompt: str) -> dict[str, Any]:
        if isinstance(mcp, MCPServerStdio):
            mcp.params.env = dict(os.environ)  # the server's world: the test's schema
        async with mcp:
            result = await durable.run(run, prompt)
        return {"output": result.final_output, "in_doubt": run.in_doubt(durable.tool_name("email_customer"))}

    return app


app = build("oai_mcp")
overriding_app = build(
    "oai_mcp_overriding", {"email_customer": "idempotent", "find_order": ToolEffect("plain")}
)
