"""This module gives each tool of an MCP server the default effect its annotations declare.

Every integration that calls MCP tools (``outlast.agents``, ``outlast.integrations.langgraph``)
maps them here, and sends a call's operation's idempotency key where this module says."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

IDEMPOTENCY_KEY_META = "outlast/idempotency-key"
"""The ``_meta`` entry of an MCP tool call that carries its operation's idempotency key: the same
on every dispatch of the operation, so that a server can ignore the repeat of an idempotent call."""


def mcp_effect_name(annotations: Mapping[str, Any] | None) -> Literal["read", "idempotent", "plain"]:
    """The effect a tool's annotations declare: ``readOnlyHint`` read, ``idempotentHint``
    idempotent, neither plain. Annotations are hints: each integration lets the app override them."""
    hints = annotations or {}
    if hints.get("readOnlyHint"):
        return "read"
    if hints.get("idempotentHint"):
        return "idempotent"
    return "plain"
