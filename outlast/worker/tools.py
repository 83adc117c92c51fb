"""The tool runtime: one dispatch of a registered tool, its retries and its timeout (the
declarations themselves are ``outlast.app``'s). A sync tool runs in a thread: the event loop goes
on serving the other runs meanwhile."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import inspect
import threading
from collections.abc import Callable
from typing import Any

from outlast import metrics
from outlast.app import Tool
from outlast.errors import ToolTimeout


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
    call = tool.fn(**args) if inspect.iscoroutinefunction(tool.fn) else _in_thread(tool.fn, args)
    if tool.timeout is None:
        return await call
    try:
        return await asyncio.wait_for(call, tool.timeout)
    except TimeoutError:
        raise ToolTimeout(f"tool '{tool.name}' did not return within {tool.timeout:g}s") from None


async def _in_thread(fn: Callable[..., Any], args: dict[str, Any]) -> Any:
    """Run a sync tool in a daemon thread of its own: a tool that hangs can be given up on and
    never keeps the process from exiting (a pool's threads would)."""
    loop = asyncio.get_running_loop()
    done: asyncio.Future[Any] = loop.create_future()
    ctx = contextvars.copy_context()  # current_action() inside the tool

    def settle(value: Any, exc: BaseException | None) -> None:
        if done.done():
            return
        if exc is None:
            done.set_result(value)
        else:
            done.set_exception(exc)

    def target() -> None:
        try:
            value, exc = ctx.run(fn, **args), None
        except BaseException as e:  # handed to the awaiting coroutine, whatever it is
            value, exc = None, e
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody waits any more
            loop.call_soon_threadsafe(settle, value, exc)

    threading.Thread(target=target, name=f"outlast-tool-{fn.__name__}", daemon=True).start()
    return await done
