"""This package gives LangGraph apps outlast's Postgres and runs (the ``langgraph`` extra).

- ``OutlastCheckpointer`` (``checkpointer.py``): a LangGraph checkpointer over outlast's Postgres,
  for any LangGraph app, inside a workflow or not.
- ``DurableGraph`` (``graph.py``): a compiled graph run inside a workflow, each node's execution
  an operation of the run whose state update is journaled; each tool call of a ``ToolNode`` an
  operation with its tool's declared effect.
- ``mcp_tools`` (``mcp.py``): an MCP server's tools for a graph, each call keyed in its ``_meta``
  (needs the ``mcp`` package).
"""

from outlast.integrations.langgraph.checkpointer import OutlastCheckpointer
from outlast.integrations.langgraph.graph import DurableGraph, EffectName, NodeEffect, StreamMode


def __getattr__(name: str) -> object:
    if name == "mcp_tools":  # its module needs the mcp package
        from outlast.integrations.langgraph.mcp import mcp_tools

        return mcp_tools
    raise AttributeError(name)


__all__ = ["DurableGraph", "EffectName", "NodeEffect", "OutlastCheckpointer", "StreamMode", "mcp_tools"]
