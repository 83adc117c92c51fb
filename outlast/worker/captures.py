"""``current_action().capture(request)`` journals what a tool sent, as it left the process.

A ``capture`` entry of the operation (chained like every entry) is appended after the dispatch
and before its result (or its in-doubt declaration), so that the request and the answer are read
together and the request is there even when the answer is not. A tool that never captures costs
one empty-list test. The request is stored with the call's secret values masked (``[secret]``,
after the app's redaction hook); one larger than ``OUTLAST_MAX_PAYLOAD`` is kept as its hash and
size only.
"""

from __future__ import annotations

import json
from typing import Any

from outlast._journal import Unstorable, canonical, check_size, digest
from outlast._secrets import Secrets
from outlast.action import Action
from outlast.app import Tool
from outlast.worker.replayer import Replayer


def stored(
    secrets: Secrets, tool: str, args: dict[str, Any], request: Any, limit: int | None
) -> dict[str, Any]:
    """The capture entry's data for ``request``: ``request`` (masked), ``request_hash`` (SHA-256
    of its stored JSON text) and ``bytes``; or, when it cannot be kept, why not in ``withheld``."""
    try:
        # the app's redaction hook and the call's secret values on the text, then every secret
        # value the run knows in each string (one written with escapes in JSON text too)
        kept = secrets.scrub(json.loads(secrets.redact(tool, args, canonical(request))))
        text = canonical(kept)
    except Unstorable as exc:
        return {"tool": tool, "withheld": f"the request is not storable: {exc}"}
    except ValueError:  # the redaction hook left text that is no longer JSON
        return {"tool": tool, "withheld": "the redaction hook made the request unreadable as JSON"}
    size = len(text.encode())
    data: dict[str, Any] = {"tool": tool, "request_hash": digest(text), "bytes": size}
    if limit is not None:
        try:
            check_size(text, limit)
        except Unstorable as exc:
            return {**data, "withheld": str(exc)}
    return {**data, "request": kept}


async def journal_capture(
    replayer: Replayer, secrets: Secrets, tool: Tool, args: dict[str, Any], action: Action, limit: int | None
) -> None:
    """Journal the last request the dispatch captured (the caller checked there is one)."""
    data = stored(secrets, tool.name, args, action.captured[-1], limit)
    await replayer.append("capture", action.operation_id, data)
