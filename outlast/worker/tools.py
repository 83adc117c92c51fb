"""The tool runtime: one dispatch of a registered tool, its retries and its timeout (the
declarations themselves are ``outlast.app``'s). A sync tool runs on one of the process's tool threads
(``threads.py``): the event loop goes on serving the other runs meanwhile."""

from __future__ import annotations

import asyncio
import inspect
from typing import Any

from outlast import metrics
from outlast.app import Tool
from outlast.errors import ToolTimeout
from outlast.worker.threads import TOOL_THREADS


async def invoke(tool: Tool, args: dict[str, Any]) -> Any:
    """Run the tool once (sync tools in a thread), retrying per its policy."""
    if tool.retry is None:
        return await _once(tool, args)
    async for attempt in tool.retry.policy(after_timeout=tool.effect == "read" or tool.idempotent):
        with attempt:
            if attempt.retry_state.attempt_number > 1:
                metrics.dispatch_retried(tool.name)
            return await _once(tool, args)
    raise AssertionError("unreachable")  # pragma: no cover


async def _once(tool: Tool, args: dict[str, Any]) -> Any:
    call = tool.fn(**args) if inspect.iscoroutinefunction(tool.fn) else TOOL_THREADS.call(tool.fn, args)
    if tool.timeout is None:
        return await call
    try:
        return await asyncio.wait_for(call, tool.timeout)
    except TimeoutError:
        raise ToolTimeout(f"tool '{tool.name}' did not return within {tool.timeout:g}s") from None
