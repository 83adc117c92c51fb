"""This module lists an MCP server's tools for a LangGraph graph run by ``DurableGraph`` (the
``langgraph`` extra, with the ``mcp`` package).

``await mcp_tools(session)`` lists the tools of the server an ``mcp`` ``ClientSession`` is open on,
as LangChain tools (their input schema the server's). Each call carries its operation's
idempotency key in the call's ``_meta`` (``IDEMPOTENCY_KEY_META``, as ``outlast.agents`` sends
it), so that a server can ignore the repeat of an idempotent call. Each tool keeps the server's
annotations in its ``metadata``: put in a ``ToolNode`` of a ``DurableGraph``, each call is an
operation of the effect they declare (``readOnlyHint`` read, ``idempotentHint`` idempotent,
neither plain), unless the graph's ``tools=`` says otherwise. A call the server answers as an error
is answered to the model as a failed call.

(langchain-mcp-adapters' ``load_mcp_tools`` needs ``mcp`` 1.x and sends no ``_meta``: this is the
same conversion over ``mcp`` 2.x, with the key.)"""

from __future__ import annotations

from typing import Any, cast

from langchain_core.tools import BaseTool, StructuredTool, ToolException
from mcp import ClientSession
from mcp.types import PaginatedRequestParams, TextContent, Tool

from outlast._mcp import IDEMPOTENCY_KEY_META
from outlast.action import current_action

__all__ = ["mcp_tools"]


async def mcp_tools(session: ClientSession) -> list[BaseTool]:
    """The server's tools as LangChain tools, each call keyed (see the module doc)."""
    tools: list[BaseTool] = []
    cursor: str | None = None
    while True:
        listed = await session.list_tools(params=PaginatedRequestParams(cursor=cursor) if cursor else None)
        tools.extend(_tool(session, t) for t in listed.tools)
        cursor = listed.next_cursor
        if not cursor:
            return tools


def _tool(session: ClientSession, tool: Tool) -> BaseTool:
    async def call(**arguments: Any) -> str:
        try:
            meta = {IDEMPOTENCY_KEY_META: current_action().idempotency_key}
        except RuntimeError:  # outside an operation: no key to send
            meta = None
        result = await session.call_tool(tool.name, arguments, meta=cast(Any, meta))
        text = "\n".join(c.text for c in result.content if isinstance(c, TextContent))
        if result.is_error:
            raise ToolException(text)
        return text

    annotations = tool.annotations.model_dump(by_alias=True, exclude_none=True) if tool.annotations else {}
    return StructuredTool(
        name=tool.name,
        description=tool.description or "",
        args_schema=tool.input_schema,
        coroutine=call,
        metadata=annotations,
        handle_tool_error=True,
    )
