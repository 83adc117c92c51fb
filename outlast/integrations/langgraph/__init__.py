"""LangGraph and outlast (the ``langgraph`` extra).

- ``OutlastCheckpointer`` (``checkpointer.py``): a LangGraph checkpointer over outlast's Postgres,
  for any LangGraph app, inside a workflow or not.
"""

from outlast.integrations.langgraph.checkpointer import OutlastCheckpointer

__all__ = ["OutlastCheckpointer"]
