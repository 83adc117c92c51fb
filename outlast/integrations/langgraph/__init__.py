"""This package gives LangGraph apps outlast's Postgres and runs (the ``langgraph`` extra).

- ``OutlastCheckpointer`` (``checkpointer.py``): a LangGraph checkpointer over outlast's Postgres,
  for any LangGraph app, inside a workflow or not.
- ``DurableGraph`` (``graph.py``): a compiled graph run inside a workflow, each node's execution
  an operation of the run whose state update is journaled.
"""

from outlast.integrations.langgraph.checkpointer import OutlastCheckpointer
from outlast.integrations.langgraph.graph import DurableGraph, NodeEffect

__all__ = ["DurableGraph", "NodeEffect", "OutlastCheckpointer"]
