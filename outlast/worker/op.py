"""``Op`` is one tool call of a run, made once when the workflow calls it (``Dispatcher.op``).

It carries what every step of the call reads: its position (``id``), the tool, the call's own
arguments (validated: what the tool is given), the same arguments **sealed** once (secret arguments as
their keyed hash: what the journal, spans and logs hold), their hash, and the idempotency key. The
admission, the dispatch, the gap table and the outcome are each given the ``Op``; none seals again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from outlast.app import Tool


@dataclass(frozen=True, slots=True)
class Op:
    """One operation of one run, from its intention to its result."""

    id: str  # its position in the run: ``op-N`` (``undo-op-N`` for a compensation)
    tool: Tool
    args: dict[str, Any]  # the call's own values: given to the tool only, never stored
    sealed: dict[str, Any]  # as journaled: secret arguments as their keyed hash
    args_hash: str
    key: str  # its idempotency key: ``<run id>:<op id>``
    name: str  # the tool's name (``tool.name``), kept: each step of the call reads it
