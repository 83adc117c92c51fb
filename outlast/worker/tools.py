"""The tool runtime makes one dispatch of a registered tool, with its retries and its timeout (the
declarations themselves are ``outlast.app``'s). A sync tool runs on one of the process's tool threads
(``threads.py``): the event loop goes on serving the other runs meanwhile."""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any

from outlast import _metrics as metrics
from outlast._journal import storable
from outlast.app import Tool
from outlast.errors import ToolTimeout
from outlast.worker.threads import TOOL_THREADS

if TYPE_CHECKING:
    from outlast.worker.control import SyncCalls


async def invoke(tool: Tool, args: dict[str, Any], awaited: SyncCalls | None = None) -> Any:
    """Run the tool once (sync tools in a thread), retrying per its policy. A sync call with no
    ``timeout=`` to bound it is held in ``awaited`` while awaited (a run's ``RunControl.sync_calls``:
    abandoned when a cancellation outlives its grace)."""
    if tool.retry is None:
        return await _once(tool, args, awaited)
    async for attempt in tool.retry.policy(after_timeout=tool.effect == "read" or tool.idempotent):
        with attempt:
            if attempt.retry_state.attempt_number > 1:
                metrics.dispatch_retried(tool.name)
            return await _once(tool, args, awaited)
    raise AssertionError("unreachable")  # pragma: no cover


async def _once(tool: Tool, args: dict[str, Any], awaited: SyncCalls | None) -> Any:
    fn = tool.fn
    if tool.is_async:
        call = fn(**args)
    elif tool.timeout is not None:
        call = TOOL_THREADS.call(fn, args)
    else:  # a sync call with no timeout= is bounded by its run's cancellation only
        if awaited is not None:
            awaited.check()
        call = TOOL_THREADS.call(fn, args, awaited)
    if tool.timeout is None:
        return await call
    try:
        return await asyncio.wait_for(call, tool.timeout)
    except TimeoutError:
        raise ToolTimeout(f"tool '{tool.name}' did not return within {tool.timeout:g}s") from None


def error_payload(exc: BaseException, message: str | None = None) -> dict[str, Any]:
    return {"type": type(exc).__name__, "message": storable(str(exc) if message is None else message)}
